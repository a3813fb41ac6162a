// The official Node client (REST transport) publishes with ordering keys; pulls through the
// v1 client get each key's messages in publish order. Client set-up as in official-client.test.ts.

process.env.METADATA_SERVER_DETECTION = 'none';

import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { ClientConfig } from '@google-cloud/pubsub';
import { Redis } from 'ioredis';
import { buildApp } from '../../src/app.ts';
import { testRedisUrl, uniquePrefix } from '../helpers/redis.ts';

const { PubSub, v1 } = await import('@google-cloud/pubsub');
const { PassThroughClient } = await import('google-auth-library');

const redis = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1 });
const app = await buildApp({ redis, keyPrefix: uniquePrefix('official-ordering'), pullWaitMs: 500 });
await app.listen({ port: 0, host: '127.0.0.1' });
const port = (app.server.address() as AddressInfo).port;
const authClient = new PassThroughClient({
  transporterOptions: { validateStatus: () => true },
}) as unknown as ClientConfig['authClient'];
const pubsub = new PubSub({
  projectId: 'ordering',
  apiEndpoint: `127.0.0.1:${port}`,
  fallback: 'rest',
  protocol: 'http',
  authClient,
} as ClientConfig);
const subscriber = new v1.SubscriberClient({
  servicePath: '127.0.0.1',
  port,
  fallback: 'rest',
  protocol: 'http',
  authClient,
});
t.teardown(async () => {
  await subscriber.close();
  await pubsub.close();
  await app.close();
  redis.disconnect();
});

t.test('ordering keys published by the official client are pulled in order', async (t) => {
  const [topic] = await pubsub.createTopic('orders');
  await topic.createSubscription('orders-ordered', { enableMessageOrdering: true });
  const publisher = pubsub.topic('orders', { messageOrdering: true, batching: { maxMessages: 7, maxMilliseconds: 5 } });
  const keys = ['customer-a', 'customer-b', 'customer-c'];
  const published = new Map<string, string[]>(keys.map((key) => [key, []]));
  const sends: Promise<string>[] = [];
  for (let i = 0; i < 60; i++) {
    const key = keys[i % keys.length];
    const text = `${key}:${i}`;
    published.get(key)!.push(text);
    sends.push(publisher.publishMessage({ data: Buffer.from(text), orderingKey: key }));
  }
  await Promise.all(sends);

  const received = new Map<string, string[]>(keys.map((key) => [key, []]));
  for (let round = 0; round < 100 && [...received.values()].flat().length < 60; round++) {
    const [response] = await subscriber.pull({
      subscription: 'projects/ordering/subscriptions/orders-ordered',
      maxMessages: 10,
    });
    const messages = response.receivedMessages ?? [];
    for (const { message } of messages)
      received.get(message!.orderingKey!)!.push(Buffer.from(message!.data as Uint8Array).toString());
    if (messages.length > 0) {
      await subscriber.acknowledge({
        subscription: 'projects/ordering/subscriptions/orders-ordered',
        ackIds: messages.map((m) => m.ackId!),
      });
    }
  }
  for (const key of keys) t.same(received.get(key), published.get(key), `${key} arrives in publish order`);
});
