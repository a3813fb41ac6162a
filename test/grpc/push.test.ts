// Push subscriptions through the official Node client over gRPC (PUBSUB_EMULATOR_HOST only):
// created with a push endpoint, the broker POSTs its messages there; modifyPushConfig switches
// it to pull (the streaming subscriber then receives) and back.

import t from 'tap';
import { startEndpoint } from '../push/_endpoint.ts';
import { waitUntil } from '../helpers/wait.ts';
import { listeningBroker, type Message, pubsubFor, unique } from './_official.ts';

const broker = await listeningBroker(t, 'grpc-push');
const pubsub = pubsubFor(broker.host);
t.teardown(() => pubsub.close());

t.test('push, then pull, then push again, by modifyPushConfig', async (t) => {
  const endpoint = await startEndpoint(t);
  const [topic] = await pubsub.createTopic(unique('push-topic'));
  const [subscription] = await topic.createSubscription(unique('push-sub'), {
    pushConfig: { pushEndpoint: endpoint.url, attributes: { 'x-goog-version': 'v1' } },
  });
  t.teardown(async () => {
    await subscription.close();
    await subscription.delete();
    await topic.delete();
  });
  const [metadata] = await subscription.getMetadata();
  t.equal(metadata.pushConfig?.pushEndpoint, endpoint.url, 'the endpoint reads back');

  await topic.publishMessage({ data: Buffer.from('pushed-1') });
  t.ok(await waitUntil(() => endpoint.requests.length === 1, 10_000), 'pushed to the endpoint');
  t.equal(Buffer.from(endpoint.requests[0].json.message.data, 'base64').toString(), 'pushed-1');

  await subscription.modifyPushConfig({});
  t.notOk((await subscription.getMetadata())[0].pushConfig?.pushEndpoint, 'now a pull subscription');
  const received: string[] = [];
  subscription.on('message', (message: Message) => {
    received.push(message.data.toString());
    message.ack();
  });
  await topic.publishMessage({ data: Buffer.from('pulled-1') });
  t.ok(await waitUntil(() => received.includes('pulled-1'), 10_000), 'the streaming subscriber receives');
  await subscription.close();

  await subscription.modifyPushConfig({ pushEndpoint: endpoint.url });
  await topic.publishMessage({ data: Buffer.from('pushed-2') });
  t.ok(
    await waitUntil(
      () => endpoint.requests.some((r) => Buffer.from(r.json?.message?.data ?? '', 'base64').toString() === 'pushed-2'),
      10_000,
    ),
    'pushed again after switching back',
  );
  t.equal(endpoint.requests.length, 2, 'nothing pulled was pushed');
});
