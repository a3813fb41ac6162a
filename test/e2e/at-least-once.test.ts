// At-least-once delivery (a subscription WITHOUT exactly-once), through the HTTP API, with a
// ManualClock driving leases:
//   - stale, expired and repeated acks answer 200 {}, and a stale ack never acks the newer
//     delivery (the message still comes back when the newer lease runs out);
//   - malformed or foreign ack IDs answer 400 INVALID_ARGUMENT and change nothing, even for the
//     valid IDs sent with them;
//   - an expired lease redelivers, a nack redelivers at once, modifyAckDeadline extends;
//   - publish fans out to every subscription attached at publish time, and only to those;
//   - acked messages are never redelivered, and their bodies leave Redis once every
//     subscription acked them;
//   - a long-polling pull is woken by a publish (and by a nack) from another request.
import { setTimeout as delay } from 'node:timers/promises';
import t, { type Test } from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { resourceName } from '../../src/broker/names.ts';
import { Keys } from '../../src/redis/keys.ts';
import { b64, startBroker, unb64 } from '../helpers/app.ts';
import {
  masterNodes,
  redisTargets,
  scanKeys,
  storedBodies,
  type RedisClient,
  type RedisTarget,
} from '../helpers/redis.ts';

const P = '/v1/projects/p';

interface Received {
  ackId: string;
  message: { messageId: string; data?: string; publishTime: string };
}

/** A broker with a manual clock and short helpers for one test. */
async function setUp(t: Test, target: RedisTarget, options: { pullWaitMs?: number; manualClock?: boolean } = {}) {
  const clock = new ManualClock();
  const broker = await startBroker(t, {
    target,
    clock: options.manualClock === false ? undefined : clock,
    pullWaitMs: options.pullWaitMs,
    name: 'at-least-once',
  });
  const { api } = broker;
  const expectOk = (what: string, response: { status: number; body: any }) => {
    if (response.status !== 200) throw new Error(`${what}: HTTP ${response.status} ${JSON.stringify(response.body)}`);
    return response.body;
  };
  const h = {
    broker,
    clock,
    api,
    async topic(id: string) {
      expectOk(`create topic ${id}`, await api('PUT', `${P}/topics/${id}`, {}));
    },
    async subscription(id: string, topic: string, body: Record<string, unknown> = {}) {
      const created = expectOk(
        `create subscription ${id}`,
        await api('PUT', `${P}/subscriptions/${id}`, {
          topic: `projects/p/topics/${topic}`,
          ackDeadlineSeconds: 10,
          ...body,
        }),
      );
      t.notOk(created.enableExactlyOnceDelivery, `${id} is not exactly-once`);
    },
    async publish(topic: string, ...texts: string[]): Promise<string[]> {
      const body = expectOk(
        `publish to ${topic}`,
        await api('POST', `${P}/topics/${topic}:publish`, {
          messages: texts.map((text) => ({ data: b64(text) })),
        }),
      );
      return body.messageIds;
    },
    async pull(sub: string, maxMessages = 100): Promise<Received[]> {
      const body = expectOk(
        `pull ${sub}`,
        await api('POST', `${P}/subscriptions/${sub}:pull`, { maxMessages, returnImmediately: true }),
      );
      if (!body.receivedMessages) t.same(body, {}, 'an empty pull answers {}');
      return body.receivedMessages ?? [];
    },
    ack: (sub: string, ackIds: string[]) => api('POST', `${P}/subscriptions/${sub}:acknowledge`, { ackIds }),
    modack: (sub: string, ackIds: string[], ackDeadlineSeconds: number) =>
      api('POST', `${P}/subscriptions/${sub}:modifyAckDeadline`, { ackIds, ackDeadlineSeconds }),
    /** Keys of a topic's data, and of one of its subscriptions. */
    async dataKeys(topic: string, sub?: string) {
      const record = await broker.app.broker.topics.read(resourceName('topics', 'p', topic));
      const data = new Keys(broker.prefix).topicData(record.uid);
      if (!sub) return { data, uid: record.uid };
      const subRecord = await broker.app.broker.subscriptions.read(resourceName('subscriptions', 'p', sub));
      return { data, uid: record.uid, sub: data.subscription(subRecord.uid) };
    },
  };
  return h;
}

const ids = (received: Received[]) => received.map((r) => r.message.messageId);
/** Message IDs in numeric order (redeliveries of expired leases need not come in publish order). */
const sortedIds = (list: string[]) => [...list].sort((x, y) => Number(x) - Number(y));
const texts = (received: Received[]) => received.map((r) => unb64(r.message.data));

function expectEmpty200(t: Test, response: { status: number; body: any }, what: string) {
  t.equal(response.status, 200, `${what}: HTTP 200`);
  t.same(response.body, {}, `${what}: body {}`);
}

function expectInvalidArgument(t: Test, response: { status: number; body: any }, what: string) {
  t.equal(response.status, 400, `${what}: HTTP 400`);
  t.equal(response.body?.error?.code, 400, `${what}: error.code 400`);
  t.equal(response.body?.error?.status, 'INVALID_ARGUMENT', `${what}: INVALID_ARGUMENT`);
  const details: any[] = response.body?.error?.details ?? [];
  t.notOk(
    details.some((d) => d.reason === 'EXACTLY_ONCE_ACKID_FAILURE'),
    `${what}: no exactly-once ErrorInfo on an at-least-once subscription`,
  );
}

/** The other 15 spellings of an ack ID whose last character only carries base64 padding bits. */
function paddingAliases(ackId: string): string[] {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const base = alphabet.indexOf(ackId.at(-1)!) & ~15;
  return [...alphabet.slice(base, base + 16)].map((c) => ackId.slice(0, -1) + c).filter((alias) => alias !== ackId);
}

async function subscribersOf(redis: RedisClient, channel: string): Promise<number> {
  const nodes = masterNodes(redis);
  let total = 0;
  for (const node of nodes) {
    const reply = (await node.call('PUBSUB', 'NUMSUB', channel)) as [string, number];
    total += Number(reply[1]);
  }
  return total;
}

for (const target of redisTargets()) {
  t.test(target.name, async (t) => {
    t.test('a leased message serializes as {ackId, message}, never with the ack ID secret', async (t) => {
      const h = await setUp(t, target);
      await h.topic('secret');
      await h.subscription('secret-sub', 'secret');
      await h.publish('secret', 'a');
      const record = await h.broker.app.broker.subscriptions.read(resourceName('subscriptions', 'p', 'secret-sub'));
      const { received } = await h.broker.app.broker.delivery.pullOnce(record, 10);
      const secret = await h.broker.redis.get(new Keys(h.broker.prefix).ackSecret);
      const json = JSON.stringify(received);
      t.ok(secret && !json.includes(secret), 'no secret in the JSON');
      t.same(Object.keys(JSON.parse(json)[0]), ['ackId', 'message']);
      t.equal(JSON.parse(json)[0].ackId, received[0].ackId);
    });

    t.test('stale, expired and repeated acks answer 200 {}; a stale ack never acks the newer delivery', async (t) => {
      const h = await setUp(t, target);
      await h.topic('orders');
      await h.subscription('orders-sub', 'orders');
      const [id] = await h.publish('orders', 'a');

      const [first] = await h.pull('orders-sub');
      t.equal(first.message.messageId, id);
      h.clock.advanceSeconds(10); // the deadline itself counts as expired
      const [second] = await h.pull('orders-sub');
      t.equal(second?.message.messageId, id, 'the expired lease is delivered again');
      t.not(second.ackId, first.ackId, 'with a new ack ID');

      expectEmpty200(t, await h.ack('orders-sub', [first.ackId]), 'ack of the superseded (stale) ack ID');
      h.clock.advanceSeconds(9);
      t.same(await h.pull('orders-sub'), [], 'the newer delivery is still leased: the stale ack did not end it');
      h.clock.advanceSeconds(1);
      const [third] = await h.pull('orders-sub');
      t.equal(
        third?.message.messageId,
        id,
        'the stale ack did not ack the newer delivery: it comes back when its lease runs out',
      );

      expectEmpty200(t, await h.ack('orders-sub', [third.ackId]), 'ack of the current delivery');
      expectEmpty200(t, await h.ack('orders-sub', [third.ackId]), 'the same ack again');
      expectEmpty200(
        t,
        await h.ack('orders-sub', [first.ackId, second.ackId, third.ackId]),
        'acks of every old delivery',
      );
      expectEmpty200(t, await h.modack('orders-sub', [third.ackId], 0), 'a nack of an acked delivery');
      t.same(await h.pull('orders-sub'), [], 'nothing to deliver after the ack');
      h.clock.advanceSeconds(700);
      t.same(await h.pull('orders-sub'), [], 'an acked message is never redelivered');
    });

    t.test('an ack after the deadline but before a redelivery answers 200 {} and acknowledges', async (t) => {
      // Documented in src/lua/acknowledge.lua: on subscriptions without exactly-once, an
      // expired lease that was not delivered again is still acknowledged.
      const h = await setUp(t, target);
      await h.topic('late');
      await h.subscription('late-sub', 'late');
      await h.publish('late', 'a');
      const [delivery] = await h.pull('late-sub');
      h.clock.advanceSeconds(15);
      expectEmpty200(t, await h.ack('late-sub', [delivery.ackId]), 'ack of the expired lease');
      t.same(await h.pull('late-sub'), [], 'the message was acknowledged');
    });

    t.test('malformed and foreign ack IDs answer 400 INVALID_ARGUMENT and change nothing', async (t) => {
      const h = await setUp(t, target);
      await h.topic('mal');
      await h.subscription('mal-sub', 'mal');
      await h.topic('elsewhere');
      await h.subscription('elsewhere-sub', 'elsewhere');
      await h.publish('elsewhere', 'x');
      const [foreign] = await h.pull('elsewhere-sub');
      await h.publish('mal', 'a', 'b');
      const [a, b] = await h.pull('mal-sub');
      t.ok(a && b, 'two deliveries');

      const parts = a.ackId.split('-');
      const macChanged = [...parts.slice(0, 3), (parts[3][0] === 'A' ? 'B' : 'A') + parts[3].slice(1)].join('-');
      const otherUid = [parts[0].split('').reverse().join(''), ...parts.slice(1)].join('-');
      const generationChanged = [parts[0], parts[1], (parseInt(parts[2], 36) + 1).toString(36), parts[3]].join('-');
      const bad: [string, string][] = [
        ['garbage', 'not-an-ack-id'],
        ['empty string', ''],
        ['MAC changed', macChanged],
        ['subscription uid changed', otherUid],
        ['generation changed', generationChanged],
        ['issued for another subscription', foreign.ackId],
        ['very long', 'x'.repeat(5000)],
      ];
      for (const [what, badId] of bad) {
        expectInvalidArgument(t, await h.ack('mal-sub', [a.ackId, badId]), `ack with a valid ID and one ${what}`);
        expectInvalidArgument(
          t,
          await h.modack('mal-sub', [a.ackId, badId], 0),
          `nack with a valid ID and one ${what}`,
        );
        expectInvalidArgument(
          t,
          await h.modack('mal-sub', [b.ackId, badId], 60),
          `extension with a valid ID and one ${what}`,
        );
      }
      t.same(await h.pull('mal-sub'), [], 'nothing was nacked');
      h.clock.advanceSeconds(10);
      const again = await h.pull('mal-sub');
      t.same(
        sortedIds(ids(again)),
        [a.message.messageId, b.message.messageId],
        'nothing was acked or extended: both come back at the deadline',
      );
      expectEmpty200(
        t,
        await h.ack(
          'mal-sub',
          again.map((r) => r.ackId),
        ),
        'the valid IDs alone are accepted',
      );
      expectEmpty200(t, await h.ack('elsewhere-sub', [foreign.ackId]), 'the foreign ID works on its own subscription');
    });

    t.test(
      'an ack ID is accepted only as issued (other spellings of its MAC padding bits are malformed)',
      async (t) => {
        const h = await setUp(t, target);
        await h.topic('spell');
        await h.subscription('spell-sub', 'spell');
        await h.publish('spell', 'a');
        const [delivery] = await h.pull('spell-sub');
        const aliases = paddingAliases(delivery.ackId);
        t.equal(aliases.length, 15);
        const accepted: string[] = [];
        for (const alias of aliases) {
          const response = await h.modack('spell-sub', [alias], 60);
          if (response.status === 200) accepted.push(alias);
        }
        t.same(
          accepted,
          [],
          'no ack ID the broker never issued is accepted (AckIdCodec.decode must reject non-canonical base64url)',
        );
        t.same(await h.pull('spell-sub'), [], 'still leased');
      },
    );

    t.test('an expired lease redelivers; the old ack ID then does nothing', async (t) => {
      const h = await setUp(t, target);
      await h.topic('exp');
      await h.subscription('exp-sub', 'exp');
      const published = await h.publish('exp', 'a', 'b', 'c');
      const first = await h.pull('exp-sub');
      t.same(ids(first), published, 'all three delivered, in publish order');
      t.same(texts(first), ['a', 'b', 'c']);
      h.clock.advanceSeconds(9.999999);
      t.same(await h.pull('exp-sub'), [], 'not redelivered a microsecond before the deadline');
      h.clock.advanceSeconds(0.000001);
      const second = await h.pull('exp-sub');
      t.same(sortedIds(ids(second)), published, 'all redelivered at the deadline');
      t.same(
        second.filter((r) => first.some((f) => f.ackId === r.ackId)),
        [],
        'every redelivery has a new ack ID',
      );
      expectEmpty200(
        t,
        await h.ack(
          'exp-sub',
          first.map((r) => r.ackId),
        ),
        'acks with the old IDs',
      );
      h.clock.advanceSeconds(10);
      t.same(sortedIds(ids(await h.pull('exp-sub'))), published, 'the old IDs acked nothing');
    });

    t.test('a nack redelivers at once, with a new ack ID', async (t) => {
      const h = await setUp(t, target);
      await h.topic('nack');
      await h.subscription('nack-sub', 'nack');
      const [id] = await h.publish('nack', 'a');
      const [first] = await h.pull('nack-sub');
      expectEmpty200(t, await h.modack('nack-sub', [first.ackId], 0), 'nack');
      const [second] = await h.pull('nack-sub');
      t.equal(second?.message.messageId, id, 'delivered again without any time passing');
      t.not(second.ackId, first.ackId, 'with a new ack ID');
      t.equal(unb64(second.message.data), 'a');
      expectEmpty200(t, await h.ack('nack-sub', [first.ackId]), 'an ack with the nacked ID');
      expectEmpty200(t, await h.modack('nack-sub', [first.ackId], 0), 'a second nack with the nacked ID');
      t.same(await h.pull('nack-sub'), [], 'the nacked ID neither acked nor nacked the new delivery');
      h.clock.advanceSeconds(10);
      const [third] = await h.pull('nack-sub');
      t.equal(third?.message.messageId, id, 'the new delivery expires and comes back as usual');
      expectEmpty200(t, await h.ack('nack-sub', [third.ackId]), 'ack');
      h.clock.advanceSeconds(60);
      t.same(await h.pull('nack-sub'), [], 'gone');
    });

    t.test('modifyAckDeadline extends the lease from now', async (t) => {
      const h = await setUp(t, target);
      await h.topic('ext');
      await h.subscription('ext-sub', 'ext');
      const [id] = await h.publish('ext', 'a');
      const [delivery] = await h.pull('ext-sub'); // deadline 10 s
      h.clock.advanceSeconds(5);
      expectEmpty200(t, await h.modack('ext-sub', [delivery.ackId], 30), 'extend to 30 s from now (35 s)');
      h.clock.advanceSeconds(29);
      t.same(await h.pull('ext-sub'), [], 'not redelivered at 34 s, well past the original 10 s deadline');
      expectEmpty200(t, await h.modack('ext-sub', [delivery.ackId], 10), 'shorten to 10 s from now (44 s)');
      h.clock.advanceSeconds(9);
      t.same(await h.pull('ext-sub'), [], 'not redelivered at 43 s');
      h.clock.advanceSeconds(1);
      const [again] = await h.pull('ext-sub');
      t.equal(again?.message.messageId, id, 'redelivered at the new deadline');
      expectEmpty200(t, await h.ack('ext-sub', [delivery.ackId]), 'ack with the superseded ID');
      h.clock.advanceSeconds(10);
      t.equal((await h.pull('ext-sub'))[0]?.message.messageId, id, 'which acked nothing');
    });

    t.test('publish fans out to every subscription attached at publish time, and only to those', async (t) => {
      const h = await setUp(t, target);
      await h.topic('fan');
      await h.subscription('fan-1', 'fan');
      await h.subscription('fan-2', 'fan');
      const [m1] = await h.publish('fan', 'before');
      await h.subscription('fan-3', 'fan');
      const [m2] = await h.publish('fan', 'after');
      const one = await h.pull('fan-1');
      const two = await h.pull('fan-2');
      const three = await h.pull('fan-3');
      t.same(ids(one), [m1, m2], 'fan-1 gets both');
      t.same(ids(two), [m1, m2], 'fan-2 gets both');
      t.same(ids(three), [m2], 'fan-3, created after the first publish, gets only the second');
      t.same(texts(three), ['after']);
      expectEmpty200(
        t,
        await h.ack(
          'fan-1',
          one.map((r) => r.ackId),
        ),
        'fan-1 acks',
      );
      h.clock.advanceSeconds(10);
      t.same(await h.pull('fan-1'), [], 'fan-1 acked both: nothing comes back');
      t.same(sortedIds(ids(await h.pull('fan-2'))), [m1, m2], 'fan-2 did not ack: both come back');
      t.same(ids(await h.pull('fan-3')), [m2], 'fan-3 never gets the first');
      const ackIdSets = [one, two, three].map((list) => new Set(list.map((r) => r.ackId)));
      t.equal(new Set([...ackIdSets[0], ...ackIdSets[1], ...ackIdSets[2]]).size, 5, 'ack IDs are per subscription');
    });

    t.test('acked messages are never redelivered', async (t) => {
      const h = await setUp(t, target);
      await h.topic('acked');
      await h.subscription('acked-sub', 'acked');
      const published = await h.publish('acked', ...Array.from({ length: 50 }, (_, i) => `m${i}`));
      const received = [...(await h.pull('acked-sub', 20)), ...(await h.pull('acked-sub', 100))];
      t.same(ids(received), published, 'all 50 delivered once, in order');
      const toAck = received.filter((_, i) => i % 2 === 0);
      expectEmpty200(
        t,
        await h.ack(
          'acked-sub',
          toAck.map((r) => r.ackId),
        ),
        'ack every other one',
      );
      expectEmpty200(
        t,
        await h.modack(
          'acked-sub',
          toAck.map((r) => r.ackId),
          0,
        ),
        'nack of the acked ones',
      );
      expectEmpty200(
        t,
        await h.modack(
          'acked-sub',
          toAck.map((r) => r.ackId),
          600,
        ),
        'extension of the acked ones',
      );
      t.same(await h.pull('acked-sub'), [], 'nack of an acked delivery does not revive it');
      for (let round = 0; round < 3; round++) {
        h.clock.advanceSeconds(10);
        const again = await h.pull('acked-sub');
        t.same(
          sortedIds(ids(again)),
          published.filter((_, i) => i % 2 === 1),
          `round ${round}: only the unacked half comes back`,
        );
        if (round === 2)
          expectEmpty200(
            t,
            await h.ack(
              'acked-sub',
              again.map((r) => r.ackId),
            ),
            'ack the rest',
          );
      }
      h.clock.advanceSeconds(3600);
      t.same(await h.pull('acked-sub'), [], 'nothing after every message was acked');
    });

    t.test('message bodies leave Redis once every subscription acked them', async (t) => {
      const h = await setUp(t, target);
      const redis = h.broker.redis;
      await h.topic('bodies');
      const lonely = await h.dataKeys('bodies');
      await h.publish('bodies', 'nobody listens');
      t.equal(
        (await storedBodies(redis, lonely.data)).size,
        0,
        'a publish with no subscription attached stores no body',
      );

      await h.subscription('bodies-1', 'bodies');
      await h.subscription('bodies-2', 'bodies');
      const published = await h.publish('bodies', 'a', 'b', 'c');
      const { data, uid } = await h.dataKeys('bodies');
      t.equal((await storedBodies(redis, data)).size, 3, 'three bodies stored once for both subscriptions');

      const one = await h.pull('bodies-1');
      expectEmpty200(
        t,
        await h.ack(
          'bodies-1',
          one.map((r) => r.ackId),
        ),
        'bodies-1 acks all three',
      );
      t.equal((await storedBodies(redis, data)).size, 3, 'bodies-2 still holds them: all three stay');

      const two = await h.pull('bodies-2');
      t.same(texts(two), ['a', 'b', 'c'], 'bodies-2 reads the shared bodies intact');
      expectEmpty200(t, await h.ack('bodies-2', [two[0].ackId]), 'bodies-2 acks the first');
      t.same(
        sortedIds([...(await storedBodies(redis, data)).keys()]),
        published.slice(1),
        'its body is gone, the others stay',
      );

      expectEmpty200(t, await h.modack('bodies-2', [two[1].ackId], 0), 'bodies-2 nacks the second');
      h.clock.advanceSeconds(10); // the third's lease expires too
      const again = await h.pull('bodies-2');
      t.same(sortedIds(ids(again)), published.slice(1), 'nacked and expired ones come back with their bodies');
      expectEmpty200(
        t,
        await h.ack(
          'bodies-2',
          again.map((r) => r.ackId),
        ),
        'bodies-2 acks the rest',
      );
      t.equal((await storedBodies(redis, data)).size, 0, 'every body is gone');
      t.same(await scanKeys(redis, `${data.bodies}*`), [], 'no body block is left');
      t.equal(await redis.exists(data.refs), 0, 'nor the reference counts');

      const left = await scanKeys(redis, `${h.broker.prefix}:{t${uid}}:*`);
      t.same(
        left.filter((key) => /:(b:\d+|staging:.*|refs|ready|leased)$/.test(key)),
        [],
        `no message data is left under the topic's keys (left: ${left.map((k) => k.slice(h.broker.prefix.length)).join(', ')})`,
      );
      const [single] = await h.publish('bodies', 'late');
      t.equal((await storedBodies(redis, data)).size, 1, 'a new publish stores its body again');
      for (const sub of ['bodies-1', 'bodies-2']) {
        const [r] = await h.pull(sub);
        t.equal(r?.message.messageId, single);
        expectEmpty200(t, await h.ack(sub, [r.ackId]), `${sub} acks it`);
      }
      t.equal((await storedBodies(redis, data)).size, 0, 'and drops it after both acked');
    });

    t.test('a long-polling pull is woken by a publish from another request', async (t) => {
      const h = await setUp(t, target, { pullWaitMs: 5000, manualClock: false });
      await h.topic('poll');
      await h.subscription('poll-sub', 'poll');
      const { uid } = await h.dataKeys('poll');
      const channel = new Keys(h.broker.prefix).wakeChannel(uid);

      const waiting = h.api('POST', `${P}/subscriptions/poll-sub:pull`, { maxMessages: 10, returnImmediately: false });
      // Publish only once the pull is really waiting (its wake-up subscription is in place).
      for (let i = 0; i < 200 && (await subscribersOf(h.broker.redis, channel)) === 0; i++) await delay(10);
      t.ok((await subscribersOf(h.broker.redis, channel)) > 0, 'the long poll is waiting');
      const [id] = await h.publish('poll', 'wake up');

      const timeout = new AbortController();
      const result = await Promise.race([
        waiting,
        delay(4000, 'timed out' as const, { signal: timeout.signal }).catch(() => 'timed out' as const),
      ]);
      timeout.abort();
      t.not(result, 'timed out', 'the pull answered before its 5 s bound');
      if (result === 'timed out') return;
      t.equal(result.status, 200);
      t.same(ids(result.body.receivedMessages ?? []), [id], 'with the published message');
      expectEmpty200(t, await h.ack('poll-sub', [result.body.receivedMessages[0].ackId]), 'ack');
    });

    t.test('a long-polling pull is woken by a nack from another request', async (t) => {
      const h = await setUp(t, target, { pullWaitMs: 5000, manualClock: false });
      await h.topic('poll2');
      await h.subscription('poll2-sub', 'poll2', { ackDeadlineSeconds: 600 });
      const { uid } = await h.dataKeys('poll2');
      const channel = new Keys(h.broker.prefix).wakeChannel(uid);
      const [id] = await h.publish('poll2', 'again');
      const [first] = await h.pull('poll2-sub');

      const waiting = h.api('POST', `${P}/subscriptions/poll2-sub:pull`, { maxMessages: 10, returnImmediately: false });
      for (let i = 0; i < 200 && (await subscribersOf(h.broker.redis, channel)) === 0; i++) await delay(10);
      expectEmpty200(t, await h.modack('poll2-sub', [first.ackId], 0), 'nack from another request');

      const timeout = new AbortController();
      const result = await Promise.race([
        waiting,
        delay(4000, 'timed out' as const, { signal: timeout.signal }).catch(() => 'timed out' as const),
      ]);
      timeout.abort();
      t.not(result, 'timed out', 'the pull answered before its 5 s bound');
      if (result === 'timed out') return;
      t.same(ids(result.body.receivedMessages ?? []), [id], 'with the nacked message');
    });
  });
}
