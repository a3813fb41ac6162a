// Acknowledge and publish in one step (`:acknowledgeAndPublish`): the acks take effect and the
// messages are published, or nothing is published and the answer names the failed ack IDs; on
// every kind of subscription, to the subscription's own topic or another, on standalone Redis
// and on the cluster with the topics on different shards. The same processing again (a
// redelivery after a lost answer) publishes nothing twice. Every bad input changes nothing.

import t, { type Test } from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { b64, startBroker, type TestBroker, unb64 } from '../helpers/app.ts';
import { redisTargets } from '../helpers/redis.ts';
import { scriptsRunBy } from '../helpers/script-calls.ts';
import { pullNow, topicData } from '../helpers/topic.ts';

const P = '/v1/projects/p';
const JOBS = 'projects/p/topics/jobs';
const FOLLOW_UPS = 'projects/p/topics/follow-ups';

/** The cluster node serving a key's slot, or '' on standalone Redis. */
async function shardOf(broker: TestBroker, key: string): Promise<string> {
  if (!('nodes' in broker.redis)) return '';
  const slot = Number(await broker.redis.cluster('KEYSLOT', key));
  const ranges = await broker.redis.cluster('SLOTS');
  const [, , [host, port]] = ranges.find(([from, to]) => slot >= from && slot <= to)!;
  return `${host}:${port}`;
}

async function ackAndPublish(broker: TestBroker, subscription: string, body: unknown) {
  return broker.api('POST', `${P}/subscriptions/${subscription}:acknowledgeAndPublish`, body);
}

/** A pull that does not wait, acked. */
async function receive(broker: TestBroker, subscription: string) {
  const received = await pullNow(broker, subscription);
  if (received.length > 0) {
    await broker.api('POST', `${P}/subscriptions/${subscription}:acknowledge`, {
      ackIds: received.map((r: { ackId: string }) => r.ackId),
    });
  }
  return received;
}

/**
 * A broker on a manual clock with two topics, jobs and follow-ups: subscription `work` to the
 * jobs (with the settings `work`), and `done` to the follow-ups.
 */
async function jobsBroker(t: Test, name: string, work: Record<string, unknown>) {
  const clock = new ManualClock();
  const broker = await startBroker(t, { clock, name });
  await broker.api('PUT', `${P}/topics/jobs`, {});
  await broker.api('PUT', `${P}/topics/follow-ups`, {});
  await broker.api('PUT', `${P}/subscriptions/work`, { topic: JOBS, ...work });
  await broker.api('PUT', `${P}/subscriptions/done`, { topic: FOLLOW_UPS });
  return { clock, broker };
}

const texts = (received: { message: { data: string } }[]) => received.map((r) => unb64(r.message.data));

for (const target of redisTargets()) {
  t.test(`${target.name}: acks and follow-ups take effect together, on every kind of subscription`, async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'ack-and-publish' });
    await broker.api('PUT', `${P}/topics/jobs`, {});
    // On the cluster, a follow-up topic on another shard than the jobs (topics' hash tags are random).
    for (let attempt = 0; ; attempt++) {
      await broker.api('PUT', `${P}/topics/follow-ups`, {});
      const jobs = (await topicData(broker, 'jobs')).data;
      const followUps = (await topicData(broker, 'follow-ups')).data;
      if ((await shardOf(broker, jobs.state)) !== (await shardOf(broker, followUps.state)) || target.name !== 'cluster')
        break;
      if (attempt === 20) throw new Error('no topic on another shard');
      await broker.api('DELETE', `${P}/topics/follow-ups`);
    }
    await broker.api('PUT', `${P}/subscriptions/done`, { topic: FOLLOW_UPS });
    const kinds = {
      plain: {},
      eod: { enableExactlyOnceDelivery: true },
      ordered: { enableMessageOrdering: true },
      'ordered-eod': { enableMessageOrdering: true, enableExactlyOnceDelivery: true },
    };
    for (const [name, settings] of Object.entries(kinds)) {
      await broker.api('PUT', `${P}/subscriptions/${name}`, { topic: JOBS, ackDeadlineSeconds: 10, ...settings });
    }
    await broker.api('POST', `${P}/topics/jobs:publish`, {
      messages: [
        { data: b64('job-1'), orderingKey: 'k' },
        { data: b64('job-2'), orderingKey: 'k' },
      ],
    });
    const leases = new Map<string, { ackId: string }[]>();
    for (const name of Object.keys(kinds)) {
      const received = await pullNow(broker, name);
      t.same(texts(received), ['job-1', 'job-2'], `${name}: pulled`);
      leases.set(name, received);
    }
    for (const [name, received] of leases) {
      const { result: answer, scripts } = await scriptsRunBy(() =>
        ackAndPublish(broker, name, {
          ackIds: received.map((r: { ackId: string }) => r.ackId),
          publish: [
            {
              topic: FOLLOW_UPS,
              messages: [{ data: b64(`${name}: done`) }, { data: b64(`${name}: later`), deliveryDelay: '30s' }],
            },
            { topic: JOBS, messages: [{ data: b64(`${name}: again`), attributes: { for: name } }] },
          ],
        }),
      );
      t.equal(answer.status, 200, `${name}: answered`);
      // Another topic's keys have another hash tag (on the cluster, another shard).
      const acknowledge = name.startsWith('ordered') ? 'acknowledge-ordered' : 'acknowledge';
      t.same(scripts, ['modify-ack-deadline', 'publish', 'publish', acknowledge], `${name}: in three steps`);
      t.equal(answer.body.messageIds.length, 2, 'message IDs per topic');
      t.equal(answer.body.messageIds[0].length, 2);
    }
    clock.advanceSeconds(11);
    for (const name of Object.keys(kinds)) {
      // The job subscriptions get the four messages published back to their own topic, not the jobs.
      const again = texts(await pullNow(broker, name)).sort();
      t.same(
        again,
        Object.keys(kinds)
          .map((kind) => `${kind}: again`)
          .sort(),
        `${name}: the jobs were acked`,
      );
    }
    t.same(
      texts(await receive(broker, 'done')).sort(),
      Object.keys(kinds)
        .map((kind) => `${kind}: done`)
        .sort(),
      'each follow-up once',
    );
    clock.advanceSeconds(20);
    t.same(
      texts(await receive(broker, 'done')).sort(),
      Object.keys(kinds)
        .map((kind) => `${kind}: later`)
        .sort(),
      'the scheduled follow-ups at their time',
    );
  });
}

// A hold extends the leases before anything is published; Lua's unpack takes at most about 8,000
// values, so a hold writes its deadlines a thousand leases at a time.
t.test('4,500 ack IDs at once are held, acked and followed up', async (t) => {
  const LEASES = 4500;
  const { clock, broker } = await jobsBroker(t, 'ack-and-publish-many', { ackDeadlineSeconds: 60 });
  for (let sent = 0; sent < LEASES; sent += 500) {
    const messages = Array.from({ length: 500 }, (_, i) => ({ data: b64(`job-${sent + i}`) }));
    await broker.api('POST', `${P}/topics/jobs:publish`, { messages });
  }
  const ackIds: string[] = [];
  while (ackIds.length < LEASES) {
    const pulled = await broker.api('POST', `${P}/subscriptions/work:pull`, {
      maxMessages: 1000,
      returnImmediately: true,
    });
    ackIds.push(...(pulled.body.receivedMessages ?? []).map((r: { ackId: string }) => r.ackId));
  }
  const { result: answer, scripts } = await scriptsRunBy(() =>
    ackAndPublish(broker, 'work', { ackIds, publish: [{ topic: FOLLOW_UPS, messages: [{ data: b64('all done') }] }] }),
  );
  t.equal(answer.status, 200, 'answered');
  t.same(scripts, ['modify-ack-deadline', 'publish', 'acknowledge'], 'held, published, acked');
  t.same(texts(await receive(broker, 'done')), ['all done'], 'the follow-up once');
  clock.advanceSeconds(61);
  t.same(await pullNow(broker, 'work'), [], 'every job was acked: none comes back past its deadline');
});

t.test('an ack ID that is not current publishes nothing and says which failed', async (t) => {
  const { clock, broker } = await jobsBroker(t, 'ack-and-publish-stale', { ackDeadlineSeconds: 10 });
  await broker.api('POST', `${P}/topics/jobs:publish`, { messages: [{ data: b64('a') }, { data: b64('b') }] });
  const [first, second] = await pullNow(broker, 'work');
  clock.advanceSeconds(5);
  // Nacked: its ack ID is stale.
  await broker.api('POST', `${P}/subscriptions/work:modifyAckDeadline`, {
    ackIds: [second.ackId],
    ackDeadlineSeconds: 0,
  });
  const refused = await ackAndPublish(broker, 'work', {
    ackIds: [first.ackId, second.ackId, 'not-an-ack-id'],
    publish: [{ topic: FOLLOW_UPS, messages: [{ data: b64('follow-up') }] }],
  });
  t.equal(refused.status, 400);
  t.equal(refused.body.error.status, 'INVALID_ARGUMENT');
  t.same(refused.body.error.details[0].metadata, {
    [second.ackId]: 'PERMANENT_FAILURE_INVALID_ACK_ID',
    'not-an-ack-id': 'PERMANENT_FAILURE_INVALID_ACK_ID',
  });
  t.same(await pullNow(broker, 'done'), [], 'nothing was published');
  // The valid lease was left as it was: it runs out at its own deadline, and comes back.
  clock.advanceSeconds(6);
  t.same(texts(await pullNow(broker, 'work')).sort(), ['a', 'b'], 'neither was acked');

  const [lease] = await pullNow(broker, 'work');
  t.equal(lease, undefined);
  clock.advanceSeconds(11);
  const again = await pullNow(broker, 'work');
  clock.advanceSeconds(11); // expired
  const expired = await ackAndPublish(broker, 'work', {
    ackIds: [again[0].ackId],
    publish: [{ topic: FOLLOW_UPS, messages: [{ data: b64('late') }] }],
  });
  t.equal(expired.status, 400, 'an expired lease fails the call on a subscription without exactly-once too');
  t.same(await pullNow(broker, 'done'), []);
});

t.test('on an ordered exactly-once subscription, acks out of order publish nothing', async (t) => {
  const { broker } = await jobsBroker(t, 'ack-and-publish-order', {
    enableMessageOrdering: true,
    enableExactlyOnceDelivery: true,
  });
  await broker.api('POST', `${P}/topics/jobs:publish`, {
    messages: ['k1', 'k2', 'k3'].map((text) => ({ data: b64(text), orderingKey: 'k' })),
  });
  const [first, second, third] = await pullNow(broker, 'work');
  const publish = [{ topic: FOLLOW_UPS, messages: [{ data: b64('follow-up') }] }];
  const refused = await ackAndPublish(broker, 'work', { ackIds: [second.ackId, third.ackId], publish });
  t.equal(refused.status, 400, 'k2 and k3 while k1 is outstanding');
  t.same(refused.body.error.details[0].metadata, {
    [second.ackId]: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID',
    [third.ackId]: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID',
  });
  const swapped = await ackAndPublish(broker, 'work', { ackIds: [first.ackId, third.ackId], publish });
  t.equal(swapped.status, 400, 'k1 and k3, skipping k2');
  t.same(swapped.body.error.details[0].metadata, { [third.ackId]: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID' });
  t.same(await pullNow(broker, 'done'), [], 'nothing was published');
  const inOrder = await ackAndPublish(broker, 'work', { ackIds: [first.ackId, second.ackId, third.ackId], publish });
  t.equal(inOrder.status, 200, 'all three in order');
  t.same(texts(await pullNow(broker, 'done')), ['follow-up']);
});

t.test('processing the same messages again publishes nothing twice', async (t) => {
  const { clock, broker } = await jobsBroker(t, 'ack-and-publish-again', {
    ackDeadlineSeconds: 10,
    retainAckedMessages: true,
  });
  await broker.api('POST', `${P}/topics/jobs:publish`, { messages: [{ data: b64('job') }] });
  const call = (ackId: string) =>
    ackAndPublish(broker, 'work', {
      ackIds: [ackId],
      publish: [
        { topic: FOLLOW_UPS, messages: [{ data: b64('follow-up') }, { data: b64('own key'), idempotencyKey: 'k1' }] },
      ],
    });
  const [first] = await pullNow(broker, 'work');
  const answered = await call(first.ackId);
  t.equal(answered.status, 200);
  const again = await call(first.ackId);
  t.equal(again.status, 400, 'the acked delivery cannot be acked again, and publishes nothing');
  // The job delivered again (a seek brings it back, as an expired lease would after a broker
  // stopped between publishing and acknowledging) and processed again.
  await broker.api('POST', `${P}/subscriptions/work:seek`, { time: '2000-01-01T00:00:00Z' });
  const [redelivered] = await pullNow(broker, 'work');
  t.ok(redelivered, 'the seek brought the job back');
  const second = await call(redelivered.ackId);
  t.equal(second.status, 200);
  t.same(second.body.messageIds, answered.body.messageIds, 'the same follow-ups, stored once');
  t.same(texts(await receive(broker, 'done')).sort(), ['follow-up', 'own key'], 'each follow-up once');
  clock.advanceSeconds(11);
  t.same(await pullNow(broker, 'work'), [], 'the job is acked');
});

t.test('bad requests change nothing', async (t) => {
  const { clock, broker } = await jobsBroker(t, 'ack-and-publish-bad', { ackDeadlineSeconds: 10 });
  await broker.api('POST', `${P}/topics/jobs:publish`, { messages: [{ data: b64('job') }] });
  const [lease] = await pullNow(broker, 'work');
  const cases: [string, unknown, number, RegExp][] = [
    ['no ack IDs', { ackIds: [], publish: [] }, 400, /at least one ack ID/],
    ['an unknown field', { ackIds: [lease.ackId], extra: 1 }, 400, /extra/],
    [
      'a bad topic name',
      { ackIds: [lease.ackId], publish: [{ topic: 'follow-ups', messages: [{ data: b64('x') }] }] },
      400,
      /Invalid \[topics\] name/,
    ],
    [
      'a missing topic',
      { ackIds: [lease.ackId], publish: [{ topic: 'projects/p/topics/none', messages: [{ data: b64('x') }] }] },
      404,
      /publish\[0\]/,
    ],
    [
      'an empty message',
      { ackIds: [lease.ackId], publish: [{ topic: FOLLOW_UPS, messages: [{}] }] },
      400,
      /publish\[0\]: One or more messages/,
    ],
    [
      'no messages',
      { ackIds: [lease.ackId], publish: [{ topic: FOLLOW_UPS, messages: [] }] },
      400,
      /at least one message/,
    ],
    [
      'bad base64',
      { ackIds: [lease.ackId], publish: [{ topic: FOLLOW_UPS, messages: [{ data: '***' }] }] },
      400,
      /base64/,
    ],
    [
      'a bad delivery delay',
      {
        ackIds: [lease.ackId],
        publish: [{ topic: FOLLOW_UPS, messages: [{ data: b64('x'), deliveryDelay: 'soon' }] }],
      },
      400,
      /not a duration/,
    ],
  ];
  for (const [what, body, status, message] of cases) {
    const answer = await ackAndPublish(broker, 'work', body);
    t.equal(answer.status, status, what);
    t.match(answer.body.error?.message, message, what);
  }
  const unknown = await ackAndPublish(broker, 'none', { ackIds: [lease.ackId] });
  t.equal(unknown.status, 404, 'an unknown subscription');
  t.same(await pullNow(broker, 'done'), [], 'nothing was published');
  clock.advanceSeconds(11);
  t.same(texts(await pullNow(broker, 'work')), ['job'], 'and nothing acked');
});
