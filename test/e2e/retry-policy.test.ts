// The retry policy on the one clock as it runs (Redis TIME, real time): a nacked message comes
// back once its backoff ends, to a long-polling pull and to a stream that were asleep, woken by
// the backoff's end rather than by polling (the pull scripts they run are counted); an ordering
// key waits for the backoff of its oldest message; leases a stream gives back unseen (over its
// byte budget) wait out no backoff. The randomized test (redelivery.property.test.ts) covers the
// timing rules on a manual clock.

import t from 'tap';
import { b64, unb64 } from '../helpers/app.ts';
import { openPolicyBroker, texts } from '../helpers/policy-broker.ts';
import { redisTargets } from '../helpers/redis.ts';
import { ackIdsOf, hasMessages } from '../streaming/_ws.ts';

const BACKOFF_S = 1;
const RETRY = { retryPolicy: { minimumBackoff: `${BACKOFF_S}s`, maximumBackoff: `${BACKOFF_S}s` } };

for (const target of redisTargets()) {
  t.test(`a long-polling pull wakes when a backoff ends (${target.name})`, async (t) => {
    const b = await openPolicyBroker(t, target);
    const s = await b.setUp('long-poll', RETRY);
    await s.publish([{ data: b64('again') }]);
    const [first] = await s.pull();
    await s.nack([first.ackId]);
    t.same(await s.pull(), [], 'not available during the backoff');
    const pullsBefore = b.ran.pulls;
    const started = Date.now();
    const received = await s.pull(false);
    const waitedMs = Date.now() - started;
    t.same(texts(received), ['again'], 'the long poll got the message');
    t.ok(waitedMs >= 700 && waitedMs < 3000, `after the backoff (${waitedMs} ms)`);
    t.ok(b.ran.pulls - pullsBefore <= 3, `without polling (${b.ran.pulls - pullsBefore} pull scripts)`);
  });
}

t.test('a stream gets a nacked message again when its backoff ends', async (t) => {
  const b = await openPolicyBroker(t);
  const s = await b.setUp('stream', RETRY);
  const client = await b.open('stream');
  await s.publish([{ data: b64('again') }]);
  const first = (await client.take(hasMessages)).receivedMessages;
  const pullsBefore = b.ran.pulls;
  const nackedAt = Date.now();
  client.send({ modifyDeadlineAckIds: ackIdsOf(first), modifyDeadlineSeconds: [0] });
  const again = (await client.take(hasMessages, 5000)).receivedMessages;
  const waitedMs = Date.now() - nackedAt;
  t.same(texts(again), ['again'], 'redelivered on the stream');
  t.ok(waitedMs >= 700 && waitedMs < 3000, `after the backoff (${waitedMs} ms)`);
  t.ok(b.ran.pulls - pullsBefore <= 4, `without polling (${b.ran.pulls - pullsBefore} pull scripts)`);
});

t.test('an ordering key waits for the backoff of its oldest message', async (t) => {
  const b = await openPolicyBroker(t);
  const s = await b.setUp('ordered', { ...RETRY, enableMessageOrdering: true });
  await s.publish([
    { data: b64('k1'), orderingKey: 'k' },
    { data: b64('k2'), orderingKey: 'k' },
  ]);
  await s.publish([{ data: b64('free') }]);
  const received = await s.pull();
  t.same(texts(received).sort(), ['free', 'k1', 'k2'], 'all delivered');
  const k1 = received.find((m: { message: { data: string } }) => unb64(m.message.data) === 'k1');
  await s.nack([k1.ackId]);
  t.same(await s.pull(), [], 'k1 waits out its backoff, and k2 with it (the cascade took its lease)');
  const again = await s.pull(false);
  t.same(texts(again), ['k1', 'k2'], 'then the key comes back in order');
});

t.test('leases a stream gives back unseen wait out no backoff', async (t) => {
  const b = await openPolicyBroker(t);
  const s = await b.setUp('budget', {
    retryPolicy: { minimumBackoff: '30s', maximumBackoff: '30s' },
  });
  // One message fits the byte budget at a time: the pull leases both, the stream gives the
  // second back at once.
  const client = await b.open('budget', { maxOutstandingBytes: 1 });
  await s.publish([{ data: b64('one') }, { data: b64('two') }]);
  const first = (await client.take(hasMessages)).receivedMessages;
  t.same(texts(first), ['one']);
  client.send({ ackIds: ackIdsOf(first) });
  const second = (await client.take(hasMessages, 5000)).receivedMessages;
  t.same(texts(second), ['two'], 'the given-back message comes as soon as there is room, not after 30 s');
});
