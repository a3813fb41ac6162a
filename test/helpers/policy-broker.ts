// A listening broker for the tests of retry and dead-letter policies on the real clock (Redis
// TIME): REST through app.inject, streaming pull over a real WebSocket, and a count of the pull
// scripts the broker runs (to show that sleepers wait for a wake-up rather than poll).

import type { AddressInfo } from 'node:net';
import { buildApp } from '../../src/app.ts';
import type { ScriptName } from '../../src/redis/scripts.ts';
import { StreamClient } from '../streaming/_ws.ts';
import { jsonApi, okApi, unb64 } from './app.ts';
import { type RedisTarget, redisTargets, uniquePrefix } from './redis.ts';

export const PROJECT = 'p';

export async function openPolicyBroker(
  t: { teardown(fn: () => unknown): void },
  target: RedisTarget = redisTargets()[0],
) {
  const redis = target.connect();
  const app = await buildApp({
    redis,
    keyPrefix: uniquePrefix('policies'),
    pullWaitMs: 10_000,
    streamHeartbeatMs: 5000,
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const clients: StreamClient[] = [];
  t.teardown(async () => {
    for (const client of clients) client.terminate();
    await app.close();
    redis.disconnect();
  });
  const api = jsonApi(app);
  const ok = okApi(api);
  const scripts = app.broker.ctx.scripts;
  const run = scripts.run.bind(scripts);
  const ran = { pulls: 0 };
  scripts.run = (name: ScriptName, keys: string[], args: (string | number | Buffer)[]) => {
    if (name === 'pull') ran.pulls++;
    return run(name, keys, args);
  };
  const port = (app.server.address() as AddressInfo).port;
  /** Opens a stream and waits for its subscriptionProperties. */
  const open = async (subscription: string, first: Record<string, unknown> = {}) => {
    const client = new StreamClient(
      `ws://127.0.0.1:${port}/v1/projects/${PROJECT}/subscriptions/${subscription}:streamingPull`,
    );
    clients.push(client);
    await client.opened;
    client.send({ streamAckDeadlineSeconds: 60, ...first });
    await client.take((frame) => frame?.subscriptionProperties !== undefined);
    return client;
  };
  /** A topic and a subscription of the same ID, with `settings`, and calls on them. */
  const setUp = async (id: string, settings: Record<string, unknown> = {}) => {
    await ok('PUT', `/v1/projects/${PROJECT}/topics/${id}`, {});
    await ok('PUT', `/v1/projects/${PROJECT}/subscriptions/${id}`, {
      topic: `projects/${PROJECT}/topics/${id}`,
      ...settings,
    });
    const sub = `/v1/projects/${PROJECT}/subscriptions/${id}`;
    return {
      publish: async (messages: { data: string; orderingKey?: string; attributes?: Record<string, string> }[]) =>
        (await ok('POST', `/v1/projects/${PROJECT}/topics/${id}:publish`, { messages })).messageIds as string[],
      pull: async (returnImmediately = true, maxMessages = 10) =>
        (await ok('POST', `${sub}:pull`, { maxMessages, returnImmediately })).receivedMessages ?? [],
      ack: (ackIds: string[]) => ok('POST', `${sub}:acknowledge`, { ackIds }),
      nack: (ackIds: string[]) => ok('POST', `${sub}:modifyAckDeadline`, { ackIds, ackDeadlineSeconds: 0 }),
    };
  };
  return { app, api, ok, ran, open, setUp };
}

export const texts = (messages: { message: { data?: string } }[]) => messages.map((m) => unb64(m.message.data));
