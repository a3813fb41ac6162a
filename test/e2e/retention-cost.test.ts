// The janitor's pass over retained logs (src/broker/replay.ts) costs work per change and per log
// that is due, never per retaining topic, subscription or snapshot: a pass reads the due entries
// of `log-expiries` and nothing else. Counted, never timed. And it still lets go of what is past
// the retention when it is due, at once after a retention is shortened or turned off, and after
// the grace once a topic is deleted; a snapshot keeps what it holds.

import t from 'tap';
import type { CallContext } from '../../src/broker/call-context.ts';
import { ManualClock } from '../../src/broker/clock.ts';
import type { ResourceName } from '../../src/broker/names.ts';
import { b64, startBroker } from '../helpers/app.ts';
import { countCommands } from '../helpers/commands.ts';
import { markLog, settleLog } from '../../src/redis/calls/retention.ts';
import { redisTargets } from '../helpers/redis.ts';

const caller: CallContext = { endpoint: 'internal', region: '' };
const TOPICS = 100;
const SUBSCRIPTIONS_PER_TOPIC = 10;
const name = (kind: 'topics' | 'subscriptions' | 'snapshots', id: string): ResourceName => ({
  project: 'p',
  id,
  full: `projects/p/${kind}/${id}`,
});
const [standalone] = redisTargets();

t.test(
  'a pass with nothing due runs a fixed number of commands, however many topics and subscriptions retain',
  async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { clock, name: 'retention-cost', target: standalone });
    const { topics, subscriptions, replay } = broker.app.broker;
    for (let i = 0; i < TOPICS; i++) {
      // Half retain by their own retention, half by their subscriptions' retainAckedMessages.
      await topics.create(
        caller,
        name('topics', `topic-${i}`),
        i % 2 === 0 ? { messageRetentionDuration: '3600s' } : {},
      );
      for (let s = 0; s < SUBSCRIPTIONS_PER_TOPIC; s++) {
        await subscriptions.create(caller, name('subscriptions', `topic-${i}-sub-${s}`), {
          topic: `projects/p/topics/topic-${i}`,
          ...(i % 2 === 1 ? { retainAckedMessages: true, messageRetentionDuration: '3600s' } : {}),
        });
      }
      await broker.api('POST', `/v1/projects/p/topics/topic-${i}:publish`, { messages: [{ data: b64(`m${i}`) }] });
    }
    // The first pass looks at every log its creation marked, and schedules each at its due block.
    await replay.expireLogs();

    for (const advance of [0, 600, 2400]) {
      clock.advanceSeconds(advance);
      const count = countCommands(broker.redis);
      await replay.expireLogs();
      count.stop();
      t.same(
        Object.fromEntries(count.byName),
        { ZRANGEBYSCORE: 1 },
        `${advance} s later, with nothing due: one read of the index (${TOPICS} retaining topics, ${TOPICS * SUBSCRIPTIONS_PER_TOPIC} subscriptions)`,
      );
    }

    // Past the retention: each topic's log is due once, and looked at once.
    clock.advanceSeconds(601);
    const count = countCommands(broker.redis);
    await replay.expireLogs();
    count.stop();
    const counted = JSON.stringify(Object.fromEntries(count.byName));
    t.equal(count.of('EVALSHA'), 2 * TOPICS, `one expire-log and one settle-log per due topic (${counted})`);
    t.ok(count.total() <= 4 * TOPICS + 2, `and a fixed few other commands per due topic (${counted})`);
    for (const id of ['topic-0', 'topic-1']) {
      const { uid } = (await topics.find(`projects/p/topics/${id}`))!;
      t.equal(
        await broker.redis.zcard(broker.app.broker.ctx.keys.topicData(uid).log),
        0,
        `${id}: its log let go of the past block`,
      );
    }
  },
);

t.test('a change of what retains a log is looked at by the next pass', async (t) => {
  const clock = new ManualClock();
  const broker = await startBroker(t, { clock, name: 'retention-change', target: standalone });
  const { topics, subscriptions, snapshots, replay, ctx } = broker.app.broker;
  const setUp = async (id: string, topic: object, subscription: object) => {
    await topics.create(caller, name('topics', id), topic);
    await subscriptions.create(caller, name('subscriptions', `${id}-sub`), {
      topic: `projects/p/topics/${id}`,
      ...subscription,
    });
    const { uid } = (await topics.find(`projects/p/topics/${id}`))!;
    return Object.assign(ctx.keys.topicData(uid), { uid });
  };
  const publish = (id: string) =>
    broker.api('POST', `/v1/projects/p/topics/${id}:publish`, { messages: [{ data: b64(id) }] });
  const retained = { retainAckedMessages: true, messageRetentionDuration: '3600s' };
  const shortened = await setUp('shortened', { messageRetentionDuration: '3600s' }, {});
  const turnedOff = await setUp('turned-off', {}, retained);
  const deleted = await setUp('deleted', { messageRetentionDuration: '3600s' }, {});
  const snapshotted = await setUp('snapshotted', {}, {});
  await snapshots.create(caller, name('snapshots', 'snap'), {
    subscription: 'projects/p/subscriptions/snapshotted-sub',
  });
  for (const id of ['shortened', 'turned-off', 'deleted', 'snapshotted']) await publish(id);
  await replay.expireLogs();
  clock.advanceSeconds(700);
  await replay.expireLogs();
  for (const [what, data] of [
    ['a topic retention', shortened],
    ["a subscription's retainAckedMessages", turnedOff],
    ['a retention of a topic about to be deleted', deleted],
    ['a snapshot', snapshotted],
  ] as const) {
    t.equal(await broker.redis.zcard(data.log), 1, `${what} keeps a message 700 s old`);
  }

  await topics.update(caller, name('topics', 'shortened'), {
    topic: { messageRetentionDuration: '600s' },
    updateMask: ['messageRetentionDuration'],
  });
  await subscriptions.update(caller, name('subscriptions', 'turned-off-sub'), {
    subscription: { retainAckedMessages: false },
    updateMask: ['retainAckedMessages'],
  });
  await topics.delete(caller, name('topics', 'deleted'));
  await replay.expireLogs();
  t.equal(await broker.redis.zcard(shortened.log), 0, 'a shortened topic retention lets go at the next pass');
  t.equal(await broker.redis.zcard(turnedOff.log), 0, 'so does a subscription that stops retaining');
  t.equal(await broker.redis.zcard(deleted.log), 0, "and a deleted topic's log, older than the grace");
  t.equal(await broker.redis.zcard(snapshotted.log), 1, 'a snapshot keeps what was published after it');
  await snapshots.delete(caller, name('snapshots', 'snap'));
  await replay.expireLogs();
  t.equal(await broker.redis.zcard(snapshotted.log), 0, 'until it is deleted');
  t.same(
    await broker.redis.zrange(ctx.keys.logExpiries, 0, -1),
    [shortened.uid],
    'the index keeps only the topic that still retains: the others left it once their logs were empty',
  );
});

t.test('a change marked while a pass looks at a log is not overwritten by the pass', async (t) => {
  const clock = new ManualClock();
  const broker = await startBroker(t, { clock, name: 'retention-race', target: standalone });
  const { scripts, keys } = broker.app.broker.ctx;
  const topicUid = '0123456789abcdef';
  await markLog(scripts, keys, { time: clock.scriptTime(), topicUid });
  const judgedUs = Number(await broker.redis.zscore(keys.logExpiries, topicUid));
  // A change at the same microsecond as the entry still moves it.
  await markLog(scripts, keys, { time: clock.scriptTime(), topicUid });
  const settle = { topicUid, judgedUs, nextUs: judgedUs + 3_600_000_000, retains: true };
  t.equal(
    await settleLog(scripts, keys, settle),
    'changed',
    'the pass that read the entry before the change is refused',
  );
  t.ok(
    Number(await broker.redis.zscore(keys.logExpiries, topicUid)) < judgedUs,
    'the entry stays due for the next pass',
  );
  const now = Number(await broker.redis.zscore(keys.logExpiries, topicUid));
  t.equal(await settleLog(scripts, keys, { ...settle, judgedUs: now }), 'settled', 'which moves it on');
  t.equal(Number(await broker.redis.zscore(keys.logExpiries, topicUid)), settle.nextUs);
  t.equal(await settleLog(scripts, keys, { ...settle, judgedUs: settle.nextUs, retains: false }), 'settled');
  t.equal(await broker.redis.zscore(keys.logExpiries, topicUid), null, 'and removes it once nothing retains');
});
