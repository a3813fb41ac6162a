// Dead-letter policies beyond the randomized test (redelivery.property.test.ts), on the real
// clock: a stream's frames carry deliveryAttempt and its nacks forward the message; a message
// of 1 MB with 100 attributes is forwarded whole (its copy has 104); while the dead-letter topic
// does not exist (deleted meanwhile), messages past the limit are delivered again, and forwarded
// once it exists again; with the policy removed they are delivered again without
// deliveryAttempt; an exactly-once ack ID of a forwarded message fails as expired. The crash
// safety of forwarding is in dead-letter-crash.test.ts.

import t, { type Test } from 'tap';
import { b64, unb64 } from '../helpers/app.ts';
import { openPolicyBroker, PROJECT, texts } from '../helpers/policy-broker.ts';
import { hasMessages, sleep } from '../streaming/_ws.ts';

const DEAD = `projects/${PROJECT}/topics/dead`;
/** Longer than a broker goes by what it read of a dead-letter topic (dead-letters.ts). */
const TOPIC_FORGOTTEN_MS = 1100;

async function withDeadLetters(t: Test, maxDeliveryAttempts = 5, extra: Record<string, unknown> = {}) {
  const b = await openPolicyBroker(t);
  const dead = await b.setUp('dead');
  const s = await b.setUp('source', { deadLetterPolicy: { deadLetterTopic: DEAD, maxDeliveryAttempts }, ...extra });
  /** Pulls and nacks the one message `times` times, returning its delivery attempts. */
  const fail = async (times: number) => {
    const attempts: number[] = [];
    for (let i = 0; i < times; i++) {
      const [received] = await s.pull();
      attempts.push(received?.deliveryAttempt);
      if (received) await s.nack([received.ackId]);
    }
    return attempts;
  };
  return { b, dead, s, fail };
}

t.test('a stream: deliveryAttempt in its frames, and its fifth nack forwards the message', async (t) => {
  const { b, dead, s } = await withDeadLetters(t);
  const client = await b.open('source');
  await s.publish([{ data: b64('poison') }]);
  const attempts: number[] = [];
  for (let i = 0; i < 5; i++) {
    const [received] = (await client.take(hasMessages)).receivedMessages;
    attempts.push(received.deliveryAttempt);
    client.send({ modifyDeadlineAckIds: [received.ackId], modifyDeadlineSeconds: [0] });
  }
  t.same(attempts, [1, 2, 3, 4, 5], 'five deliveries, counted');
  let forwarded: any[] = [];
  for (let i = 0; i < 50 && forwarded.length === 0; i++) {
    forwarded = await dead.pull();
    if (forwarded.length === 0) await sleep(50);
  }
  t.same(texts(forwarded), ['poison'], 'on the dead-letter topic');
  t.equal(forwarded[0].deliveryAttempt, undefined, 'whose subscription has no dead-letter policy');
  await client.roundTrip();
  t.notOk(client.untaken.some(hasMessages), 'the stream never got it again');
});

t.test('a long poll whose pull forwarded a message looks again at once', async (t) => {
  const { s, fail } = await withDeadLetters(t);
  await s.publish([{ data: b64('poison') }]);
  t.same(await fail(5), [1, 2, 3, 4, 5]);
  await s.publish([{ data: b64('fine') }]);
  const started = Date.now();
  const received = await s.pull(false, 1);
  t.same(texts(received), ['fine'], 'the message behind the forwarded one');
  t.ok(Date.now() - started < 2000, `at once (${Date.now() - started} ms), not when the forward's claim runs out`);
});

t.test('a message of 1 MB with 100 attributes is forwarded whole', async (t) => {
  const { dead, s, fail } = await withDeadLetters(t);
  const data = Buffer.alloc(1_000_000, 'x').toString('base64');
  const attributes = Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`a${i}`, `v${i}`]));
  await s.publish([{ data, attributes, orderingKey: 'big' }]);
  t.same(await fail(6), [1, 2, 3, 4, 5, undefined], 'five deliveries, then none');
  const [copy] = await dead.pull();
  t.equal(copy.message.data, data, 'its data');
  t.equal(copy.message.orderingKey, 'big', 'its ordering key');
  t.equal(Object.keys(copy.message.attributes).length, 104, 'its attributes, and the four of the forward');
  t.match(copy.message.attributes, { a0: 'v0', a99: 'v99', CloudPubSubDeadLetterSourceDeliveryCount: '5' });
});

t.test('a dead-letter topic deleted and made again: the message goes to the new one', async (t) => {
  const { b, s, fail } = await withDeadLetters(t);
  await s.publish([{ data: b64('poison') }]);
  t.same(await fail(5), [1, 2, 3, 4, 5]);
  // The broker still goes by the topic it read a moment ago: the first forward finds that
  // incarnation deleted, and gives the message back; the next finds the new topic.
  await b.ok('DELETE', `/v1/${DEAD}`);
  await b.ok('PUT', `/v1/${DEAD}`, {});
  await b.ok('PUT', `/v1/projects/${PROJECT}/subscriptions/dead-new`, { topic: DEAD });
  t.same(await fail(2), [undefined, undefined], 'not delivered again');
  const copies = await b.ok('POST', `/v1/projects/${PROJECT}/subscriptions/dead-new:pull`, { maxMessages: 10 });
  t.same(texts(copies.receivedMessages), ['poison'], 'on the new topic, once');
  t.equal(copies.receivedMessages[0].message.attributes.CloudPubSubDeadLetterSourceDeliveryCount, '5');
});

t.test('while the dead-letter topic does not exist, messages are delivered again; then forwarded to it', async (t) => {
  const { b, s, fail } = await withDeadLetters(t);
  await s.publish([{ data: b64('poison') }]);
  t.same(await fail(5), [1, 2, 3, 4, 5]);
  await b.ok('DELETE', `/v1/${DEAD}`);
  await sleep(TOPIC_FORGOTTEN_MS);
  t.same(await fail(2), [6, 7], 'delivered again, the attempts counting on');

  await b.ok('PUT', `/v1/${DEAD}`, {});
  await b.ok('PUT', `/v1/projects/${PROJECT}/subscriptions/dead-again`, { topic: DEAD });
  await sleep(TOPIC_FORGOTTEN_MS);
  t.same(await fail(1), [undefined], 'once it exists, forwarded instead');
  const copies = await b.ok('POST', `/v1/projects/${PROJECT}/subscriptions/dead-again:pull`, { maxMessages: 10 });
  t.same(texts(copies.receivedMessages), ['poison'], 'on the topic made again');
  t.equal(copies.receivedMessages[0].message.attributes.CloudPubSubDeadLetterSourceDeliveryCount, '7');
});

t.test('with the dead-letter policy removed, messages past the limit are delivered again', async (t) => {
  const { b, s, fail } = await withDeadLetters(t);
  await s.publish([{ data: b64('poison') }]);
  t.same(await fail(4), [1, 2, 3, 4]);
  await b.ok('PATCH', `/v1/projects/${PROJECT}/subscriptions/source`, {
    subscription: {},
    updateMask: 'deadLetterPolicy',
  });
  t.same(await fail(3), [undefined, undefined, undefined], 'delivered, without deliveryAttempt');
  const [again] = await s.pull();
  t.equal(unb64(again.message.data), 'poison', 'and still there');
});

t.test('exactly-once: the ack ID of a forwarded message fails as expired', async (t) => {
  const { dead, s } = await withDeadLetters(t, 5, { enableExactlyOnceDelivery: true });
  await s.publish([{ data: b64('poison') }]);
  let last = '';
  for (let attempt = 1; attempt <= 5; attempt++) {
    const [received] = await s.pull();
    t.equal(received.deliveryAttempt, attempt);
    last = received.ackId;
    await s.nack([last]);
  }
  t.same(await s.pull(), [], 'forwarded instead');
  t.same(texts(await dead.pull()), ['poison']);
  const refused = await s.ack([last]).catch((error: Error) => error.message);
  t.match(refused, /"PERMANENT_FAILURE_INVALID_ACK_ID"/, 'PERMANENT_FAILURE_INVALID_ACK_ID');
});
