// Forwarding to a dead-letter topic crosses hash tags, so it is three steps (src/broker/dead-letters.ts):
// 1. a pull hands the message over (the forwarding set of its subscription), 2. it is stored in
// the dead-letter topic under its forward ID, 3. it leaves the subscription. A broker that
// crashes between two steps (here: a step that fails, injected into its scripts, and the broker
// never used again) leaves the message claimed; once the claim has run out, the next pull,
// through another broker, finishes the forward: the message is on the dead-letter topic exactly
// once, never delivered again, and its ordering key's next message comes after it. On standalone
// Redis and on the cluster, where the two topics live on different slots.

import t, { type Test } from 'tap';
import { buildApp } from '../../src/app.ts';
import { ManualClock } from '../../src/broker/clock.ts';
import { cancelForwarding } from '../../src/redis/calls/delivery.ts';
import type { Scripts } from '../../src/redis/scripts.ts';
import { b64, jsonApi, okApi, unb64 } from '../helpers/app.ts';
import { type RedisTarget, redisTargets, uniquePrefix } from '../helpers/redis.ts';

const P = '/v1/projects/p';
/** Longer than a forwarder's claim (FORWARD_CLAIM_US in pull.lua). */
const CLAIM_RUNS_OUT_S = 31;

type CrashPoint = 'before the dead-letter publish' | 'after the dead-letter publish' | 'before finishing';

async function openBroker(t: Test, target: RedisTarget, prefix: string, clock: ManualClock) {
  const redis = target.connect();
  const app = await buildApp({ redis, keyPrefix: prefix, clock, pullWaitMs: 0 });
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await app.close();
    redis.disconnect();
  };
  t.teardown(close);
  const api = jsonApi(app);
  const ok = okApi(api);
  const pull = async (subscription: string) =>
    (await ok('POST', `${P}/subscriptions/${subscription}:pull`, { maxMessages: 10, returnImmediately: true }))
      .receivedMessages ?? [];
  return { scripts: app.broker.ctx.scripts, ctx: app.broker.ctx, ok, pull, close };
}

/** Makes the broker's forwarding fail at `point`, as a crash there would leave it. */
function crashAt(scripts: Scripts, point: CrashPoint): void {
  const crash = () => Promise.reject(new Error(`crashed ${point}`));
  const isForward = (args: string[]) => args[6] !== ''; // publish.lua's ARGV[7], the forward ID
  const { run, runEncoded, runStaged } = scripts;
  if (point === 'before finishing') {
    scripts.run = (name, keys, args) => (name === 'finish-forwarding' ? crash() : run.call(scripts, name, keys, args));
    return;
  }
  const publishThen = async (publishing: Promise<unknown>) => {
    if (point === 'after the dead-letter publish') await publishing;
    return crash();
  };
  scripts.runEncoded = (name, keys, args, trailing) =>
    name === 'publish' && isForward(args)
      ? publishThen(
          point === 'after the dead-letter publish'
            ? runEncoded.call(scripts, name, keys, args, trailing)
            : Promise.resolve(),
        )
      : runEncoded.call(scripts, name, keys, args, trailing);
  scripts.runStaged = (name, keys, args, stagingKey, trailing) =>
    name === 'publish' && isForward(args)
      ? publishThen(
          point === 'after the dead-letter publish'
            ? runStaged.call(scripts, name, keys, args, stagingKey, trailing)
            : Promise.resolve(),
        )
      : runStaged.call(scripts, name, keys, args, stagingKey, trailing);
}

const texts = (received: { message: { data?: string } }[]) => received.map((r) => unb64(r.message.data));

for (const target of redisTargets()) {
  for (const point of [
    'before the dead-letter publish',
    'after the dead-letter publish',
    'before finishing',
  ] as CrashPoint[]) {
    t.test(`a broker crashing ${point}: the next pull finishes the forward (${target.name})`, async (t) => {
      const prefix = uniquePrefix('dead-letter-crash');
      const clock = new ManualClock();
      const first = await openBroker(t, target, prefix, clock);
      await first.ok('PUT', `${P}/topics/orders`, {});
      await first.ok('PUT', `${P}/topics/orders-dead`, {});
      await first.ok('PUT', `${P}/subscriptions/orders-dead`, { topic: 'projects/p/topics/orders-dead' });
      await first.ok('PUT', `${P}/subscriptions/orders`, {
        topic: 'projects/p/topics/orders',
        enableMessageOrdering: true,
        deadLetterPolicy: { deadLetterTopic: 'projects/p/topics/orders-dead', maxDeliveryAttempts: 5 },
      });
      await first.ok('POST', `${P}/topics/orders:publish`, {
        messages: [
          { data: b64('poison'), orderingKey: 'k' },
          { data: b64('next'), orderingKey: 'k' },
        ],
      });
      for (let attempt = 1; attempt <= 5; attempt++) {
        const received = await first.pull('orders');
        t.same(texts(received), ['poison', 'next'], `delivery ${attempt}`);
        t.equal(received[0].deliveryAttempt, attempt, `  attempt ${attempt}`);
        await first.ok('POST', `${P}/subscriptions/orders:modifyAckDeadline`, {
          ackIds: [received[0].ackId],
          ackDeadlineSeconds: 0,
        });
      }

      crashAt(first.scripts, point);
      t.same(await first.pull('orders'), [], 'the forwarding pull delivers nothing: the key waits for the forward');
      const copies: string[] = [];
      const readDeadLetters = async (broker: typeof first) => {
        const received = await broker.pull('orders-dead');
        if (received.length > 0) {
          await broker.ok('POST', `${P}/subscriptions/orders-dead:acknowledge`, {
            ackIds: received.map((r: { ackId: string }) => r.ackId),
          });
        }
        copies.push(...texts(received));
      };
      await readDeadLetters(first);
      t.same(copies, point === 'before the dead-letter publish' ? [] : ['poison'], 'what the crash left stored');
      await first.close();

      const next = await openBroker(t, target, prefix, clock);
      t.same(await next.pull('orders'), [], 'while the claim holds, the next broker leaves the forward alone');
      await readDeadLetters(next);
      clock.advanceSeconds(CLAIM_RUNS_OUT_S);
      t.same(await next.pull('orders'), [], 'once it ran out, a pull takes the forward over');
      await readDeadLetters(next);
      t.same(copies, ['poison'], 'the message is on the dead-letter topic exactly once');
      const after = await next.pull('orders');
      t.same(texts(after), ['next'], "then the key's next message comes, and the forwarded one never again");
      t.equal(after[0].deliveryAttempt, 1, '  as its first attempt');
      await next.ok('POST', `${P}/subscriptions/orders:acknowledge`, { ackIds: [after[0].ackId] });
      clock.advanceSeconds(CLAIM_RUNS_OUT_S);
      t.same(await next.pull('orders'), [], 'nothing is left');
      await readDeadLetters(next);
      t.same(copies, ['poison'], 'and nothing more was forwarded');
    });
  }
}

t.test('a forwarder whose claim ran out cannot cancel the forward a later pull took over', async (t) => {
  const target = redisTargets()[0];
  const prefix = uniquePrefix('dead-letter-claims');
  const clock = new ManualClock();
  const stale = await openBroker(t, target, prefix, clock);
  await stale.ok('PUT', `${P}/topics/orders`, {});
  await stale.ok('PUT', `${P}/topics/orders-dead`, {});
  await stale.ok('PUT', `${P}/subscriptions/orders`, {
    topic: 'projects/p/topics/orders',
    deadLetterPolicy: { deadLetterTopic: 'projects/p/topics/orders-dead', maxDeliveryAttempts: 5 },
  });
  await stale.ok('POST', `${P}/topics/orders:publish`, { messages: [{ data: b64('poison') }] });
  for (let attempt = 1; attempt <= 5; attempt++) {
    const [received] = await stale.pull('orders');
    await stale.ok('POST', `${P}/subscriptions/orders:modifyAckDeadline`, {
      ackIds: [received.ackId],
      ackDeadlineSeconds: 0,
    });
  }
  const { redis, keys } = stale.ctx;
  const record = JSON.parse((await redis.hget(keys.subscriptions, 'projects/p/subscriptions/orders'))!);
  const sub = keys.topicData(record.topicUid).subscription(record.uid);
  // Both forwarders stall before storing the message: each leaves its claim.
  crashAt(stale.scripts, 'before the dead-letter publish');
  t.same(await stale.pull('orders'), [], 'handed over to forward');
  const claimed = await redis.zrange(sub.forwarding, 0, -1);
  t.equal(claimed.length, 1, 'claimed');
  const [member] = claimed;
  const claimOf = async () => Number(await redis.zscore(sub.forwarding, member));
  const staleClaim = await claimOf();
  clock.advanceSeconds(CLAIM_RUNS_OUT_S);
  const later = await openBroker(t, target, prefix, clock);
  crashAt(later.scripts, 'before the dead-letter publish');
  t.same(await later.pull('orders'), [], 'the run-out claim is taken over');
  const laterClaim = await claimOf();
  t.ok(laterClaim > staleClaim, 'under a claim of its own');

  const wakeChannel = keys.wakeChannel(record.topicUid);
  await cancelForwarding(stale.scripts, sub, { wakeChannel, claimUs: staleClaim, members: [member] });
  t.equal(await claimOf(), laterClaim, 'the stale cancel leaves the later claim alone');
  t.same(await later.pull('orders'), [], 'and the message is not delivered again meanwhile');
  await cancelForwarding(later.scripts, sub, { wakeChannel, claimUs: laterClaim, members: [member] });
  t.equal(await redis.zscore(sub.forwarding, member), null, "the claim's own cancel gives it back");
  t.same(await redis.lrange(sub.ready, 0, -1), [member], 'to the ready list');
});
