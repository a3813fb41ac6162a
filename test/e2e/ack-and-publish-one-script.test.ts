// Acknowledge and publish to the subscription's own topic (`:acknowledgeAndPublish`): every key
// of the call shares the topic's hash tag, so the whole call is one script
// (acknowledge-and-publish.lua), all or nothing. A lease that is not current, an ack out of its
// key's order on an ordered exactly-once subscription and a refused publish each leave
// everything as it was: nothing published, nothing acked, no lease changed. A publish to another
// topic still takes the three steps (hold, publish, acknowledge).

import t from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { b64, startBroker, type TestBroker, unb64 } from '../helpers/app.ts';
import { type RedisTarget, redisTargets } from '../helpers/redis.ts';
import { scriptsRunBy } from '../helpers/script-calls.ts';
import { pullNow } from '../helpers/topic.ts';

const P = '/v1/projects/p';
const JOBS = 'projects/p/topics/jobs';

const texts = (received: { message: { data: string } }[]) => received.map((r) => unb64(r.message.data));

/** The call, and the scripts it ran. */
function ackAndPublish(broker: TestBroker, subscription: string, body: unknown) {
  return scriptsRunBy(() => broker.api('POST', `${P}/subscriptions/${subscription}:acknowledgeAndPublish`, body));
}

/** The subscription's backlog, as "text state [lease expiry]" per message, in seq order. */
async function backlog(broker: TestBroker, subscription: string): Promise<string[]> {
  const { body } = await broker.api('GET', `${P}/subscriptions/${subscription}/messages?view=FULL&pageSize=100`);
  return (body.messages ?? []).map(
    (item: { message: { data: string }; state: string; leaseExpireTime?: string }) =>
      `${unb64(item.message.data)} ${item.state}${item.leaseExpireTime ? ` ${item.leaseExpireTime}` : ''}`,
  );
}

/**
 * A broker (on standalone Redis unless `target` says otherwise) with topic jobs, subscription
 * `work` on it (`settings`), and `published` published there, with `orderingKey` when given.
 */
async function jobsBroker(
  t: Parameters<typeof startBroker>[0],
  name: string,
  settings: object,
  published: string[],
  {
    orderingKey,
    target,
    stageBodiesFromBytes,
  }: { orderingKey?: string; target?: RedisTarget; stageBodiesFromBytes?: number } = {},
) {
  const clock = new ManualClock();
  const broker = await startBroker(t, { clock, name, target, stageBodiesFromBytes });
  await broker.api('PUT', `${P}/topics/jobs`, {});
  await broker.api('PUT', `${P}/subscriptions/work`, { topic: JOBS, ackDeadlineSeconds: 10, ...settings });
  await broker.api('POST', `${P}/topics/jobs:publish`, {
    messages: published.map((text) => ({ data: b64(text), ...(orderingKey ? { orderingKey } : {}) })),
  });
  return { clock, broker };
}

const KINDS = {
  plain: {},
  'exactly-once': { enableExactlyOnceDelivery: true },
  ordered: { enableMessageOrdering: true },
  'ordered exactly-once': { enableMessageOrdering: true, enableExactlyOnceDelivery: true },
};

for (const [kind, settings] of Object.entries(KINDS)) {
  for (const target of redisTargets()) {
    t.test(`${target.name}, ${kind}: a follow-up to the subscription's own topic is one script`, async (t) => {
      const { clock, broker } = await jobsBroker(t, 'ack-publish-one', settings, ['job-1', 'job-2'], {
        orderingKey: 'k',
        target,
      });
      const leases = await pullNow(broker, 'work');
      t.same(texts(leases), ['job-1', 'job-2']);
      const { result: answer, scripts } = await ackAndPublish(broker, 'work', {
        ackIds: leases.map((lease) => lease.ackId),
        publish: [
          { topic: JOBS, messages: [{ data: b64('next-3'), deliveryDelay: '30s' }] },
          {
            topic: JOBS,
            messages: [
              { data: b64('next-1'), orderingKey: 'k' },
              { data: b64('next-2'), orderingKey: 'k' },
            ],
          },
        ],
      });
      t.equal(answer.status, 200, JSON.stringify(answer.body.error));
      t.same(
        answer.body.messageIds.map((ids: string[]) => ids.length),
        [1, 2],
      );
      t.same(scripts, ['acknowledge-and-publish'], 'the whole call is one script');
      clock.advanceSeconds(11);
      const followUps = await pullNow(broker, 'work');
      t.same(texts(followUps), ['next-1', 'next-2'], 'the jobs acked, the follow-ups there');
      await broker.api('POST', `${P}/subscriptions/work:acknowledge`, { ackIds: followUps.map((r) => r.ackId) });
      clock.advanceSeconds(30);
      t.same(texts(await pullNow(broker, 'work')), ['next-3'], 'the scheduled follow-up at its time');
    });
  }
}

t.test('bodies a publish would stage go in the one script', async (t) => {
  const { broker } = await jobsBroker(t, 'ack-publish-one-large', {}, ['job'], { stageBodiesFromBytes: 1000 });
  const [lease] = await pullNow(broker, 'work');
  const large = 'x'.repeat(5000);
  const { result: answer, scripts } = await ackAndPublish(broker, 'work', {
    ackIds: [lease.ackId],
    publish: [
      { topic: JOBS, messages: [{ data: b64(large) }, { data: b64('small') }] },
      { topic: JOBS, messages: [{ data: b64(`${large}!`) }] },
    ],
  });
  t.equal(answer.status, 200);
  t.same(scripts, ['acknowledge-and-publish']);
  t.same(texts(await pullNow(broker, 'work')), [large, 'small', `${large}!`], 'the job acked, the follow-ups stored');
});

t.test('a follow-up to another topic, or a later publish that schedules, takes the three steps', async (t) => {
  const { broker } = await jobsBroker(t, 'ack-publish-three', {}, ['job-1', 'job-2']);
  await broker.api('PUT', `${P}/topics/follow-ups`, {});
  const [first, second] = await pullNow(broker, 'work');
  const cases: [string, string, unknown[]][] = [
    [
      'another topic',
      first.ackId,
      [
        { topic: JOBS, messages: [{ data: b64('again') }] },
        { topic: 'projects/p/topics/follow-ups', messages: [{ data: b64('next') }] },
      ],
    ],
    [
      'a later publish that schedules',
      second.ackId,
      [
        { topic: JOBS, messages: [{ data: b64('again') }] },
        { topic: JOBS, messages: [{ data: b64('later'), deliveryDelay: '30s' }] },
      ],
    ],
  ];
  for (const [what, ackId, publish] of cases) {
    const { result: answer, scripts } = await ackAndPublish(broker, 'work', { ackIds: [ackId], publish });
    t.equal(answer.status, 200, what);
    t.same(scripts, ['modify-ack-deadline', 'publish', 'publish', 'acknowledge'], what);
  }
});

t.test('an ack ID that is not current refuses the one script: nothing published, no lease changed', async (t) => {
  const { clock, broker } = await jobsBroker(t, 'ack-publish-one-stale', {}, ['a', 'b', 'c']);
  const [first, second, third] = await pullNow(broker, 'work');
  clock.advanceSeconds(5);
  await broker.api('POST', `${P}/subscriptions/work:modifyAckDeadline`, {
    ackIds: [second.ackId],
    ackDeadlineSeconds: 0,
  });
  const before = await backlog(broker, 'work');
  t.match(before, ['b AVAILABLE', /^a LEASED /, /^c LEASED /]);
  const publish = [{ topic: JOBS, messages: [{ data: b64('follow-up') }] }];
  const cases: [string, string[], Record<string, string>][] = [
    ['a nacked ack ID', [first.ackId, second.ackId], { [second.ackId]: 'PERMANENT_FAILURE_INVALID_ACK_ID' }],
    [
      'an ack ID of no delivery',
      [first.ackId, 'not-an-ack-id', third.ackId],
      { 'not-an-ack-id': 'PERMANENT_FAILURE_INVALID_ACK_ID' },
    ],
  ];
  for (const [what, ackIds, failures] of cases) {
    const { result: refused, scripts } = await ackAndPublish(broker, 'work', { ackIds, publish });
    t.equal(refused.status, 400, what);
    t.same(refused.body.error.details[0].metadata, failures, `${what}: the failures`);
    t.same(scripts, ['acknowledge-and-publish'], `${what}: refused by the one script`);
    t.same(await backlog(broker, 'work'), before, `${what}: nothing published, acked or held`);
  }
  clock.advanceSeconds(6); // past the deadlines of a and c
  const { result: expired } = await ackAndPublish(broker, 'work', { ackIds: [first.ackId], publish });
  t.equal(expired.status, 400, 'an expired lease refuses the call on a subscription without exactly-once too');
  t.same(expired.body.error.details[0].metadata, { [first.ackId]: 'PERMANENT_FAILURE_INVALID_ACK_ID' });
  t.same(await backlog(broker, 'work'), before, 'expired: nothing published, acked or held');
});

t.test('on an ordered exactly-once subscription, acks out of order refuse the one script', async (t) => {
  const settings = { enableMessageOrdering: true, enableExactlyOnceDelivery: true };
  const { broker } = await jobsBroker(t, 'ack-publish-one-order', settings, ['k1', 'k2', 'k3'], { orderingKey: 'k' });
  const [first, second, third] = await pullNow(broker, 'work');
  const before = await backlog(broker, 'work');
  const publish = [{ topic: JOBS, messages: [{ data: b64('follow-up'), orderingKey: 'k' }] }];
  const { result: swapped, scripts } = await ackAndPublish(broker, 'work', {
    ackIds: [first.ackId, third.ackId],
    publish,
  });
  t.equal(swapped.status, 400, 'k1 and k3, skipping k2');
  t.same(swapped.body.error.details[0].metadata, { [third.ackId]: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID' });
  t.same(scripts, ['acknowledge-and-publish']);
  t.same(await backlog(broker, 'work'), before, 'nothing published, acked or held');
  const { result: inOrder } = await ackAndPublish(broker, 'work', {
    ackIds: [first.ackId, second.ackId, third.ackId],
    publish,
  });
  t.equal(inOrder.status, 200, 'all three in order');
  t.same(texts(await pullNow(broker, 'work')), ['follow-up']);
});

t.test('a publish the one script refuses leaves everything as it was', async (t) => {
  // The subscription keeps messages 10 minutes: a follow-up due later would expire first.
  const { broker } = await jobsBroker(t, 'ack-publish-one-refused', { messageRetentionDuration: '600s' }, ['job']);
  const [lease] = await pullNow(broker, 'work');
  const before = await backlog(broker, 'work');
  const { result: refused, scripts } = await ackAndPublish(broker, 'work', {
    ackIds: [lease.ackId],
    publish: [{ topic: JOBS, messages: [{ data: b64('too late'), deliveryDelay: '3600s' }] }],
  });
  t.equal(refused.status, 400);
  t.match(refused.body.error.message, /the retention of a subscription that takes it/);
  t.same(scripts, ['acknowledge-and-publish'], 'refused inside the one script');
  t.same(await backlog(broker, 'work'), before, 'nothing published, acked or held');
});

t.test('attachments changed since the broker read them: the one script runs again', async (t) => {
  const { broker } = await jobsBroker(t, 'ack-publish-one-attached', {}, ['job']);
  const [lease] = await pullNow(broker, 'work');
  // Attached after the publish above read the attachments: the broker's copy is out of date.
  await broker.api('PUT', `${P}/subscriptions/audit`, { topic: JOBS });
  const { result: answer, scripts } = await ackAndPublish(broker, 'work', {
    ackIds: [lease.ackId],
    publish: [{ topic: JOBS, messages: [{ data: b64('follow-up') }] }],
  });
  t.equal(answer.status, 200);
  t.same(scripts, ['acknowledge-and-publish', 'acknowledge-and-publish'], 'refused once, then stored');
  t.same(texts(await pullNow(broker, 'audit')), ['follow-up'], 'the new subscription takes the follow-up');
  t.same(await backlog(broker, 'work'), ['follow-up AVAILABLE'], 'the job acked, the follow-up stored once');
});
