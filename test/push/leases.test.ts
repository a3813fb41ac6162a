// Push delivery under a random mix of answers (success, 500, no answer within the ack
// deadline), by two brokers on one Redis, and with ordering keys: every message is acked once
// the endpoint answered it with a success and never pushed after that, none is lost, the
// endpoint never has two requests of one message open at once, and a key never has two.

import t, { type Test } from 'tap';
import { createBroker } from '../../src/broker/broker.ts';
import { b64, startBroker, type TestBroker } from '../helpers/app.ts';
import { redisTargets } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';
import { type PushedRequest, pushedText, startEndpoint } from './_endpoint.ts';

const T = '/v1/projects/p/topics';
const S = '/v1/projects/p/subscriptions';

/** A second broker on the same Redis and key prefix: another node pushing the same subscriptions. */
async function secondNode(t: Test, broker: TestBroker) {
  const redis = redisTargets()[0].connect();
  const other = await createBroker({ redis, keyPrefix: broker.prefix, push: { closeWaitMs: 100 } });
  t.teardown(async () => {
    await other.close();
    redis.disconnect();
  });
  return other;
}

/** Watches the requests for overlaps: two open at once for one message, or for one ordering key. */
function overlapWatch(keyOf: (request: PushedRequest) => string) {
  const open = new Map<string, number>();
  const overlaps: string[] = [];
  return {
    overlaps,
    enter(request: PushedRequest) {
      const key = keyOf(request);
      if (open.get(key)) overlaps.push(key);
      open.set(key, (open.get(key) ?? 0) + 1);
    },
    leave(request: PushedRequest) {
      open.set(keyOf(request), open.get(keyOf(request))! - 1);
    },
  };
}

const random = (seed: number) => () => {
  seed = (seed * 1103515245 + 12345) % 2 ** 31;
  return seed / 2 ** 31;
};

t.test('two nodes, answers mixed at random: each message acked once answered 2xx, never lost', async (t) => {
  const broker = await startBroker(t, { name: 'push-mix' });
  await secondNode(t, broker);
  const next = random(42);
  const watch = overlapWatch((request) => request.json.message.messageId);
  const acked = new Map<string, number>();
  const pushedAfterAck: string[] = [];
  const hung = new Set<string>();
  const endpoint = await startEndpoint(t, async (request) => {
    const id = request.json.message.messageId;
    if (acked.has(id)) pushedAfterAck.push(id);
    watch.enter(request);
    const roll = next();
    // Some requests are answered after a while, so that both nodes have requests under way.
    await new Promise((resolve) => setTimeout(resolve, Math.floor(next() * 20)));
    // A few messages get no answer to their first push (each holds a place in the window until it times out).
    const first = !hung.has(id) && pushedText(request).endsWith('-7');
    if (first) {
      hung.add(id);
      // No answer: the broker ends the request before the lease ends (ack deadline 10 s) and the
      // message comes again. The request is open until the broker closes its connection.
      void request.closed.then(() => watch.leave(request));
      return 'hang';
    }
    watch.leave(request);
    if (roll < 0.3) return 500;
    acked.set(id, Date.now());
    return roll < 0.7 ? 204 : 200;
  });
  await broker.api('PUT', `${T}/mix`, {});
  await broker.api('PUT', `${S}/mix`, {
    topic: 'projects/p/topics/mix',
    ackDeadlineSeconds: 10,
    pushConfig: { pushEndpoint: endpoint.url },
  });
  // Both nodes learn of the subscription from the announcement.
  await new Promise((resolve) => setTimeout(resolve, 200));
  const ids: string[] = [];
  for (let batch = 0; batch < 4; batch++) {
    const texts = Array.from({ length: 50 }, (_, i) => `m-${batch}-${i}`);
    const reply = await broker.api('POST', `${T}/mix:publish`, {
      messages: texts.map((text) => ({ data: b64(text) })),
    });
    ids.push(...reply.body.messageIds);
  }
  t.ok(
    await waitUntil(() => acked.size === ids.length, 40_000, 50),
    `every message acked (${acked.size}/${ids.length})`,
  );
  t.same(new Set(acked.keys()), new Set(ids), 'exactly the published messages');
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  t.same(pushedAfterAck, [], 'no message pushed again after a success was answered');
  t.same(watch.overlaps, [], 'never two requests of one message open at once');
  t.ok(endpoint.requests.length > ids.length, `failures pushed again (${endpoint.requests.length} requests)`);
  t.ok(endpoint.requests.every((request) => pushedText(request).startsWith('m-')));
});

t.test('ordering keys: one request open per key, acked in publish order, failures pushed again in order', async (t) => {
  const broker = await startBroker(t, { name: 'push-ordered' });
  await secondNode(t, broker);
  const next = random(7);
  const watch = overlapWatch((request) => request.json.message.orderingKey);
  const ackedByKey = new Map<string, string[]>();
  const endpoint = await startEndpoint(t, async (request) => {
    watch.enter(request);
    await new Promise((resolve) => setTimeout(resolve, Math.floor(next() * 5)));
    watch.leave(request);
    if (next() < 0.3) return 500;
    const { orderingKey, data } = request.json.message;
    ackedByKey.set(orderingKey, [...(ackedByKey.get(orderingKey) ?? []), Buffer.from(data, 'base64').toString()]);
    return 204;
  });
  await broker.api('PUT', `${T}/ordered`, {});
  await broker.api('PUT', `${S}/ordered`, {
    topic: 'projects/p/topics/ordered',
    enableMessageOrdering: true,
    pushConfig: { pushEndpoint: endpoint.url },
  });
  await new Promise((resolve) => setTimeout(resolve, 200));
  const keys = ['a', 'b', 'c'];
  const expected = new Map(keys.map((key) => [key, [] as string[]]));
  for (let round = 0; round < 4; round++) {
    for (const key of keys) {
      const texts = Array.from({ length: 5 }, (_, i) => `${key}-${round * 5 + i}`);
      expected.get(key)!.push(...texts);
      await broker.api('POST', `${T}/ordered:publish`, {
        messages: texts.map((text) => ({ data: b64(text), orderingKey: key })),
      });
    }
  }
  const done = () => keys.every((key) => (ackedByKey.get(key)?.length ?? 0) >= 20);
  t.ok(await waitUntil(done, 40_000, 50), 'every message acked');
  for (const key of keys) t.same(ackedByKey.get(key), expected.get(key), `key ${key}: acked once each, in order`);
  t.same(watch.overlaps, [], 'never two requests of one key open at once');
});

t.test('close waits for requests under way, gives back the rest; nothing is lost', async (t) => {
  const broker = await startBroker(t, { name: 'push-close' });
  const other = await secondNode(t, broker);
  let slow = true;
  const endpoint = await startEndpoint(t, async () => {
    if (slow) await new Promise((resolve) => setTimeout(resolve, 50));
    return 204;
  });
  await broker.api('PUT', `${T}/closing`, {});
  await broker.api('PUT', `${S}/closing`, {
    topic: 'projects/p/topics/closing',
    pushConfig: { pushEndpoint: endpoint.url },
  });
  await new Promise((resolve) => setTimeout(resolve, 200));
  const reply = await broker.api('POST', `${T}/closing:publish`, {
    messages: Array.from({ length: 100 }, (_, i) => ({ data: b64(`c-${i}`) })),
  });
  t.ok(await waitUntil(() => endpoint.requests.length >= 5, 5000, 5), 'pushing');
  await other.close();
  t.same(other.push.pushing, [], 'the closed node pushes nothing');
  slow = false;
  const ids = new Set(reply.body.messageIds);
  const seen = () => new Set(endpoint.requests.map((request) => request.json.message.messageId));
  t.ok(await waitUntil(() => seen().size === ids.size, 20_000, 20), 'every message reached the endpoint');
  t.same(seen(), ids);
});
