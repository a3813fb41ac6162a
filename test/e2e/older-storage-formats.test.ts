// A store written in storage format 7 or 8 keeps delivering after a broker of this format
// claims it (src/redis/storage-format.ts): with ordering keys caught in every state a key can be
// in (its messages outstanding, with or without more behind them; queued in the ready list;
// waiting out a retry backoff in the delayed set; its oldest message being forwarded to the
// dead-letter topic by a broker that stopped), every message is delivered, each key's in order,
// once acknowledged never again, and the forwarded one is on the dead-letter topic once. The
// store is made by this version, then its key states and keyed deliveries are written as the
// older format would have them: format 8 marks every lease `o` and counts a key's only leased
// message in its state (`-1`) instead of keeping `q<seq>` and marking the lease `s`; format 7
// has neither `q<seq>` nor minus a count.

import t, { type Test } from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { Keys } from '../../src/redis/keys.ts';
import { STORAGE_FORMAT } from '../../src/redis/storage-format.ts';
import { b64, okApi, startBroker, unb64 } from '../helpers/app.ts';
import { redisTargets, uniquePrefix } from '../helpers/redis.ts';

const P = '/v1/projects/p';
/** Longer than a forwarder's claim (FORWARD_CLAIM_US in pull.lua) and than the retry backoff. */
const CLAIM_RUNS_OUT_S = 31;

type Received = { ackId: string; message: { data?: string; orderingKey?: string } };

async function openBroker(t: Test, prefix: string, clock: ManualClock) {
  const { app, api } = await startBroker(t, { prefix, clock, pullWaitMs: 0 });
  const ok = okApi(api);
  const pull = async (subscription: string): Promise<Received[]> =>
    (await ok('POST', `${P}/subscriptions/${subscription}:pull`, { maxMessages: 100, returnImmediately: true }))
      .receivedMessages ?? [];
  const publish = (key: string, ...data: string[]) =>
    ok('POST', `${P}/topics/orders:publish`, { messages: data.map((d) => ({ data: b64(d), orderingKey: key })) });
  const ack = (subscription: string, received: Received[]) =>
    ok('POST', `${P}/subscriptions/${subscription}:acknowledge`, { ackIds: received.map((r) => r.ackId) });
  const nack = (received: Received[]) =>
    ok('POST', `${P}/subscriptions/orders:modifyAckDeadline`, {
      ackIds: received.map((r) => r.ackId),
      ackDeadlineSeconds: 0,
    });
  return { app, ok, pull, publish, ack, nack };
}

const text = (r: Received) => `${r.message.orderingKey}:${unb64(r.message.data)}`;

for (const format of ['7', '8'])
  t.test(`a store of format ${format} keeps delivering, keys mid-flight included, after the upgrade`, async (t) => {
    const prefix = uniquePrefix(`format-${format}`);
    const keys = new Keys(prefix);
    const clock = new ManualClock();
    const old = await openBroker(t, prefix, clock);
    await old.ok('PUT', `${P}/topics/orders`, {});
    await old.ok('PUT', `${P}/topics/orders-dead`, {});
    await old.ok('PUT', `${P}/subscriptions/orders-dead`, { topic: 'projects/p/topics/orders-dead' });
    await old.ok('PUT', `${P}/subscriptions/orders`, {
      topic: 'projects/p/topics/orders',
      enableMessageOrdering: true,
      retryPolicy: { minimumBackoff: '10s', maximumBackoff: '10s' },
      deadLetterPolicy: { deadLetterTopic: 'projects/p/topics/orders-dead', maxDeliveryAttempts: 5 },
    });

    // Key `forwarded`: its oldest message fails five deliveries, then its forward stops half-way.
    await old.publish('forwarded', 'poison', 'next');
    for (let attempt = 1; attempt <= 5; attempt++) {
      const received = await old.pull('orders');
      t.same(received.map(text), ['forwarded:poison', 'forwarded:next'], `delivery ${attempt}`);
      await old.nack(received.slice(0, 1));
      clock.advanceSeconds(CLAIM_RUNS_OUT_S);
    }
    const { scripts } = old.app.broker.ctx;
    const { run } = scripts;
    scripts.run = (name, k, args) =>
      name === 'finish-forwarding' ? Promise.reject(new Error('stopped')) : run.call(scripts, name, k, args);
    t.same(await old.pull('orders'), [], 'the poison message is being forwarded');
    scripts.run = run;

    // Keys with messages out: all of them (`out`, `out-two`), or with one published behind them.
    await old.publish('out', 'o1');
    await old.publish('out-two', 'a1', 'a2');
    await old.publish('out-more', 'm1');
    const outstanding = await old.pull('orders');
    t.same(outstanding.map(text).sort(), ['out-more:m1', 'out-two:a1', 'out-two:a2', 'out:o1'], 'leased');
    await old.publish('out-more', 'm2');
    // A key waiting out its retry backoff.
    await old.publish('backoff', 'b1');
    const nacked = await old.pull('orders');
    t.same(nacked.map(text), ['backoff:b1']);
    await old.nack(nacked);
    // Queued keys: one message, several.
    await old.publish('queued', 'q1');
    await old.publish('queued-more', 'r1');
    await old.publish('queued-more', 'r2', 'r3');
    await old.app.close(); // stopped: the store is left as it was

    // The store as format 7 leaves it.
    const redis = redisTargets()[0].connect();
    t.teardown(() => redis.disconnect());
    const record = JSON.parse((await redis.hget(keys.subscriptions, 'projects/p/subscriptions/orders'))!);
    const sub = keys.topicData(record.topicUid).subscription(record.uid);
    const states = await redis.hgetall(sub.keyStates);
    t.same(
      Object.keys(states).sort(),
      ['backoff', 'forwarded', 'out', 'out-more', 'out-two', 'queued', 'queued-more'],
      'every key mid-flight',
    );
    t.match(
      states,
      { out: /^q\d+$/, 'out-two': '-2', 'out-more': '1', queued: /^q\d+$/, 'queued-more': 'q' },
      'some in states the older formats do not have',
    );
    const leases = Object.values(await redis.hgetall(sub.keyedDeliveries)).filter((info) => /^\d+\|[os]\|/.test(info));
    t.same(
      leases.sort(),
      ['1|o|out-more', '1|o|out-two', '1|o|out-two', '1|s|out'],
      "a key's only leased message is marked so, and no longer once one is published behind it",
    );
    for (const [seq, info] of Object.entries(await redis.hgetall(sub.keyedDeliveries))) {
      if (!info.includes('|s|')) continue;
      await redis.hset(sub.keyedDeliveries, seq, info.replace('|s|', '|o|'));
      states[info.slice(info.indexOf('|s|') + 3)] = '-1';
    }
    for (const [key, state] of Object.entries(states)) {
      const older = format === '7' ? (state.startsWith('q') ? 'q' : String(Math.abs(Number(state)))) : state;
      await redis.hset(sub.keyStates, key, older);
    }
    await redis.set(keys.storageFormat, format);

    const next = await openBroker(t, prefix, clock);
    t.equal(await redis.get(keys.storageFormat), STORAGE_FORMAT, `the store is claimed for format ${STORAGE_FORMAT}`);
    await next.ack('orders', outstanding);
    const delivered: string[] = [];
    const forwarded: string[] = [];
    for (let round = 0; round < 6; round++) {
      clock.advanceSeconds(CLAIM_RUNS_OUT_S);
      const received = await next.pull('orders');
      delivered.push(...received.map(text));
      if (received.length > 0) await next.ack('orders', received);
      const dead = await next.pull('orders-dead');
      forwarded.push(...dead.map((r) => unb64(r.message.data)));
      if (dead.length > 0) await next.ack('orders-dead', dead);
    }
    t.same(forwarded, ['poison'], 'the forward is finished, once');
    const inKeyOrder = (key: string) => delivered.filter((d) => d.startsWith(`${key}:`));
    t.same(inKeyOrder('forwarded'), ['forwarded:next'], "the forwarded key's next message is delivered");
    t.same(inKeyOrder('out-more'), ['out-more:m2'], 'the message behind the outstanding one');
    t.same(inKeyOrder('backoff'), ['backoff:b1'], 'the one that waited out its backoff');
    t.same(inKeyOrder('queued'), ['queued:q1']);
    t.same(inKeyOrder('queued-more'), ['queued-more:r1', 'queued-more:r2', 'queued-more:r3'], 'in order');
    t.equal(delivered.length, 7, 'and nothing else: the acknowledged ones never again');
    t.equal(await redis.hlen(sub.keyStates), 0, 'every key is idle');
    t.equal(await redis.zcard(sub.keyed), 0, 'with no message left');
  });
