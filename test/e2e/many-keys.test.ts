// 10,000 distinct ordering keys on one subscription: every message is delivered once, each
// key's messages in order, and an idle key costs a pull nothing (no scan over keys: the
// ready list only holds keys that can be delivered, which this test checks through Redis).

import t from 'tap';
import { Keys } from '../../src/redis/keys.ts';
import { b64, startBroker } from '../helpers/app.ts';
import { redisTargets } from '../helpers/redis.ts';

const KEYS = 10_000;

for (const target of redisTargets()) {
  t.test(`${KEYS} ordering keys on ${target.name}`, async (t) => {
    const broker = await startBroker(t, { target, name: 'many-keys' });
    const topic = '/v1/projects/p/topics/keys';
    const sub = '/v1/projects/p/subscriptions/keys-sub';
    await broker.api('PUT', topic, {});
    await broker.api('PUT', sub, { topic: 'projects/p/topics/keys', enableMessageOrdering: true });
    // Two messages per key, in two publishes per key.
    for (let round = 0; round < 2; round++) {
      for (let start = 0; start < KEYS; start += 500) {
        await Promise.all(
          Array.from({ length: 500 }, (_, i) =>
            broker.api('POST', `${topic}:publish`, {
              messages: [{ data: b64(`${round}`), orderingKey: `key-${start + i}` }],
            }),
          ),
        );
      }
    }
    const record = await broker.app.broker.subscriptions.read({
      project: 'p',
      id: 'keys-sub',
      full: 'projects/p/subscriptions/keys-sub',
    });
    const data = new Keys(broker.prefix).topicData(record.topicUid).subscription(record.uid);
    t.equal(await broker.redis.llen(data.ready), KEYS, 'one ready entry per key with messages, not per message');

    const seen = new Map<string, string[]>();
    let total = 0;
    for (;;) {
      const response = await broker.api('POST', `${sub}:pull`, { maxMessages: 1000, returnImmediately: true });
      const received = response.body.receivedMessages ?? [];
      if (received.length === 0) break;
      for (const { message } of received) {
        const list = seen.get(message.orderingKey) ?? [];
        list.push(Buffer.from(message.data, 'base64').toString());
        seen.set(message.orderingKey, list);
      }
      total += received.length;
      await broker.api('POST', `${sub}:acknowledge`, { ackIds: received.map((m: any) => m.ackId) });
    }
    t.equal(total, 2 * KEYS, 'every message delivered once');
    t.equal(seen.size, KEYS);
    t.ok(
      [...seen.values()].every((list) => list.join() === '0,1'),
      'each key in publish order',
    );
    t.equal(await broker.redis.hlen(data.keyStates), 0, 'no state left for idle keys');
    t.equal(await broker.redis.zcard(data.keyed), 0);
  });
}
