// Seek to a time, and the retention it replays from (src/broker/replay.ts, seek.lua,
// expire-log.lua), over REST on a ManualClock (publish times are the manual time), on standalone
// Redis and on Redis Cluster:
//   - a seek to a time after everything acknowledges everything (the purge), leases included;
//   - a seek back brings back what is unacknowledged (a lease ends at once, its old ack ID fails)
//     and, with retainAckedMessages, what was acknowledged; without it, acknowledged messages
//     stay acknowledged;
//   - a topic's messageRetentionDuration lets a subscription created later seek back to before
//     it existed; a filtered subscription gets back only what its filter takes;
//   - with ordering, delivery restarts from each key's oldest unacknowledged message, in order;
//   - the janitor lets go of retained bodies once they are older than the retention, and of
//     everything older than ten minutes once nothing retains;
//   - a subscription whose topic was deleted still seeks over what it retains;
//   - requests without exactly one target, with a malformed time, on an unknown subscription:
//     Pub/Sub's errors, and nothing changes.
import t, { type Test } from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { formatTimestampUs } from '../../src/broker/durations.ts';
import { b64, startBroker, type TestBroker, unb64 } from '../helpers/app.ts';
import { redisTargets, storedBodies } from '../helpers/redis.ts';
import { topicData } from '../helpers/topic.ts';

const P = '/v1/projects/p';
const START_US = Date.UTC(2026, 0, 1) * 1000;

async function setUp(t: Test, target: ReturnType<typeof redisTargets>[number], name: string) {
  const clock = new ManualClock(START_US);
  const broker = await startBroker(t, { target, clock, name });
  return { clock, broker };
}

async function createTopic(broker: TestBroker, id: string, topic: object = {}) {
  const { status, body } = await broker.api('PUT', `${P}/topics/${id}`, topic);
  if (status !== 200) throw new Error(`topic: ${JSON.stringify(body)}`);
}

async function createSubscription(broker: TestBroker, id: string, topic: string, settings: object = {}) {
  const { status, body } = await broker.api('PUT', `${P}/subscriptions/${id}`, {
    topic: `projects/p/topics/${topic}`,
    ...settings,
  });
  if (status !== 200) throw new Error(`subscription: ${JSON.stringify(body)}`);
}

async function publish(broker: TestBroker, topic: string, texts: string[], extra: object = {}): Promise<string[]> {
  const { status, body } = await broker.api('POST', `${P}/topics/${topic}:publish`, {
    messages: texts.map((text) => ({ data: b64(text), ...extra })),
  });
  if (status !== 200) throw new Error(`publish: ${JSON.stringify(body)}`);
  return body.messageIds;
}

async function pull(broker: TestBroker, sub: string, max = 100): Promise<{ ackId: string; text: string }[]> {
  const { body } = await broker.api('POST', `${P}/subscriptions/${sub}:pull`, {
    maxMessages: max,
    returnImmediately: true,
  });
  return (body.receivedMessages ?? []).map((m: any) => ({ ackId: m.ackId, text: unb64(m.message.data) }));
}

async function ack(broker: TestBroker, sub: string, ackIds: string[]) {
  return broker.api('POST', `${P}/subscriptions/${sub}:acknowledge`, { ackIds });
}

const seekTo = (broker: TestBroker, sub: string, timeUs: number) =>
  broker.api('POST', `${P}/subscriptions/${sub}:seek`, { time: formatTimestampUs(timeUs) });

const texts = (received: { text: string }[]) => received.map((m) => m.text).sort();

for (const target of redisTargets()) {
  t.test(`${target.name}: a seek to a later time acknowledges everything, leases included`, async (t) => {
    const { clock, broker } = await setUp(t, target, 'seek-purge');
    await createTopic(broker, 'purge');
    await createSubscription(broker, 'purge', 'purge', { enableExactlyOnceDelivery: true });
    await publish(broker, 'purge', ['a', 'b', 'c']);
    const leased = await pull(broker, 'purge', 1);
    t.equal(leased.length, 1);
    clock.advanceSeconds(1);
    const seek = await seekTo(broker, 'purge', START_US + 1_000_000);
    t.same([seek.status, seek.body], [200, {}], 'the seek answers {}');
    t.same(await pull(broker, 'purge'), [], 'nothing is left to deliver');
    const stale = await ack(broker, 'purge', [leased[0].ackId]);
    t.equal(stale.status, 400, 'the lease the seek ended cannot be acknowledged');
    t.same(
      Object.values(stale.body.error.details[0].metadata),
      ['PERMANENT_FAILURE_INVALID_ACK_ID'],
      'as an invalid ack ID',
    );
    const { data, ctx } = await topicData(broker, 'purge');
    t.equal((await storedBodies(ctx.redis, data)).size, 0, 'and their bodies are gone');
    await publish(broker, 'purge', ['d']);
    t.same(texts(await pull(broker, 'purge')), ['d'], 'what is published afterwards is delivered');
  });

  t.test(
    `${target.name}: a seek back redelivers the unacknowledged at once; acked ones only when retained`,
    async (t) => {
      const { clock, broker } = await setUp(t, target, 'seek-back');
      await createTopic(broker, 'back');
      await createSubscription(broker, 'plain', 'back', { enableExactlyOnceDelivery: true });
      await createSubscription(broker, 'retaining', 'back', { retainAckedMessages: true });
      await publish(broker, 'back', ['early']);
      clock.advanceSeconds(10);
      await publish(broker, 'back', ['late-1', 'late-2']);
      for (const sub of ['plain', 'retaining']) {
        const received = await pull(broker, sub);
        t.equal(received.length, 3);
        await ack(
          broker,
          sub,
          received.filter((m) => m.text !== 'late-2').map((m) => m.ackId),
        );
        if (sub === 'plain') {
          const lease = received.find((m) => m.text === 'late-2')!;
          clock.advanceSeconds(1);
          t.equal((await seekTo(broker, sub, START_US + 5_000_000)).status, 200);
          const again = await pull(broker, sub);
          t.same(texts(again), ['late-2'], 'the leased message is available again at once');
          t.equal((await ack(broker, sub, [lease.ackId])).status, 400, 'its old ack ID fails');
          t.equal((await ack(broker, sub, [again[0].ackId])).status, 200, 'the new one acknowledges it');
          t.equal((await seekTo(broker, sub, START_US)).status, 200);
          t.same(
            texts(await pull(broker, sub)),
            [],
            'acknowledged messages are not retained without retainAckedMessages',
          );
        } else {
          t.equal((await seekTo(broker, sub, START_US + 5_000_000)).status, 200);
          const again = await pull(broker, sub);
          t.same(
            texts(again),
            ['late-1', 'late-2'],
            'retained acknowledged messages published after the time come back',
          );
          await ack(
            broker,
            sub,
            again.map((m) => m.ackId),
          );
          t.equal((await seekTo(broker, sub, START_US)).status, 200);
          t.same(texts(await pull(broker, sub)), ['early', 'late-1', 'late-2'], 'and a seek to the first publish, all');
        }
      }
    },
  );

  t.test(
    `${target.name}: topic retention reaches back before a subscription existed; filters still apply`,
    async (t) => {
      const { clock, broker } = await setUp(t, target, 'seek-topic');
      await createTopic(broker, 'kept', { messageRetentionDuration: '3600s' });
      await publish(broker, 'kept', ['before-red'], { attributes: { colour: 'red' } });
      await publish(broker, 'kept', ['before-blue'], { attributes: { colour: 'blue' } });
      clock.advanceSeconds(1);
      await createSubscription(broker, 'later', 'kept');
      await createSubscription(broker, 'red', 'kept', {
        filter: 'attributes.colour = "red"',
        retainAckedMessages: true,
      });
      const got = await broker.api('GET', `${P}/subscriptions/later`);
      t.equal(got.body.topicMessageRetentionDuration, '3600s', 'the subscription shows the topic retention');
      await publish(broker, 'kept', ['after-red'], { attributes: { colour: 'red' } });
      await publish(broker, 'kept', ['after-blue'], { attributes: { colour: 'blue' } });
      t.same(
        texts(await pull(broker, 'later')),
        ['after-blue', 'after-red'],
        'a new subscription gets only later messages',
      );
      t.equal((await seekTo(broker, 'later', START_US)).status, 200);
      t.same(
        texts(await pull(broker, 'later')),
        ['after-blue', 'after-red', 'before-blue', 'before-red'],
        'until it seeks back before it existed',
      );
      const red = await pull(broker, 'red');
      t.same(texts(red), ['after-red'], 'the filtered subscription takes what its filter matches');
      await ack(
        broker,
        'red',
        red.map((m) => m.ackId),
      );
      t.equal((await seekTo(broker, 'red', START_US)).status, 200);
      t.same(
        texts(await pull(broker, 'red')),
        ['after-red', 'before-red'],
        'and a seek back brings what its filter takes, from before its creation too',
      );
    },
  );

  t.test(`${target.name}: with ordering, delivery restarts from each key's oldest message`, async (t) => {
    const { clock, broker } = await setUp(t, target, 'seek-ordered');
    await createTopic(broker, 'ordered');
    await createSubscription(broker, 'ordered', 'ordered', { enableMessageOrdering: true, retainAckedMessages: true });
    for (let i = 0; i < 3; i++) {
      await publish(broker, 'ordered', [`a${i}`], { orderingKey: 'a' });
      await publish(broker, 'ordered', [`b${i}`], { orderingKey: 'b' });
      await publish(broker, 'ordered', [`u${i}`]);
      clock.advanceSeconds(1);
    }
    const first = await pull(broker, 'ordered');
    await ack(
      broker,
      'ordered',
      first.filter((m) => m.text === 'a0' || m.text === 'b0').map((m) => m.ackId),
    );
    t.equal((await seekTo(broker, 'ordered', START_US + 1_000_000)).status, 200);
    const again = (await pull(broker, 'ordered')).map((m) => m.text);
    t.same(
      again.filter((text) => text.startsWith('a')),
      ['a1', 'a2'],
      'key a from its first message after the time',
    );
    t.same(
      again.filter((text) => text.startsWith('b')),
      ['b1', 'b2'],
      'key b too',
    );
    t.same(again.filter((text) => text.startsWith('u')).sort(), ['u1', 'u2'], 'and the unkeyed messages');
  });

  // The log lets go of a block (up to 1000 messages) once its latest message is past the
  // retention; a seek never brings back a message past it.
  t.test(`${target.name}: the janitor lets go of retained bodies past the retention`, async (t) => {
    const { clock, broker } = await setUp(t, target, 'seek-expiry');
    await createTopic(broker, 'expiring');
    await createSubscription(broker, 'expiring', 'expiring', {
      retainAckedMessages: true,
      messageRetentionDuration: '600s',
    });
    const { data, ctx, record } = await topicData(broker, 'expiring');
    await publish(broker, 'expiring', ['old']);
    clock.advanceSeconds(400);
    await publish(broker, 'expiring', ['new']);
    await ack(
      broker,
      'expiring',
      (await pull(broker, 'expiring')).map((m) => m.ackId),
    );
    t.equal((await storedBodies(ctx.redis, data)).size, 2, 'acknowledged messages are retained');
    clock.advanceSeconds(300);
    await broker.app.broker.replay.expireLogs();
    t.equal((await storedBodies(ctx.redis, data)).size, 2, 'a block stays while its latest message is retained');
    t.equal((await seekTo(broker, 'expiring', START_US)).status, 200);
    const replayed = await pull(broker, 'expiring');
    t.same(texts(replayed), ['new'], 'but a seek back brings back only what is younger than the retention');
    await ack(
      broker,
      'expiring',
      replayed.map((m) => m.ackId),
    );
    clock.advanceSeconds(400);
    await broker.app.broker.replay.expireLogs();
    t.equal(
      (await storedBodies(ctx.redis, data)).size,
      0,
      'a block whose latest message is past the retention is let go',
    );
    await publish(broker, 'expiring', ['newest']);
    t.same(
      [...(await storedBodies(ctx.redis, data)).values()].map((body) => body.subarray(20).toString()),
      ['newest'],
      'the next publish starts a block of its own',
    );
    t.equal(await ctx.redis.zcard(data.log), 1, 'which the log holds');
    const update = await broker.api('PATCH', `${P}/subscriptions/expiring`, {
      subscription: { retainAckedMessages: false },
      updateMask: 'retainAckedMessages',
    });
    t.equal(update.status, 200);
    await broker.api('POST', `${P}/subscriptions/expiring:seek`, {
      time: formatTimestampUs(START_US + 10_000_000_000),
    });
    await broker.app.broker.replay.expireLogs();
    t.equal(
      (await storedBodies(ctx.redis, data)).size,
      1,
      'once nothing retains, a block younger than ten minutes still stays (a retention may be on its way)',
    );
    clock.advanceSeconds(601);
    await broker.app.broker.replay.expireLogs();
    t.equal((await storedBodies(ctx.redis, data)).size, 0, 'then the log lets go of everything');
    t.equal(await ctx.redis.zscore(ctx.keys.logExpiries, record.uid), null, "and the topic leaves the janitor's index");
  });

  t.test(`${target.name}: a message a seek brings back is dead-lettered again`, async (t) => {
    const { broker } = await setUp(t, target, 'seek-dead-letter');
    await createTopic(broker, 'dlq-source');
    await createTopic(broker, 'dlq');
    await createSubscription(broker, 'dlq', 'dlq');
    await createSubscription(broker, 'dlq-source', 'dlq-source', {
      retainAckedMessages: true,
      deadLetterPolicy: { deadLetterTopic: 'projects/p/topics/dlq', maxDeliveryAttempts: 5 },
    });
    await publish(broker, 'dlq-source', ['poison']);
    const failFiveTimes = async () => {
      for (let attempt = 1; attempt <= 5; attempt++) {
        const [delivery] = await pull(broker, 'dlq-source');
        t.ok(delivery, `delivery attempt ${attempt}`);
        await broker.api('POST', `${P}/subscriptions/dlq-source:modifyAckDeadline`, {
          ackIds: [delivery.ackId],
          ackDeadlineSeconds: 0,
        });
      }
      t.same(await pull(broker, 'dlq-source'), [], 'then it is forwarded instead of delivered');
    };
    await failFiveTimes();
    t.same(texts(await pull(broker, 'dlq')), ['poison'], 'to the dead-letter topic');
    t.equal((await seekTo(broker, 'dlq-source', START_US)).status, 200);
    await failFiveTimes();
    t.same(texts(await pull(broker, 'dlq')), ['poison'], 'brought back by the seek, it is forwarded again');
  });

  t.test(`${target.name}: a subscription whose topic was deleted seeks over what it still holds`, async (t) => {
    const { broker } = await setUp(t, target, 'seek-deleted-topic');
    await createTopic(broker, 'gone');
    await createSubscription(broker, 'orphan', 'gone', { retainAckedMessages: true });
    await publish(broker, 'gone', ['kept-1', 'kept-2']);
    await ack(
      broker,
      'orphan',
      (await pull(broker, 'orphan')).map((m) => m.ackId),
    );
    t.equal((await broker.api('DELETE', `${P}/topics/gone`)).status, 200);
    t.equal((await broker.api('GET', `${P}/subscriptions/orphan`)).body.topic, '_deleted-topic_');
    t.equal((await seekTo(broker, 'orphan', START_US)).status, 200, 'the seek answers {}');
    t.same(texts(await pull(broker, 'orphan')), ['kept-1', 'kept-2'], 'and brings back what it retained');
  });

  t.test(`${target.name}: bad seeks are refused and change nothing`, async (t) => {
    const { broker } = await setUp(t, target, 'seek-errors');
    await createTopic(broker, 'errors');
    await createSubscription(broker, 'errors', 'errors');
    await publish(broker, 'errors', ['kept']);
    const cases: [string, object, number, string][] = [
      ['neither target', {}, 400, 'INVALID_ARGUMENT'],
      [
        'both targets',
        { time: formatTimestampUs(START_US), snapshot: 'projects/p/snapshots/s' },
        400,
        'INVALID_ARGUMENT',
      ],
      ['a malformed time', { time: 'yesterday' }, 400, 'INVALID_ARGUMENT'],
      ['an unknown field', { time: formatTimestampUs(START_US), when: 1 }, 400, 'INVALID_ARGUMENT'],
      ['an unknown snapshot', { snapshot: 'projects/p/snapshots/nothing' }, 404, 'NOT_FOUND'],
      ['a malformed snapshot name', { snapshot: 'projects/p/snapshots/s' }, 400, 'INVALID_ARGUMENT'],
    ];
    for (const [what, body, status, code] of cases) {
      const answer = await broker.api('POST', `${P}/subscriptions/errors:seek`, body);
      t.same([answer.status, answer.body.error?.status], [status, code], what);
    }
    const missing = await broker.api('POST', `${P}/subscriptions/nobody:seek`, { time: formatTimestampUs(START_US) });
    t.same([missing.status, missing.body.error?.status], [404, 'NOT_FOUND'], 'an unknown subscription');
    t.same(texts(await pull(broker, 'errors')), ['kept'], 'nothing changed');
  });
}
