// Subscriber.StreamingPull over gRPC, spoken with a raw grpc-js client against a listening
// buildApp (streamHeartbeatMs 300 unless a test needs otherwise); the gRPC counterpart of
// test/streaming/protocol.test.ts:
//   - first-request rules, and how a refused stream ends (its gRPC status, no response before);
//   - subscriptionProperties first; messages pushed as they are published;
//   - flow control by messages and by bytes; HTTP/2 back-pressure holds back leasing;
//   - acks and deadline changes on the stream, exactly-once confirmations;
//   - keep-alives; an invalid request mid-stream; ordering keys held by one stream;
//   - how streams end: shutdown (UNAVAILABLE), half-close (OK), cancel (leases run out).

import { status as grpcStatus } from '@grpc/grpc-js';
import t, { type Test } from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { waitUntil } from '../helpers/wait.ts';
import {
  ackConfirmation,
  ackIdsOf,
  hasMessages,
  modConfirmation,
  type PullStream,
  type ReceivedMessage,
  rpc,
  sleep,
  startGrpcBroker,
  subName,
  textOf,
} from './_client.ts';

const first = (id: string, extra: object = {}) => ({
  subscription: subName(id),
  streamAckDeadlineSeconds: 60,
  ...extra,
});
const PLAIN_PROPERTIES = { exactlyOnceDeliveryEnabled: false, messageOrderingEnabled: false };

/** The stream must end with `code` (never OK) and a message, having sent nothing before. */
async function expectEnd(t: Test, stream: PullStream, code: number, what: string, { silent = true } = {}) {
  const status = await stream.waitEnd(3000).catch((error: Error) => {
    t.fail(`${what}: ${error.message}`);
    return undefined;
  });
  if (!status) return;
  t.equal(status.code, code, `${what}: ends with ${grpcStatus[code]} (${status.details})`);
  t.ok(status.details.length > 0, `${what}: with a message`);
  if (silent) t.strictSame(stream.responses, [], `${what}: no response before`);
}

t.test('first-request rules', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');

  const refused: [string, object, number][] = [
    ['no subscription', { streamAckDeadlineSeconds: 60 }, grpcStatus.INVALID_ARGUMENT],
    ['a subscription that is no resource name', { ...first('x'), subscription: 'sub1' }, grpcStatus.INVALID_ARGUMENT],
    ['a subscription ID too short', first('ab'), grpcStatus.INVALID_ARGUMENT],
    ['a subscription ID starting with goog', first('goog-sub'), grpcStatus.INVALID_ARGUMENT],
    ['a topic name as the subscription', { ...first('x'), subscription: `projects/p/topics/topic1` }, 3],
    ['no streamAckDeadlineSeconds', { subscription: subName('sub1') }, grpcStatus.INVALID_ARGUMENT],
    ['streamAckDeadlineSeconds 9', first('sub1', { streamAckDeadlineSeconds: 9 }), grpcStatus.INVALID_ARGUMENT],
    ['streamAckDeadlineSeconds 601', first('sub1', { streamAckDeadlineSeconds: 601 }), grpcStatus.INVALID_ARGUMENT],
    ['streamAckDeadlineSeconds -1', first('sub1', { streamAckDeadlineSeconds: -1 }), grpcStatus.INVALID_ARGUMENT],
    ['a subscription that does not exist', first('nope'), grpcStatus.NOT_FOUND],
  ];
  for (const [what, request, code] of refused) {
    const stream = b.stream();
    stream.write(request);
    await expectEnd(t, stream, code, what);
  }

  for (const [what, request] of [
    ['streamAckDeadlineSeconds 10', first('sub1', { streamAckDeadlineSeconds: 10 })],
    ['streamAckDeadlineSeconds 600', first('sub1', { streamAckDeadlineSeconds: 600 })],
    [
      'every first-request field',
      first('sub1', {
        clientId: 'c-1',
        maxOutstandingMessages: '5',
        maxOutstandingBytes: '1000',
        protocolVersion: '1',
      }),
    ],
  ] as const) {
    const stream = b.stream();
    stream.write(request);
    const response = await stream.take(() => true, 3000).catch((error: Error) => error.message);
    t.strictSame(response, { subscriptionProperties: PLAIN_PROPERTIES }, `${what}: accepted`);
    await stream.roundTrip();
    t.notOk(stream.status, `${what}: the stream stays open`);
    stream.cancel();
  }

  const refusedLater: [string, object][] = [
    ['subscription', { subscription: subName('sub1') }],
    ['clientId', { clientId: 'again' }],
    ['maxOutstandingMessages', { maxOutstandingMessages: '3' }],
    ['maxOutstandingBytes', { maxOutstandingBytes: '3' }],
    ['protocolVersion', { protocolVersion: '1' }],
    ['streamAckDeadlineSeconds 5', { streamAckDeadlineSeconds: 5 }],
  ];
  for (const [what, request] of refusedLater) {
    const stream = await b.open('sub1');
    stream.write(request);
    await expectEnd(t, stream, grpcStatus.INVALID_ARGUMENT, `${what} in a later request`, { silent: false });
  }

  const later = await b.open('sub1', { streamAckDeadlineSeconds: 10 });
  later.write({ streamAckDeadlineSeconds: 20 });
  await later.roundTrip();
  t.notOk(later.status, 'a later streamAckDeadlineSeconds is accepted');

  // A stream that never sends its first request is ended after two heartbeat periods.
  const silent = b.stream();
  await expectEnd(t, silent, grpcStatus.DEADLINE_EXCEEDED, 'no first request');
});

t.test('the first response is subscriptionProperties with the subscription flags', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  for (const [id, extra, eod, ordered] of [
    ['plain', {}, false, false],
    ['eod', { enableExactlyOnceDelivery: true }, true, false],
    ['ordered', { enableMessageOrdering: true }, false, true],
    ['both', { enableExactlyOnceDelivery: true, enableMessageOrdering: true }, true, true],
  ] as const) {
    await b.subscription(`props-${id}`, 'topic1', extra);
    const stream = b.stream();
    stream.write(first(`props-${id}`));
    t.strictSame(
      await stream.take(),
      { subscriptionProperties: { exactlyOnceDeliveryEnabled: eod, messageOrderingEnabled: ordered } },
      `${id}: first response`,
    );
  }
});

t.test('messages are pushed as they are published, without polling', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  let pulls = 0;
  const delivery = b.app.broker.delivery;
  const pullOnce = delivery.pullOnce.bind(delivery);
  delivery.pullOnce = (...args: Parameters<typeof pullOnce>) => {
    pulls++;
    return pullOnce(...args);
  };
  const stream = await b.open('sub1');
  await sleep(300);
  const idleStart = pulls;
  await sleep(1000);
  t.equal(pulls - idleStart, 0, 'an idle stream runs no pull');
  for (let i = 0; i < 5; i++) {
    const [id] = await b.publish('topic1', [{ data: `push-${i}`, attributes: { n: String(i) } }]);
    const [m] = await stream.takeMessages(1);
    t.equal(textOf(m), `push-${i}`, `message ${i} pushed after it was published`);
    t.equal(m.message.messageId, id, 'with the message ID the publish answered');
    t.strictSame(m.message.attributes, { n: String(i) }, 'and its attributes');
    t.match(m.message.publishTime, { seconds: /^\d+$/ }, 'publishTime is a Timestamp');
    t.ok(Buffer.isBuffer(m.message.data), 'data is bytes');
    stream.write({ ackIds: [m.ackId] });
  }
  await stream.roundTrip();
  t.notOk(stream.status, 'the stream is open');
});

t.test('flow control: maxOutstandingMessages', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const stream = await b.open('sub1', { maxOutstandingMessages: '2' });
  await b.publish(
    'topic1',
    [1, 2, 3, 4, 5, 6].map((i) => ({ data: `m${i}` })),
  );
  const firstTwo = await stream.takeMessages(2);
  t.equal(firstTwo.length, 2, 'two messages delivered');
  t.ok(await stream.quiet(500), 'nothing more while 2 are outstanding');
  stream.write({ ackIds: [firstTwo[0].ackId] });
  const third = await stream.takeMessages(1);
  t.equal(third.length, 1, 'one more after one ack');
  t.ok(await stream.quiet(400), 'then nothing more');
  stream.write({ modifyDeadlineAckIds: [firstTwo[1].ackId], modifyDeadlineSeconds: [0] });
  const afterNack = await stream.takeMessages(1);
  t.equal(afterNack.length, 1, 'one more after one nack');
  stream.write({ modifyDeadlineAckIds: [third[0].ackId], modifyDeadlineSeconds: [120] });
  t.ok(await stream.quiet(400), 'a deadline extension frees no room');

  const seen = new Set([...firstTwo, ...third, ...afterNack].map(textOf));
  let held = [third[0], afterNack[0]];
  let maxHeld = held.length;
  while (seen.size < 6) {
    stream.write({ ackIds: ackIdsOf(held) });
    held = await stream.takeMessages(1);
    await sleep(150);
    held.push(...stream.takeAllPending());
    for (const m of held) seen.add(textOf(m));
    maxHeld = Math.max(maxHeld, held.length);
  }
  t.equal(seen.size, 6, 'all six messages delivered as they are acked');
  t.ok(maxHeld <= 2, `never more than 2 outstanding (max ${maxHeld})`);
});

t.test('flow control: maxOutstandingBytes', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const bytes = (tag: string) => tag.padEnd(99, '.');
  // 99-byte messages, limit 250: the third one reaches the limit.
  const stream = await b.open('sub1', { maxOutstandingBytes: '250' });
  const got: ReceivedMessage[] = [];
  for (let i = 1; i <= 3; i++) {
    await b.publish('topic1', [{ data: bytes(`m${i}`) }]);
    got.push(...(await stream.takeMessages(1)));
  }
  await b.publish('topic1', [{ data: bytes('m4') }]);
  t.ok(await stream.quiet(500), 'at >= 250 outstanding bytes nothing more is sent');
  stream.write({ ackIds: [got[0].ackId] });
  const [fourth] = await stream.takeMessages(1);
  t.equal(textOf(fourth).slice(0, 2), 'm4', 'after an ack the next message comes');
  await b.publish('topic1', [{ data: bytes('m5') }]);
  t.ok(await stream.quiet(400), 'and again the limit holds');

  // A burst in one publish: at most one message past the limit, not a whole pull batch.
  await b.subscription('sub2', 'topic1');
  const burst = await b.open('sub2', { maxOutstandingBytes: '250' });
  await b.publish(
    'topic1',
    Array.from({ length: 10 }, (_, i) => ({ data: bytes(`b${i}`) })),
  );
  await burst.takeMessages(1);
  await sleep(400);
  const delivered = burst.responses.filter(hasMessages).flatMap((r) => r.receivedMessages).length;
  t.ok(delivered <= 3, `a burst of ten 99-byte messages delivers at most 3 before an ack (delivered ${delivered})`);
});

t.test('unary acks of stream deliveries free flow-control room', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const stream = await b.open('sub1', { maxOutstandingMessages: '2' });
  await b.publish('topic1', [{ data: 'a1' }, { data: 'a2' }, { data: 'a3' }]);
  const held = await stream.takeMessages(2);
  await rpc(b.subscriber, 'Acknowledge', { subscription: subName('sub1'), ackIds: ackIdsOf(held) });
  const next = await stream.takeMessages(1, 3000).catch(() => []);
  t.equal(next.length, 1, 'after a unary Acknowledge of both, the stream delivers the third message');
});

t.test('HTTP/2 back-pressure: a client that stops reading stops the leasing', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  let leased = 0;
  const delivery = b.app.broker.delivery;
  const pullOnce = delivery.pullOnce.bind(delivery);
  delivery.pullOnce = async (...args: Parameters<typeof pullOnce>) => {
    const result = await pullOnce(...args);
    // The stream's leases carry its streamAckDeadlineSeconds; the unary Pulls below lease too.
    if (args[2] !== undefined) leased += result.received.length;
    return result;
  };
  // No flow-control limit: only the client's reading can hold the stream back.
  const stream = await b.open('sub1');
  stream.call.pause();
  const COUNT = 120;
  const body = 'x'.repeat(32 * 1024);
  for (let i = 0; i < COUNT; i++) await b.publish('topic1', [{ data: `${String(i).padStart(3, '0')}${body}` }]);
  // Leasing stops once HTTP/2's windows and the write buffers are full.
  let last = -1;
  await waitUntil(
    () => {
      const settled = leased === last;
      last = leased;
      return settled;
    },
    5000,
    300,
  );
  t.ok(leased > 0 && leased < COUNT, `the paused stream leased ${leased} of ${COUNT} messages, then stopped`);
  const pulled = new Set<string>();
  for (;;) {
    const reply = await rpc(b.subscriber, 'Pull', { subscription: subName('sub1'), maxMessages: 1000 });
    const received = (reply.receivedMessages ?? []) as ReceivedMessage[];
    if (received.length === 0) break;
    for (const m of received) pulled.add(m.message.messageId);
    await rpc(b.subscriber, 'Acknowledge', { subscription: subName('sub1'), ackIds: ackIdsOf(received) });
  }
  t.equal(pulled.size, COUNT - leased, 'every message the stream did not lease is available to a unary Pull');

  // Reading again: the stream hands over what it leased, and delivery goes on.
  stream.call.resume();
  const onStream = await stream.takeMessages(leased, 5000);
  t.equal(onStream.length, leased, 'the leased messages reach the client once it reads');
  const ids = new Set(onStream.map((m) => m.message.messageId));
  t.notOk(
    [...ids].some((id) => pulled.has(id)),
    'no message was both leased by the stream and pulled',
  );
  t.equal(ids.size + pulled.size, COUNT, 'together they are every message');
  stream.write({ ackIds: ackIdsOf(onStream) });
  const [after] = await b.publish('topic1', [{ data: 'after' }]);
  const [m] = await stream.takeMessages(1);
  t.equal(m.message.messageId, after, 'a message published after the client drained arrives on the stream');
});

t.test('exactly-once: acknowledgeConfirmation and modifyAckDeadlineConfirmation', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('eod', 'topic1', { enableExactlyOnceDelivery: true });
  await b.subscription('other', 'topic1', { enableExactlyOnceDelivery: true });
  const stream = await b.open('eod');
  const other = await b.open('other');
  await b.publish(
    'topic1',
    ['m1', 'm2', 'm3', 'm4'].map((data) => ({ data })),
  );
  const messages = await stream.takeMessages(4);
  const [a1, a2, a3, a4] = messages.map((m) => m.ackId);
  const foreign = (await other.takeMessages(4))[0].ackId;
  const acked = async () =>
    ackConfirmation(
      (await stream.take((r) => r?.acknowledgeConfirmation, 3000, 'acknowledgeConfirmation')).acknowledgeConfirmation,
    );
  const modified = async () =>
    modConfirmation(
      (await stream.take((r) => r?.modifyAckDeadlineConfirmation, 3000, 'modifyAckDeadlineConfirmation'))
        .modifyAckDeadlineConfirmation,
    );

  stream.write({ ackIds: [a1, 'bogus-ack-id', foreign] });
  t.strictSame(
    await acked(),
    { ackIds: [a1], invalidAckIds: ['bogus-ack-id', foreign], unorderedAckIds: [], temporaryFailedAckIds: [] },
    'a mixed batch: the valid ack confirmed; bogus and other-subscription IDs invalid',
  );
  stream.write({ ackIds: [a1] });
  t.strictSame(
    await acked(),
    { ackIds: [], invalidAckIds: [a1], unorderedAckIds: [], temporaryFailedAckIds: [] },
    'a second ack of the same ID is invalid',
  );
  stream.write({ modifyDeadlineAckIds: [a2, 'bogus-ack-id', a1], modifyDeadlineSeconds: [30, 30, 30] });
  t.strictSame(
    await modified(),
    { ackIds: [a2], invalidAckIds: ['bogus-ack-id', a1], temporaryFailedAckIds: [] },
    'an extension confirmed; bogus and acked IDs invalid',
  );
  stream.write({ modifyDeadlineAckIds: [a3], modifyDeadlineSeconds: [0] });
  t.strictSame(await modified(), { ackIds: [a3], invalidAckIds: [], temporaryFailedAckIds: [] }, 'a nack confirmed');
  const [again] = await stream.takeMessages(1);
  t.equal(again.message.messageId, messages[2].message.messageId, 'the nacked message is delivered again');
  t.not(again.ackId, a3, 'with a new ack ID');
  stream.write({ ackIds: [a3, again.ackId] });
  t.strictSame(
    await acked(),
    { ackIds: [again.ackId], invalidAckIds: [a3], unorderedAckIds: [], temporaryFailedAckIds: [] },
    'the ack ID of the earlier delivery is invalid; the current one confirmed',
  );
  // One request with an ack and a mixed modify (extension + nack): acks are applied first.
  stream.write({ ackIds: [a2], modifyDeadlineAckIds: [a4, a2], modifyDeadlineSeconds: [45, 0] });
  t.strictSame(
    await acked(),
    { ackIds: [a2], invalidAckIds: [], unorderedAckIds: [], temporaryFailedAckIds: [] },
    'the ack of a combined request',
  );
  t.strictSame(
    await modified(),
    { ackIds: [a4], invalidAckIds: [a2], temporaryFailedAckIds: [] },
    'its modify: the nack of the ID acked just before is invalid',
  );
  stream.write({ ackIds: [a4] });
  t.strictSame((await acked()).ackIds, [a4], 'the extended message is acked');
  t.ok(await stream.quiet(400), 'nothing is delivered again');
  t.notOk(stream.status, 'invalid ack IDs never end an exactly-once stream');
});

t.test('not exactly-once: acks and deadline changes on the stream', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const stream = await b.open('sub1');
  await b.publish('topic1', [{ data: 'm1' }, { data: 'm2' }]);
  const [m1, m2] = await stream.takeMessages(2);
  stream.write({ ackIds: [m1.ackId] });
  stream.write({ ackIds: [m1.ackId] }); // a second ack: stale, well-formed, ignored
  stream.write({ modifyDeadlineAckIds: [m2.ackId], modifyDeadlineSeconds: [0] });
  const [m2again] = await stream.takeMessages(1);
  t.equal(m2again.message.messageId, m2.message.messageId, 'a nack redelivers');
  stream.write({ ackIds: [m2.ackId] }); // stale after the nack: must not ack the new delivery
  await stream.roundTrip();
  t.notOk(stream.status, 'stale well-formed ack IDs are ignored');
  t.notOk(
    stream.responses.some((r) => r?.acknowledgeConfirmation || r?.modifyAckDeadlineConfirmation),
    'no confirmations without exactly-once',
  );
  stream.write({ modifyDeadlineAckIds: [m2again.ackId], modifyDeadlineSeconds: [0] });
  const [third] = await stream.takeMessages(1);
  t.equal(third.message.messageId, m2.message.messageId, 'the stale ack did not end the current delivery');
  stream.write({ ackIds: [third.ackId] });
  t.ok(await stream.quiet(400), 'acked: not delivered again');
});

t.test('keep-alive requests {} are no-ops', async (t) => {
  const b = await startGrpcBroker(t, { heartbeatMs: 60_000 });
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const stream = await b.open('sub1', { maxOutstandingMessages: '1' });
  await b.publish('topic1', [{ data: 'k1' }, { data: 'k2' }]);
  const [k1] = await stream.takeMessages(1);
  for (let i = 0; i < 3; i++) await stream.roundTrip();
  t.notOk(stream.status, 'the stream is open after three keep-alives');
  t.ok(await stream.quiet(300), 'a keep-alive neither acks nor frees room');
  stream.write({ ackIds: [k1.ackId] });
  const [k2] = await stream.takeMessages(1);
  t.equal(textOf(k2), 'k2', 'the stream goes on delivering');
});

t.test('an invalid request mid-stream ends it with INVALID_ARGUMENT, after the requests before it', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const cases: [string, (m: ReceivedMessage) => object][] = [
    ['a later clientId', () => ({ clientId: 'again' })],
    ['a malformed ack ID', () => ({ ackIds: ['not-an-ack-id'] })],
    ['a malformed ack ID to modify', () => ({ modifyDeadlineAckIds: ['not-an-ack-id'], modifyDeadlineSeconds: [10] })],
    ['more seconds than ack IDs', (m) => ({ modifyDeadlineAckIds: [m.ackId], modifyDeadlineSeconds: [10, 10] })],
    ['more ack IDs than seconds', (m) => ({ modifyDeadlineAckIds: [m.ackId, m.ackId], modifyDeadlineSeconds: [10] })],
    ['seconds without ack IDs', () => ({ modifyDeadlineSeconds: [10] })],
    ['modifyDeadlineSeconds -1', (m) => ({ modifyDeadlineAckIds: [m.ackId], modifyDeadlineSeconds: [-1] })],
    ['modifyDeadlineSeconds 601', (m) => ({ modifyDeadlineAckIds: [m.ackId], modifyDeadlineSeconds: [601] })],
  ];
  for (const [what, invalid] of cases) {
    const stream = await b.open('sub1');
    await b.publish('topic1', [{ data: 'before' }, { data: 'after' }]);
    const [x, y] = await stream.takeMessages(2);
    stream.write({ ackIds: [x.ackId] });
    stream.write(invalid(y));
    stream.write({ ackIds: [y.ackId] });
    const status = await stream.waitEnd();
    t.equal(status.code, grpcStatus.INVALID_ARGUMENT, `${what}: INVALID_ARGUMENT (${status.details})`);
    // Both nacked: only the one the earlier request acked stays away.
    await rpc(b.subscriber, 'ModifyAckDeadline', { subscription: subName('sub1'), ackIds: [x.ackId, y.ackId] });
    const reply = await rpc(b.subscriber, 'Pull', { subscription: subName('sub1'), maxMessages: 10 });
    const ids = (reply.receivedMessages ?? []).map((m: ReceivedMessage) => m.message.messageId);
    t.strictSame(ids, [y.message.messageId], `${what}: the ack before it applied, the one after it did not`);
    await rpc(b.subscriber, 'Acknowledge', {
      subscription: subName('sub1'),
      ackIds: reply.receivedMessages.map((m: ReceivedMessage) => m.ackId),
    });
  }
});

t.test('an ordering key sticks to the stream holding its messages', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('ordered', 'topic1', { enableMessageOrdering: true });
  const holder = await b.open('ordered', { maxOutstandingMessages: '1' });
  await b.publish('topic1', [{ data: 'k1-1', orderingKey: 'k1' }]);
  const [held] = await holder.takeMessages(1);
  const other = await b.open('ordered');
  for (const [data, orderingKey] of [
    ['k1-2', 'k1'],
    ['k2-1', 'k2'],
    ['k1-3', 'k1'],
    ['k2-2', 'k2'],
  ]) {
    await b.publish('topic1', [{ data, orderingKey }]);
  }
  const otherGot = await drain({ other }, 2);
  t.strictSame(otherGot, ['other:k2-1', 'other:k2-2'], 'the other stream gets the other key, in order');
  t.ok(await other.quiet(400), 'but nothing of k1 while the first stream holds k1-1');
  holder.write({ ackIds: [held.ackId] });
  const rest = (await drain({ holder, other }, 2)).map((got) => got.split(':')[1]);
  t.strictSame(rest, ['k1-2', 'k1-3'], 'once k1-1 is acked, the later k1 messages come, in order');
});

/**
 * The next `count` messages on any of the streams ("<name>:<text>", in the order they came),
 * each acked on its stream as it arrives.
 */
async function drain(streams: Record<string, PullStream>, count: number): Promise<string[]> {
  const got: string[] = [];
  await waitUntil(
    () => {
      for (const [name, stream] of Object.entries(streams)) {
        const messages = stream.takeAllPending();
        if (messages.length > 0) stream.write({ ackIds: ackIdsOf(messages) });
        got.push(...messages.map((m) => `${name}:${textOf(m)}`));
      }
      return got.length >= count;
    },
    3000,
    20,
  );
  return got;
}

t.test('app.close() ends open streams with UNAVAILABLE, never OK', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const idle = await b.open('sub1');
  const full = await b.open('sub1', { maxOutstandingMessages: '1' });
  await b.publish('topic1', [{ data: 'held' }]);
  await waitUntil(() => [idle, full].some((s) => s.untaken.some(hasMessages)), 3000, 20);
  const closed = await Promise.race([b.close().then(() => true), sleep(4000).then(() => false)]);
  t.ok(closed, 'app.close() completes with streams open');
  for (const [what, stream] of [
    ['an idle stream', idle],
    ['a stream holding a message', full],
  ] as const) {
    const status = await stream.waitEnd().catch(() => undefined);
    t.equal(status?.code, grpcStatus.UNAVAILABLE, `${what} ends with UNAVAILABLE (${status?.details})`);
  }
});

t.test('client half-close: the requests sent before it are applied, then the stream ends OK', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const stream = await b.open('sub1');
  await b.publish(
    'topic1',
    Array.from({ length: 20 }, (_, i) => ({ data: `h${i}` })),
  );
  const messages = await stream.takeMessages(20);
  for (const m of messages) stream.write({ ackIds: [m.ackId] });
  stream.halfClose();
  const status = await stream.waitEnd();
  t.equal(status.code, grpcStatus.OK, 'the stream ends OK once the client has half-closed');
  await waitUntil(() => b.sessions() === 0, 2000, 20);
  t.equal(b.sessions(), 0, 'the broker holds no session for it');
  // Stale ack IDs: a nack of all twenty changes nothing if the acks were applied.
  await rpc(b.subscriber, 'ModifyAckDeadline', { subscription: subName('sub1'), ackIds: ackIdsOf(messages) });
  const reply = await rpc(b.subscriber, 'Pull', { subscription: subName('sub1'), maxMessages: 100 });
  t.equal(reply.receivedMessages?.length ?? 0, 0, 'all twenty acks sent before the half-close were applied');
  await b.publish('topic1', [{ data: 'after-half-close' }]);
  const later = await rpc(b.subscriber, 'Pull', { subscription: subName('sub1'), maxMessages: 10 });
  t.equal(later.receivedMessages?.length, 1, 'a half-closed stream leases nothing more');
});

t.test('client cancel: its leases run out and the messages are delivered again', async (t) => {
  const clock = new ManualClock();
  const b = await startGrpcBroker(t, { clock });
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1', { ackDeadlineSeconds: 600 });
  const stream = await b.open('sub1', { streamAckDeadlineSeconds: 10 });
  await b.publish('topic1', [{ data: 'leased' }]);
  const [m] = await stream.takeMessages(1);
  stream.cancel();
  t.equal((await stream.waitEnd()).code, grpcStatus.CANCELLED, 'the client sees CANCELLED');
  await waitUntil(() => b.sessions() === 0, 2000, 20);
  t.equal(b.sessions(), 0, 'the broker let go of the session');
  const [fresh] = await b.publish('topic1', [{ data: 'after-cancel' }]);
  clock.advanceSeconds(9);
  const early = await b.open('sub1');
  const [got] = await early.takeMessages(1);
  t.equal(got.message.messageId, fresh, 'a message published after the cancel goes to an open stream');
  t.ok(await early.quiet(400), 'the cancelled stream still holds its lease 9 s into 10 s');
  early.cancel();
  await waitUntil(() => b.sessions() === 0, 2000, 20);
  clock.advanceSeconds(2);
  const late = await b.open('sub1');
  const [again] = await late.takeMessages(1);
  t.equal(again.message.messageId, m.message.messageId, 'after the 10 s stream lease, it is delivered again');
  t.not(again.ackId, m.ackId, 'as a new delivery');
});
