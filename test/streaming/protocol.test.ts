// Streaming pull over WebSocket (README.md, "Streaming pull over WebSocket"; the frames are the
// StreamingPullRequest and StreamingPullResponse messages of googleapis' google/pubsub/v1/pubsub.proto
// in their JSON field names), spoken with a raw `ws` client against a listening buildApp
// (streamHeartbeatMs 300 unless a test needs otherwise):
//   - first-frame rules and every way a frame is refused (error frame, then close 4000+gRPC code
//     with a JSON {"error":{...}} reason);
//   - the first server frame is subscriptionProperties; pushes need no client request, and the
//     session does not poll Redis while idle;
//   - flow control by messages and by bytes; exactly-once confirmations; non-exactly-once ack ID
//     rules; nacks; streamAckDeadlineSeconds as the lease (ManualClock, and one real-time run);
//   - heartbeats and keep-alives; subscription changes and deletion; shutdown (4014);
//   - unary acknowledge of stream deliveries; plain GET; onRequest authentication of the upgrade;
//   - a broken client does not disturb another stream of the same subscription;
//   - closing: frames sent before a graceful close are handled, and a stream whose client is
//     closing gets no new leases.
// Standalone Redis, except the push test which also runs against the cluster.
//
// ManualClock note: a stream sleeps on a real-time timer computed from the lease's remaining time
// (by the manual clock) when it last looked, so clock.advanceSeconds() alone does not make an
// open idle stream see an expired lease; a publish or a nack on the topic wakes it, and a stream
// opened after the advance looks at once. The tests rely on those, never on the timer.

import type { AddressInfo, Socket } from 'node:net';
import t, { type Test } from 'tap';
import { buildApp } from '../../src/app.ts';
import { ManualClock, type Clock } from '../../src/broker/clock.ts';
import type { Authentication } from '../../src/auth/authentication.ts';
import { ALICE_TOKEN, bearer, tokenAuthentication } from '../helpers/auth.ts';
import { b64, okApi, unb64 } from '../helpers/app.ts';
import { redisTargets, uniquePrefix, type RedisTarget } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';
import { ackIdsOf, hasMessages, isHeartbeat, sleep, StreamClient, takeFromAny, type ReceivedMessage } from './_ws.ts';

const P = 'sp-project';
const HEARTBEAT_MS = 300;

interface BrokerOptions {
  target?: RedisTarget;
  clock?: Clock;
  heartbeatMs?: number;
  authentication?: Authentication;
  /** Headers sent with every REST call and upgrade of this broker's helpers. */
  headers?: Record<string, string>;
}

async function openBroker(t: Test, options: BrokerOptions = {}) {
  const target = options.target ?? redisTargets()[0];
  const redis = target.connect();
  const app = await buildApp({
    redis,
    keyPrefix: uniquePrefix('stream'),
    clock: options.clock,
    pullWaitMs: 200,
    streamHeartbeatMs: options.heartbeatMs ?? HEARTBEAT_MS,
    authentication: options.authentication,
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as AddressInfo).port;
  const clients: StreamClient[] = [];
  const sockets = new Set<Socket>();
  app.server.on('connection', (socket: Socket) => sockets.add(socket));
  let closing: Promise<void> | undefined;
  const close = () => (closing ??= app.close());
  t.teardown(async () => {
    for (const client of clients) client.terminate();
    // Never let a close that hangs (a leaked socket) hang the whole file: destroy what is left.
    const closedInTime = await Promise.race([close().then(() => true), sleep(5000).then(() => false)]);
    if (!closedInTime) {
      for (const socket of sockets) socket.destroy();
      await close();
    }
    redis.disconnect();
  });
  const headers = options.headers ?? {};
  const api = async (method: string, url: string, body?: unknown, extraHeaders: Record<string, string> = headers) => {
    const response = await app.inject({
      method: method as 'GET',
      url,
      headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...extraHeaders },
      ...(body === undefined ? {} : { payload: JSON.stringify(body) }),
    });
    return { status: response.statusCode, body: response.body ? JSON.parse(response.body) : undefined };
  };
  const ok = okApi(api);
  const topic = async (id: string) => ok('PUT', `/v1/projects/${P}/topics/${id}`, {});
  const subscription = async (id: string, topicId: string, extra: Record<string, unknown> = {}) =>
    ok('PUT', `/v1/projects/${P}/subscriptions/${id}`, { topic: `projects/${P}/topics/${topicId}`, ...extra });
  const publish = async (
    topicId: string,
    messages: { data?: string; attributes?: Record<string, string>; orderingKey?: string }[],
  ) => (await ok('POST', `/v1/projects/${P}/topics/${topicId}:publish`, { messages })).messageIds as string[];
  const streamUrl = (sub: string) => `ws://127.0.0.1:${port}/v1/projects/${P}/subscriptions/${sub}:streamingPull`;
  /** Opens a stream; with `first`, sends it and waits for the subscriptionProperties frame. */
  const open = async (
    sub: string,
    first?: Record<string, unknown>,
    wsOptions: ConstructorParameters<typeof StreamClient>[1] = {},
  ) => {
    const client = new StreamClient(streamUrl(sub), { headers, ...wsOptions });
    clients.push(client);
    await client.opened;
    if (first) {
      client.send(first);
      await client.take((f) => f?.subscriptionProperties !== undefined, 3000, 'subscriptionProperties');
    }
    return client;
  };
  return { app, redis, port, api, ok, topic, subscription, publish, streamUrl, open, clients, close, sockets };
}

/** Waits until the server holds at most `count` WebSockets (a client's close has been processed). */
async function serverSockets(
  b: { app: { websocketServer: { clients: Set<unknown> } } },
  count: number,
  timeoutMs = 2000,
) {
  const giveUpAt = Date.now() + timeoutMs;
  while (b.app.websocketServer.clients.size > count && Date.now() < giveUpAt) await sleep(5);
  return b.app.websocketServer.clients.size;
}

const fullSub = (id: string) => `projects/${P}/subscriptions/${id}`;
const first = (id: string, extra: Record<string, unknown> = {}) => ({
  subscription: fullSub(id),
  streamAckDeadlineSeconds: 60,
  ...extra,
});
const bytesOf = (n: number, tag: string) => b64(tag.padEnd(n, '.'));

/** The stream must send one error frame and then close with `closeCode` and the same error as reason. */
async function expectRefusal(
  t: Test,
  client: StreamClient,
  status: string,
  httpCode: number,
  closeCode: number,
  what: string,
) {
  const close = await client.waitClose(3000).catch((error) => {
    t.fail(`${what}: ${error.message}`);
    return undefined;
  });
  if (!close) return;
  t.equal(close.code, closeCode, `${what}: close code ${closeCode}`);
  let reason: any;
  try {
    reason = JSON.parse(close.reason);
  } catch {
    reason = close.reason;
  }
  t.match(reason, { error: { code: httpCode, status, message: String } }, `${what}: close reason is the JSON error`);
  t.same(
    Object.keys(reason?.error ?? {}).sort(),
    ['code', 'message', 'status'],
    `${what}: close reason has exactly code/message/status`,
  );
  const errors = client.frames.filter((f) => f?.error !== undefined);
  t.equal(errors.length, 1, `${what}: exactly one error frame`);
  t.match(errors[0], { error: { code: httpCode, status, message: String } }, `${what}: error frame before the close`);
  t.equal(client.frames.at(-1), errors[0], `${what}: the error frame is the last frame`);
}

t.test('first-frame rules and refused frames', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');

  const refusedFirst = async (what: string, frame: object | string | Buffer, binary = false) => {
    const client = await b.open('sub1');
    client.send(frame, binary);
    await expectRefusal(t, client, 'INVALID_ARGUMENT', 400, 4003, what);
    t.notOk(
      client.frames.some((f) => f?.subscriptionProperties),
      `${what}: no subscriptionProperties`,
    );
  };
  await refusedFirst('missing streamAckDeadlineSeconds', { subscription: fullSub('sub1') });
  await refusedFirst('streamAckDeadlineSeconds 9', first('sub1', { streamAckDeadlineSeconds: 9 }));
  await refusedFirst('streamAckDeadlineSeconds 601', first('sub1', { streamAckDeadlineSeconds: 601 }));
  await refusedFirst('streamAckDeadlineSeconds not an integer', first('sub1', { streamAckDeadlineSeconds: 10.5 }));
  await refusedFirst('subscription mismatching the path', first('sub1', { subscription: fullSub('sub2') }));
  await refusedFirst(
    'subscription of another project',
    first('sub1', { subscription: `projects/other/subscriptions/sub1` }),
  );
  await refusedFirst('unknown field', first('sub1', { maxMessages: 10 }));
  await refusedFirst('malformed JSON', '{"streamAckDeadlineSeconds": 10');
  await refusedFirst('a JSON array', '[]');
  await refusedFirst('JSON null', 'null');
  await refusedFirst('binary frame', Buffer.from(JSON.stringify(first('sub1'))), true);
  await refusedFirst(
    'frame over 1 MiB',
    JSON.stringify({ ...first('sub1'), clientId: 'x', ackIds: ['a'.repeat(1024 * 1024)] }),
  );

  // Between 1 MiB and the 2 MiB WebSocket limit the stream answers; beyond, the ws layer closes with 1009.
  {
    const client = await b.open('sub1');
    client.send('x'.repeat(2 * 1024 * 1024 + 10));
    const close = await client.waitClose();
    t.equal(close.code, 1009, 'a frame over 2 MiB is refused by the WebSocket layer (1009)');
  }

  // Accepted first frames: both bounds, no subscription field (the path names it), int64 strings.
  for (const [what, frame] of [
    ['streamAckDeadlineSeconds 10', first('sub1', { streamAckDeadlineSeconds: 10 })],
    ['streamAckDeadlineSeconds 600', first('sub1', { streamAckDeadlineSeconds: 600 })],
    ['no subscription field', { streamAckDeadlineSeconds: 30 }],
    [
      'every first-frame field',
      first('sub1', { clientId: 'c-1', maxOutstandingMessages: '5', maxOutstandingBytes: 1000, protocolVersion: 1 }),
    ],
  ] as const) {
    const client = await b.open('sub1');
    client.send(frame);
    const reply = await client.take(() => true, 3000).catch((error) => error.message);
    t.strictSame(
      reply,
      { subscriptionProperties: { exactlyOnceDeliveryEnabled: false, messageOrderingEnabled: false } },
      `${what}: accepted`,
    );
    t.ok(client.isOpen, `${what}: stream open`);
    client.terminate();
  }

  const refusedLater = async (what: string, frame: object) => {
    const client = await b.open('sub1', first('sub1'));
    client.send(frame);
    await expectRefusal(t, client, 'INVALID_ARGUMENT', 400, 4003, what);
  };
  await refusedLater('subscription in a later frame', { subscription: fullSub('sub1') });
  await refusedLater('clientId in a later frame', { clientId: 'again' });
  await refusedLater('maxOutstandingMessages in a later frame', { maxOutstandingMessages: 3 });
  await refusedLater('maxOutstandingBytes in a later frame', { maxOutstandingBytes: 3 });
  await refusedLater('protocolVersion in a later frame', { protocolVersion: 1 });
  await refusedLater('unknown field in a later frame', { foo: 1 });
  await refusedLater('streamAckDeadlineSeconds 5 in a later frame', { streamAckDeadlineSeconds: 5 });

  {
    const client = await b.open('sub1', first('sub1'));
    client.send({ streamAckDeadlineSeconds: 20 });
    client.send({});
    t.ok(
      await client.take(isHeartbeat, 1000, 'keep-alive answer').then(
        () => true,
        () => false,
      ),
      'a later streamAckDeadlineSeconds is accepted',
    );
    t.ok(client.isOpen, 'stream still open after changing streamAckDeadlineSeconds');
  }

  // Unknown subscription: NOT_FOUND, close 4005.
  {
    const client = await b.open('nope');
    client.send(first('nope'));
    await expectRefusal(t, client, 'NOT_FOUND', 404, 4005, 'unknown subscription');
  }
  // Invalid subscription names in the path: refused at once, before any client frame.
  for (const id of ['ab', 'goog-sub', '1abc']) {
    const client = new StreamClient(b.streamUrl(id));
    b.clients.push(client);
    await client.opened.catch(() => {});
    await expectRefusal(t, client, 'INVALID_ARGUMENT', 400, 4003, `invalid subscription name "${id}" in the path`);
  }
});

t.test('the first server frame is subscriptionProperties with the subscription flags', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  const cases = [
    ['plain', {}, false, false],
    ['eod', { enableExactlyOnceDelivery: true }, true, false],
    ['ordered', { enableMessageOrdering: true }, false, true],
    ['both', { enableExactlyOnceDelivery: true, enableMessageOrdering: true }, true, true],
  ] as const;
  for (const [id, extra, eod, ordered] of cases) {
    await b.subscription(`props-${id}`, 'topic1', extra);
    const client = await b.open(`props-${id}`);
    client.send(first(`props-${id}`));
    const frame = await client.take();
    t.strictSame(
      frame,
      { subscriptionProperties: { exactlyOnceDeliveryEnabled: eod, messageOrderingEnabled: ordered } },
      `${id}: first frame`,
    );
  }
});

for (const target of redisTargets()) {
  t.test(`messages are pushed without client requests and without polling (${target.name})`, async (t) => {
    const b = await openBroker(t, { target });
    await b.topic('topic1');
    await b.subscription('sub1', 'topic1');
    let pulls = 0;
    const delivery = b.app.broker.delivery;
    const pullOnce = delivery.pullOnce.bind(delivery);
    delivery.pullOnce = (...args: Parameters<typeof pullOnce>) => {
      pulls++;
      return pullOnce(...args);
    };
    const client = await b.open('sub1', first('sub1'));
    await sleep(300);
    const idleStart = pulls;
    await sleep(1500);
    t.equal(pulls - idleStart, 0, 'an idle stream runs no pull for 1.5 s (no polling)');

    const latencies: number[] = [];
    for (let i = 0; i < 5; i++) {
      const started = Date.now();
      await b.publish('topic1', [{ data: b64(`push-${i}`) }]);
      const [message] = await client.takeMessages(1, 2000);
      latencies.push(Date.now() - started);
      t.equal(unb64(message.message.data), `push-${i}`, `message ${i} pushed`);
      client.send({ ackIds: [message.ackId] });
    }
    t.comment(`publish-to-push latencies (ms, publish round trip included): ${latencies.join(', ')}`);
    t.ok(Math.max(...latencies) < 1000, 'each message arrived within 1 s of its publish');
    const sent = client.frames.length;
    await sleep(200);
    const afterPushes = pulls;
    await sleep(1000);
    t.equal(pulls - afterPushes, 0, 'no pulls while idle after deliveries (leases of 60 s pending)');
    t.ok(client.frames.slice(sent).every(isHeartbeat), 'only heartbeats while idle');
  });
}

t.test('flow control: maxOutstandingMessages', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const client = await b.open('sub1', first('sub1', { maxOutstandingMessages: 2 }));
  await b.publish(
    'topic1',
    [1, 2, 3, 4, 5, 6].map((i) => ({ data: b64(`m${i}`) })),
  );
  const firstTwo = await client.takeMessages(2);
  t.equal(firstTwo.length, 2, 'two messages delivered');
  t.ok(await client.quiet(700), 'nothing more while 2 are outstanding');
  client.send({ ackIds: [firstTwo[0].ackId] });
  const third = await client.takeMessages(1);
  t.equal(third.length, 1, 'one more after one ack');
  t.ok(await client.quiet(500), 'then nothing more');
  // A nack frees room too (the nacked message may come straight back).
  client.send({ modifyDeadlineAckIds: [firstTwo[1].ackId], modifyDeadlineSeconds: [0] });
  const afterNack = await client.takeMessages(1);
  t.equal(afterNack.length, 1, 'one more after one nack');
  t.ok(await client.quiet(500), 'then nothing more');
  // Extending a deadline frees nothing.
  client.send({ modifyDeadlineAckIds: [third[0].ackId], modifyDeadlineSeconds: [120] });
  t.ok(await client.quiet(500), 'a deadline extension frees no room');
  // Ack everything as it comes: all six arrive, at most two outstanding at any time.
  const seen = new Set([...firstTwo, ...third, ...afterNack].map((m) => unb64(m.message.data)));
  let held = [third[0], afterNack[0]];
  let maxHeld = held.length;
  while (seen.size < 6) {
    client.send({ ackIds: ackIdsOf(held) });
    held = await client.takeMessages(1);
    await sleep(150);
    while (client.untaken.some(hasMessages)) held.push(...(await client.take(hasMessages)).receivedMessages);
    for (const m of held) seen.add(unb64(m.message.data));
    maxHeld = Math.max(maxHeld, held.length);
  }
  t.equal(seen.size, 6, 'all six messages delivered');
  t.ok(maxHeld <= 2, `never more than 2 outstanding (max ${maxHeld})`);

  // maxOutstandingMessages <= 0 means no limit.
  await b.subscription('sub2', 'topic1');
  const unlimited = await b.open('sub2', first('sub2', { maxOutstandingMessages: 0 }));
  await b.publish(
    'topic1',
    Array.from({ length: 20 }, (_, i) => ({ data: b64(`u${i}`) })),
  );
  t.equal((await unlimited.takeMessages(20)).length, 20, 'maxOutstandingMessages 0: all 20 delivered');
});

t.test('flow control: maxOutstandingBytes', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  // 99-byte messages (base64 without padding), limit 250: the third one reaches the limit.
  const client = await b.open('sub1', first('sub1', { maxOutstandingBytes: 250 }));
  const got: ReceivedMessage[] = [];
  for (let i = 1; i <= 3; i++) {
    await b.publish('topic1', [{ data: bytesOf(99, `m${i}`) }]);
    got.push(...(await client.takeMessages(1)));
  }
  t.equal(got.length, 3, '297 bytes outstanding after three messages');
  await b.publish('topic1', [{ data: bytesOf(99, 'm4') }]);
  t.ok(await client.quiet(700), 'at >= 250 outstanding bytes nothing more is sent');
  client.send({ ackIds: [got[0].ackId] });
  const fourth = await client.takeMessages(1);
  t.equal(unb64(fourth[0].message.data).slice(0, 2), 'm4', 'after an ack (198 bytes) the next message comes');
  await b.publish('topic1', [{ data: bytesOf(99, 'm5') }]);
  t.ok(await client.quiet(500), 'and again the limit holds');

  // A burst published in one request: the server must still stop at the limit (at most one
  // message past it), not hand out a whole pull batch.
  await b.subscription('sub2', 'topic1');
  const burst = await b.open('sub2', first('sub2', { maxOutstandingBytes: 250 }));
  await b.publish(
    'topic1',
    Array.from({ length: 10 }, (_, i) => ({ data: bytesOf(99, `b${i}`) })),
  );
  await burst.takeMessages(1);
  await sleep(500);
  const delivered = burst.frames.filter(hasMessages).flatMap((f) => f.receivedMessages).length;
  t.ok(
    delivered <= 3,
    `a burst of ten 99-byte messages with maxOutstandingBytes 250 delivers at most 3 before an ack (delivered ${delivered})`,
  );
});

t.test('exactly-once: acknowledgeConfirmation and modifyAckDeadlineConfirmation', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('eod', 'topic1', { enableExactlyOnceDelivery: true });
  await b.subscription('other', 'topic1', { enableExactlyOnceDelivery: true });
  const client = await b.open('eod', first('eod'));
  const other = await b.open('other', first('other'));
  await b.publish(
    'topic1',
    ['m1', 'm2', 'm3', 'm4'].map((s) => ({ data: b64(s) })),
  );
  const messages = await client.takeMessages(4);
  const [a1, a2, a3, a4] = messages.map((m) => m.ackId);
  const byText = Object.fromEntries(messages.map((m) => [unb64(m.message.data), m]));
  t.same(Object.keys(byText).sort(), ['m1', 'm2', 'm3', 'm4'], 'four messages delivered');
  const foreign = (await other.takeMessages(4))[0].ackId;

  const ackConfirmation = () =>
    client.take((f) => f?.acknowledgeConfirmation !== undefined, 3000, 'acknowledgeConfirmation');
  const modConfirmation = () =>
    client.take((f) => f?.modifyAckDeadlineConfirmation !== undefined, 3000, 'modifyAckDeadlineConfirmation');

  client.send({ ackIds: [a1, 'bogus-ack-id', foreign] });
  t.strictSame(
    await ackConfirmation(),
    {
      acknowledgeConfirmation: {
        ackIds: [a1],
        invalidAckIds: ['bogus-ack-id', foreign],
        unorderedAckIds: [],
        temporaryFailedAckIds: [],
      },
    },
    'valid ack confirmed; bogus and other-subscription IDs invalid',
  );

  client.send({ ackIds: [a1] });
  t.strictSame(
    await ackConfirmation(),
    {
      acknowledgeConfirmation: { ackIds: [], invalidAckIds: [a1], unorderedAckIds: [], temporaryFailedAckIds: [] },
    },
    'a second ack of the same ID is invalid',
  );

  client.send({ modifyDeadlineAckIds: [a2, 'bogus-ack-id', a1], modifyDeadlineSeconds: [30, 30, 30] });
  t.strictSame(
    await modConfirmation(),
    {
      modifyAckDeadlineConfirmation: { ackIds: [a2], invalidAckIds: ['bogus-ack-id', a1], temporaryFailedAckIds: [] },
    },
    'extension confirmed; bogus and acked IDs invalid',
  );

  client.send({ modifyDeadlineAckIds: [a3], modifyDeadlineSeconds: [0] });
  t.strictSame(
    await modConfirmation(),
    {
      modifyAckDeadlineConfirmation: { ackIds: [a3], invalidAckIds: [], temporaryFailedAckIds: [] },
    },
    'nack confirmed',
  );
  const [again] = await client.takeMessages(1);
  t.equal(again.message.messageId, byText.m3.message.messageId, 'the nacked message is delivered again');
  t.not(again.ackId, a3, 'with a new ack ID');

  client.send({ ackIds: [a3, again.ackId] });
  t.strictSame(
    await ackConfirmation(),
    {
      acknowledgeConfirmation: {
        ackIds: [again.ackId],
        invalidAckIds: [a3],
        unorderedAckIds: [],
        temporaryFailedAckIds: [],
      },
    },
    'stale ack ID (before the nack) invalid; the current one confirmed',
  );

  client.send({ modifyDeadlineAckIds: [a3], modifyDeadlineSeconds: [0] });
  t.strictSame(
    await modConfirmation(),
    {
      modifyAckDeadlineConfirmation: { ackIds: [], invalidAckIds: [a3], temporaryFailedAckIds: [] },
    },
    'nack of a stale ID invalid',
  );

  // One frame with an ack and a mixed modify (extension + nack): one confirmation of each kind.
  client.send({ ackIds: [a2], modifyDeadlineAckIds: [a4, a2], modifyDeadlineSeconds: [45, 0] });
  t.strictSame(
    await ackConfirmation(),
    {
      acknowledgeConfirmation: { ackIds: [a2], invalidAckIds: [], unorderedAckIds: [], temporaryFailedAckIds: [] },
    },
    'ack in a combined frame',
  );
  t.strictSame(
    await modConfirmation(),
    {
      modifyAckDeadlineConfirmation: { ackIds: [a4], invalidAckIds: [a2], temporaryFailedAckIds: [] },
    },
    'modify in a combined frame: acks are applied first, so the nack of the acked ID is invalid',
  );

  client.send({ ackIds: [a4] });
  t.strictSame((await ackConfirmation()).acknowledgeConfirmation.ackIds, [a4], 'the extended message is acked');
  t.ok(await client.quiet(500), 'nothing is delivered again');
  t.ok(client.isOpen, 'invalid ack IDs never end an exactly-once stream');
});

t.test('not exactly-once: ack ID rules on the stream', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const client = await b.open('sub1', first('sub1'));
  await b.publish('topic1', [{ data: b64('m1') }, { data: b64('m2') }]);
  const [m1, m2] = await client.takeMessages(2);

  client.send({ ackIds: [m1.ackId] });
  client.send({ ackIds: [m1.ackId] }); // double ack: stale, well-formed
  client.send({ modifyDeadlineAckIds: [m2.ackId], modifyDeadlineSeconds: [0] });
  const [m2again] = await client.takeMessages(1);
  t.equal(m2again.message.messageId, m2.message.messageId, 'nack redelivers');
  client.send({ ackIds: [m2.ackId] }); // stale after the nack: must not ack the new delivery
  client.send({ modifyDeadlineAckIds: [m2.ackId, m1.ackId], modifyDeadlineSeconds: [20, 0] });
  await client.roundTrip(1000);
  t.ok(client.isOpen, 'stale well-formed ack IDs are ignored');
  t.notOk(
    client.frames.some((f) => f?.acknowledgeConfirmation || f?.modifyAckDeadlineConfirmation),
    'no confirmations without exactly-once',
  );
  // The stale ack did not end the current delivery: nacking it brings the message back once more.
  client.send({ modifyDeadlineAckIds: [m2again.ackId], modifyDeadlineSeconds: [0] });
  const [third] = await client.takeMessages(1);
  t.equal(third.message.messageId, m2.message.messageId, 'the current delivery was still outstanding');
  client.send({ ackIds: [third.ackId] });
  t.ok(await client.quiet(500), 'acked: not delivered again');

  const refused = async (what: string, frame: object) => {
    const s = await b.open('sub1', first('sub1'));
    s.send(frame);
    await expectRefusal(t, s, 'INVALID_ARGUMENT', 400, 4003, what);
  };
  await refused('malformed ack ID in ackIds', { ackIds: ['not-an-ack-id'] });
  await refused('malformed ack ID in modifyDeadlineAckIds', {
    modifyDeadlineAckIds: ['not-an-ack-id'],
    modifyDeadlineSeconds: [10],
  });
  await refused('length mismatch (more seconds)', {
    modifyDeadlineAckIds: [third.ackId],
    modifyDeadlineSeconds: [10, 10],
  });
  await refused('length mismatch (more ack IDs)', {
    modifyDeadlineAckIds: [third.ackId, m1.ackId],
    modifyDeadlineSeconds: [10],
  });
  await refused('seconds without ack IDs', { modifyDeadlineSeconds: [10] });
  await refused('negative modifyDeadlineSeconds', { modifyDeadlineAckIds: [third.ackId], modifyDeadlineSeconds: [-1] });
  await refused('modifyDeadlineSeconds 601', { modifyDeadlineAckIds: [third.ackId], modifyDeadlineSeconds: [601] });
  // Exactly-once: a length mismatch is refused the same way.
  await b.subscription('eod', 'topic1', { enableExactlyOnceDelivery: true });
  const e = await b.open('eod', first('eod'));
  e.send({ modifyDeadlineAckIds: ['x'], modifyDeadlineSeconds: [] });
  await expectRefusal(t, e, 'INVALID_ARGUMENT', 400, 4003, 'exactly-once length mismatch');
});

t.test('frames nested deeper than 100 levels of JSON are refused and change nothing', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const arrays = (levels: number) => `${'['.repeat(levels)}${']'.repeat(levels)}`;
  const objects = (levels: number) => `${'{"a":'.repeat(levels)}1${'}'.repeat(levels)}`;
  const refusedTooDeep = async (client: StreamClient, what: string) => {
    await expectRefusal(t, client, 'INVALID_ARGUMENT', 400, 4003, what);
    t.equal(
      client.frames.at(-1)?.error?.message,
      'Invalid JSON payload received. The JSON nesting exceeds 100 levels.',
      `${what}: the error frame says why`,
    );
  };

  const opening = await b.open('sub1');
  opening.send(`{"streamAckDeadlineSeconds":60,"x":${arrays(5000)}}`);
  await refusedTooDeep(opening, 'a first frame holding 5,000 nested arrays');
  t.notOk(
    opening.frames.some((f) => f?.subscriptionProperties),
    'the stream never started',
  );

  const client = await b.open('sub1', first('sub1'));
  await b.publish('topic1', [{ data: b64('deep') }]);
  const [leased] = await client.takeMessages(1);
  client.send(`{"ackIds":["${leased.ackId}"],"x":${objects(5000)}}`);
  await refusedTooDeep(client, 'a later frame acking, with 5,000 nested objects');
  // Not acked: once nacked, it is delivered again. (A pull the closed stream still had in flight
  // may lease it for a moment, and hands it back at once: hence a few tries.)
  const nack = await b.api('POST', `/v1/projects/${P}/subscriptions/sub1:modifyAckDeadline`, {
    ackIds: [leased.ackId],
    ackDeadlineSeconds: 0,
  });
  t.equal(nack.status, 200, 'nack');
  let pulledId: string | undefined;
  await waitUntil(
    async () => {
      const pulled = await b.api('POST', `/v1/projects/${P}/subscriptions/sub1:pull`, {
        maxMessages: 10,
        returnImmediately: true,
      });
      pulledId = pulled.body.receivedMessages?.[0]?.message.messageId;
      return pulledId !== undefined;
    },
    3000,
    20,
  );
  t.equal(pulledId, leased.message.messageId, 'the refused frame acknowledged nothing');
});

t.test('nacks on the stream redeliver, to this or another stream', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const a = await b.open('sub1', first('sub1'));
  const c = await b.open('sub1', first('sub1'));
  await b.publish('topic1', [{ data: b64('n1') }]);
  const holder = await takeFromAny([a, c]);
  const [m] = holder.messages;
  holder.client.send({ modifyDeadlineAckIds: [m.ackId], modifyDeadlineSeconds: [0] });
  const again = (await takeFromAny([a, c])).messages;
  t.equal(again[0].message.messageId, m.message.messageId, 'the nacked message came again');
  t.not(again[0].ackId, m.ackId, 'as a new delivery');

  // To another stream: the holder leaves; a nack of its ack ID sent on another stream frees it.
  const leaver = await b.open('sub1', first('sub1'));
  a.terminate();
  c.terminate();
  await serverSockets(b, 1);
  await b.publish('topic1', [{ data: b64('n2') }]);
  const [n2] = await leaver.takeMessages(1);
  leaver.terminate();
  const stayer = await b.open('sub1', first('sub1'));
  t.ok(await stayer.quiet(500), 'the leaver still holds the lease');
  stayer.send({ modifyDeadlineAckIds: [n2.ackId], modifyDeadlineSeconds: [0] });
  const [back] = await stayer.takeMessages(1);
  t.equal(back.message.messageId, n2.message.messageId, 'a nack sent on another stream redelivers there');
  // And a unary nack (modifyAckDeadline 0) of a stream delivery wakes the stream too.
  const reply = await b.api('POST', `/v1/projects/${P}/subscriptions/sub1:modifyAckDeadline`, {
    ackIds: [back.ackId],
    ackDeadlineSeconds: 0,
  });
  t.equal(reply.status, 200, 'unary nack answers 200');
  const [back2] = await stayer.takeMessages(1);
  t.equal(back2.message.messageId, n2.message.messageId, 'a unary nack redelivers on the stream');
});

t.test('streamAckDeadlineSeconds is the lease of stream deliveries (ManualClock)', async (t) => {
  const clock = new ManualClock();
  const b = await openBroker(t, { clock });
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1', { ackDeadlineSeconds: 600 });

  // Leased for 10 s by the stream (the subscription says 600): expired after 11 s.
  const a = await b.open('sub1', first('sub1', { streamAckDeadlineSeconds: 10 }));
  await b.publish('topic1', [{ data: b64('lease-10') }]);
  const [m] = await a.takeMessages(1);
  a.terminate();
  await serverSockets(b, 0);
  clock.advanceSeconds(9);
  const early = await b.open('sub1', first('sub1'));
  t.ok(await early.quiet(600), 'not delivered again 9 s into a 10 s stream lease');
  early.terminate();
  await serverSockets(b, 0);
  clock.advanceSeconds(2);
  const late = await b.open('sub1', first('sub1'));
  const [again] = await late.takeMessages(1, 2000);
  t.equal(
    again.message.messageId,
    m.message.messageId,
    'delivered again to another stream after 11 s (the stream deadline, not the 600 s of the subscription)',
  );
  late.send({ ackIds: [again.ackId] });
  await late.roundTrip();
  late.terminate();
  await serverSockets(b, 0);

  // A later frame changes the deadline of what is delivered afterwards.
  const c = await b.open('sub1', first('sub1', { streamAckDeadlineSeconds: 10 }));
  c.send({ streamAckDeadlineSeconds: 30 });
  await c.roundTrip(1000);
  await b.publish('topic1', [{ data: b64('lease-30') }]);
  const [m30] = await c.takeMessages(1);
  c.terminate();
  await serverSockets(b, 0);
  clock.advanceSeconds(11);
  const d = await b.open('sub1', first('sub1'));
  t.ok(await d.quiet(600), 'not delivered again after 11 s of a 30 s lease');
  d.terminate();
  await serverSockets(b, 0);
  clock.advanceSeconds(20);
  const e = await b.open('sub1', first('sub1'));
  const [m30again] = await e.takeMessages(1, 2000);
  t.equal(m30again.message.messageId, m30.message.messageId, 'delivered again after 31 s');
  e.send({ ackIds: [m30again.ackId] });
  await e.roundTrip();

  // An already open, idle stream: expiry by the manual clock alone does not wake it (its timer
  // runs in real time, for the lease's remaining time when it last looked); a publish does.
  e.terminate();
  await serverSockets(b, 0);
  const f = await b.open('sub1', first('sub1', { streamAckDeadlineSeconds: 10 }));
  await b.publish('topic1', [{ data: b64('idle-wake') }]);
  const [w] = await f.takeMessages(1);
  f.terminate();
  await serverSockets(b, 0);
  const idle = await b.open('sub1', first('sub1'));
  await sleep(200); // it has looked, found nothing, and sleeps until the lease's due time (10 s)
  clock.advanceSeconds(11);
  const deliveredWithoutWake = !(await idle.quiet(1500));
  t.comment(`expired lease delivered to an idle open stream without a wake-up within 1.5 s: ${deliveredWithoutWake}`);
  await b.publish('topic1', [{ data: b64('nudge') }]);
  const ids = new Set<string>();
  const giveUpAt = Date.now() + 3000;
  while (ids.size < 2 && Date.now() < giveUpAt) {
    const got = await idle.takeMessages(1, Math.max(1, giveUpAt - Date.now())).catch(() => []);
    for (const x of got) ids.add(x.message.messageId);
  }
  t.ok(ids.has(w.message.messageId), 'once a publish wakes the stream, the expired message is delivered to it');
});

t.test('lease expiry wakes an idle stream in real time (streamAckDeadlineSeconds 10)', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1', { ackDeadlineSeconds: 600 });
  // The waiter holds one message (room 0), so the next one can only go to the holder.
  const waiter = await b.open('sub1', first('sub1', { streamAckDeadlineSeconds: 60, maxOutstandingMessages: 1 }));
  await b.publish('topic1', [{ data: b64('for-waiter') }]);
  const [w] = await waiter.takeMessages(1);
  const holder = await b.open('sub1', first('sub1', { streamAckDeadlineSeconds: 10 }));
  await b.publish('topic1', [{ data: b64('for-holder') }]);
  const [held] = await holder.takeMessages(1);
  waiter.send({ ackIds: [w.ackId] });
  const leasedAt = Date.now();
  holder.terminate();
  const [again] = await waiter.takeMessages(1, 13_000);
  const afterMs = Date.now() - leasedAt;
  t.equal(again.message.messageId, held.message.messageId, 'delivered again to the idle stream');
  t.ok(afterMs >= 9_000 && afterMs <= 12_000, `after the 10 s lease ran out, with no publish or nack (${afterMs} ms)`);
});

t.test('heartbeats and keep-alives', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const client = await b.open('sub1', first('sub1'));
  const started = Date.now();
  await client.take(isHeartbeat, 2 * HEARTBEAT_MS, 'a heartbeat within 2x streamHeartbeatMs');
  t.pass(`heartbeat after ${Date.now() - started} ms`);
  const before = client.frames.length;
  await sleep(1500);
  const beats = client.frames.slice(before).filter(isHeartbeat).length;
  t.ok(beats >= 3 && beats <= 7, `about one heartbeat per ${HEARTBEAT_MS} ms over 1.5 s (${beats})`);
  t.ok(client.frames.slice(before).every(isHeartbeat), 'idle: nothing but heartbeats');

  // Keep-alives: with a long heartbeat, any {} is the answer to the client's {}.
  const quiet = await openBroker(t, { heartbeatMs: 60_000 });
  await quiet.topic('topic1');
  await quiet.subscription('sub1', 'topic1');
  const k = await quiet.open('sub1', first('sub1'));
  t.ok(await k.quiet(500, isHeartbeat), 'no heartbeat within 0.5 s at 60 s');
  for (let i = 0; i < 3; i++) {
    const sentAt = Date.now();
    k.send({});
    await k.take(isHeartbeat, 1000, 'keep-alive answer');
    t.ok(Date.now() - sentAt < 500, `keep-alive ${i} answered with {} (${Date.now() - sentAt} ms)`);
  }
  t.ok(k.isOpen, 'stream still open');
});

t.test('subscription changes reach open streams', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const client = await b.open('sub1', first('sub1'));
  await sleep(2 * HEARTBEAT_MS);
  const patch = (on: boolean) =>
    b.ok('PATCH', `/v1/projects/${P}/subscriptions/sub1`, {
      subscription: { enableExactlyOnceDelivery: on },
      updateMask: 'enableExactlyOnceDelivery',
    });

  const seen = client.frames.length;
  await patch(true);
  // The next frame carries the new properties; one heartbeat that was already on its way as the
  // PATCH landed is tolerated.
  const props = await client
    .take(
      (f) => f?.subscriptionProperties !== undefined,
      2 * HEARTBEAT_MS + 200,
      'subscriptionProperties after the PATCH',
    )
    .catch(() => undefined);
  const before = props ? client.frames.slice(seen, client.frames.indexOf(props)) : client.frames.slice(seen);
  t.strictSame(
    props,
    { subscriptionProperties: { exactlyOnceDeliveryEnabled: true, messageOrderingEnabled: false } },
    'an idle stream gets the new subscriptionProperties right after exactly-once is enabled (no publish needed)',
  );
  t.ok(
    props && before.length <= 1 && before.every(isHeartbeat),
    `and it is the next server frame (at most one heartbeat in flight before it; frames before it: ${JSON.stringify(before)})`,
  );

  // Once a publish wakes the stream the new properties arrive before (or with) the message.
  await b.publish('topic1', [{ data: b64('after-patch') }]);
  const [m] = await client.takeMessages(1);
  const messageFrame = client.frames.findIndex((f) => hasMessages(f));
  const propsFrames = client.frames
    .slice(0, messageFrame + 1)
    .filter((f) => f?.subscriptionProperties?.exactlyOnceDeliveryEnabled === true);
  t.ok(propsFrames.length >= 1, 'exactly-once properties sent no later than the next message');
  client.send({ ackIds: [m.ackId] });
  const confirmation = await client
    .take((f) => f?.acknowledgeConfirmation, 2000, 'acknowledgeConfirmation')
    .catch(() => undefined);
  t.strictSame(
    confirmation?.acknowledgeConfirmation?.ackIds,
    [m.ackId],
    'acks on the stream are confirmed once exactly-once is on',
  );

  const seen2 = client.frames.length;
  await patch(false);
  await b.publish('topic1', [{ data: b64('after-patch-2') }]);
  await client.takeMessages(1);
  t.ok(
    client.frames.slice(seen2).some((f) => f?.subscriptionProperties?.exactlyOnceDeliveryEnabled === false),
    'disabling exactly-once is announced too',
  );
});

t.test('deleting the subscription ends its streams with NOT_FOUND (4005)', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  await b.subscription('sub2', 'topic1');
  // Keeps the topic attached to a subscription, so that publishes still wake the topic's waiters.
  await b.subscription('keeper', 'topic1');
  const idle = await b.open('sub1', first('sub1'));
  await sleep(200);
  await b.ok('DELETE', `/v1/projects/${P}/subscriptions/sub1`);
  const close = await idle.waitClose(2000).catch(() => undefined);
  t.ok(close, 'an idle stream is closed within 2 s of the deletion, with no publish');
  if (close) await expectRefusal(t, idle, 'NOT_FOUND', 404, 4005, 'idle stream of a deleted subscription');

  // With traffic on the topic (a publish wakes the stream), the close must follow.
  const busy = await b.open('sub2', first('sub2'));
  await b.ok('DELETE', `/v1/projects/${P}/subscriptions/sub2`);
  await b.publish('topic1', [{ data: b64('wake') }]);
  await expectRefusal(t, busy, 'NOT_FOUND', 404, 4005, 'stream woken by a publish after the deletion');
  if (!close) await expectRefusal(t, idle, 'NOT_FOUND', 404, 4005, 'idle stream, after a publish woke it');

  // The last subscription of a topic: after its deletion publishes wake nobody (nothing attached).
  const last = await b.open('keeper', first('keeper'));
  for (const m of await last.takeMessages(1)) last.send({ ackIds: [m.ackId] }); // 'wake', held by the keeper
  await last.roundTrip();
  await sleep(300);
  await b.ok('DELETE', `/v1/projects/${P}/subscriptions/keeper`);
  await b.publish('topic1', [{ data: b64('wake-nobody') }]);
  const lastClose = await last.waitClose(2000).catch(() => undefined);
  t.ok(lastClose, 'the stream of the last subscription of a topic is closed too (within 2 s)');
  if (lastClose) await expectRefusal(t, last, 'NOT_FOUND', 404, 4005, 'stream of the deleted last subscription');
  else
    t.ok(last.frames.slice(-3).every(isHeartbeat), 'it is still open, sending heartbeats for a deleted subscription');
});

t.test('app.close() ends open streams with UNAVAILABLE (4014)', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const s1 = await b.open('sub1', first('sub1'));
  const s2 = await b.open('sub1', first('sub1', { maxOutstandingMessages: 1 }));
  const started = Date.now();
  await b.close();
  t.ok(Date.now() - started < 2000, `app.close() did not wait for the streams (${Date.now() - started} ms)`);
  await expectRefusal(t, s1, 'UNAVAILABLE', 503, 4014, 'stream 1 at shutdown');
  await expectRefusal(t, s2, 'UNAVAILABLE', 503, 4014, 'stream 2 at shutdown');
});

t.test('unary acknowledge of stream deliveries', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  await b.subscription('eod', 'topic1', { enableExactlyOnceDelivery: true });
  const plain = await b.open('sub1', first('sub1'));
  const eod = await b.open('eod', first('eod'));
  await b.publish('topic1', [{ data: b64('u1') }, { data: b64('u2') }]);
  const pm = await plain.takeMessages(2);
  const em = await eod.takeMessages(2);

  let reply = await b.api('POST', `/v1/projects/${P}/subscriptions/sub1:acknowledge`, { ackIds: ackIdsOf(pm) });
  t.strictSame(reply, { status: 200, body: {} }, 'unary acknowledge of stream deliveries (plain)');
  plain.send({ modifyDeadlineAckIds: ackIdsOf(pm), modifyDeadlineSeconds: [0, 0] });
  t.ok(await plain.quiet(700), 'acked by the unary call: a later nack on the stream brings nothing back');

  reply = await b.api('POST', `/v1/projects/${P}/subscriptions/eod:acknowledge`, { ackIds: [em[0].ackId] });
  t.strictSame(reply, { status: 200, body: {} }, 'unary acknowledge of a stream delivery (exactly-once)');
  eod.send({ ackIds: [em[0].ackId, em[1].ackId] });
  const confirmation = await eod.take((f) => f?.acknowledgeConfirmation, 2000, 'acknowledgeConfirmation');
  t.strictSame(
    confirmation.acknowledgeConfirmation,
    {
      ackIds: [em[1].ackId],
      invalidAckIds: [em[0].ackId],
      unorderedAckIds: [],
      temporaryFailedAckIds: [],
    },
    'the stream sees the unary ack: the ID is no longer valid',
  );
  reply = await b.api('POST', `/v1/projects/${P}/subscriptions/eod:acknowledge`, { ackIds: [em[1].ackId] });
  t.equal(reply.status, 400, 'a unary ack of an ID acked on the stream fails (exactly-once)');
  t.equal(
    reply.body?.error?.details?.[0]?.metadata?.[em[1].ackId],
    'PERMANENT_FAILURE_INVALID_ACK_ID',
    'with the per-ID failure',
  );
});

t.test('ack IDs a stream holds are honoured only verbatim and only on their subscription', async (t) => {
  // Settlement takes the deliveries behind ack IDs that a stream of this process has outstanding
  // from the stream instead of decoding them: that shortcut must accept exactly what decoding does.
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  await b.subscription('sub2', 'topic1');
  await b.subscription('eod2', 'topic1', { enableExactlyOnceDelivery: true });
  const client = await b.open('sub1', first('sub1'));
  await b.publish('topic1', [{ data: b64('held') }]);
  const [held] = await client.takeMessages(1);
  const last = held.ackId.at(-1);
  const tampered = `${held.ackId.slice(0, -1)}${last === 'A' ? 'B' : 'A'}`;
  const ack = (sub: string, ackIds: string[]) =>
    b.api('POST', `/v1/projects/${P}/subscriptions/${sub}:acknowledge`, { ackIds });

  let reply = await ack('sub2', [held.ackId]);
  t.equal(reply.status, 400, 'another subscription refuses the ID');
  t.equal(reply.body?.error?.status, 'INVALID_ARGUMENT');
  reply = await ack('eod2', [held.ackId]);
  t.equal(
    reply.body?.error?.details?.[0]?.metadata?.[held.ackId],
    'PERMANENT_FAILURE_INVALID_ACK_ID',
    'an exactly-once subscription of the same topic fails the ID',
  );
  reply = await ack('sub1', [tampered]);
  t.equal(reply.status, 400, 'an ID differing in one character is refused on the subscription itself');
  client.send({ modifyDeadlineAckIds: [held.ackId], modifyDeadlineSeconds: [0] });
  const [again] = await client.takeMessages(1);
  t.equal(again.message.messageId, held.message.messageId, 'none of those acked it: a nack brings it back');
  t.strictSame(await ack('sub1', [again.ackId]), { status: 200, body: {} }, 'its own ID acks it');
});

t.test('unary acks and nacks free room on the stream that delivered the messages', async (t) => {
  // Official clients ack and nack with unary calls, never on the stream: the stream must learn of
  // them, or it would wait for the leases to run out before delivering more.
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const client = await b.open('sub1', first('sub1', { maxOutstandingMessages: 2 }));
  await b.publish(
    'topic1',
    [1, 2, 3, 4].map((i) => ({ data: b64(`m${i}`) })),
  );
  const firstTwo = await client.takeMessages(2);
  t.ok(await client.quiet(500), 'nothing more while 2 are outstanding');
  let reply = await b.api('POST', `/v1/projects/${P}/subscriptions/sub1:acknowledge`, { ackIds: [firstTwo[0].ackId] });
  t.strictSame(reply, { status: 200, body: {} });
  t.equal((await client.takeMessages(1)).length, 1, 'a unary ack frees room: one more arrives');
  t.ok(await client.quiet(500), 'then nothing more');
  reply = await b.api('POST', `/v1/projects/${P}/subscriptions/sub1:modifyAckDeadline`, {
    ackIds: [firstTwo[1].ackId],
    ackDeadlineSeconds: 0,
  });
  t.strictSame(reply, { status: 200, body: {} });
  t.equal((await client.takeMessages(1)).length, 1, 'a unary nack frees room: one more arrives');
});

t.test('a plain GET of the streamingPull URL answers FAILED_PRECONDITION', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const response = await fetch(`http://127.0.0.1:${b.port}/v1/projects/${P}/subscriptions/sub1:streamingPull`);
  t.equal(response.status, 400, 'HTTP 400');
  t.match(response.headers.get('content-type'), /^application\/json/, 'JSON');
  const body = await response.json();
  t.match(body, { error: { code: 400, status: 'FAILED_PRECONDITION', message: String } }, 'error envelope');
  t.same(Object.keys(body), ['error'], 'nothing but the envelope');
  const missing = await fetch(`http://127.0.0.1:${b.port}/v1/projects/${P}/subscriptions/nope:streamingPull`);
  t.equal(missing.status, 400, 'same answer for a missing subscription (no upgrade, no lookup)');
  const post = await fetch(`http://127.0.0.1:${b.port}/v1/projects/${P}/subscriptions/sub1:streamingPull`, {
    method: 'POST',
    body: '{}',
  });
  t.equal(post.status, 404, 'POST is no route');
  t.match(await post.json(), { error: { code: 404, status: 'NOT_FOUND' } }, 'in the error envelope');
});

t.test('authentication guards REST calls and the WebSocket upgrade', async (t) => {
  const b = await openBroker(t, { authentication: tokenAuthentication(t), headers: bearer(ALICE_TOKEN) });
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');

  const rest = await b.api('GET', `/v1/projects/${P}/subscriptions/sub1`, undefined, {});
  t.match(
    rest,
    {
      status: 401,
      body: { error: { code: 401, status: 'UNAUTHENTICATED', message: /missing required authentication credential/ } },
    },
    'REST without credentials: 401',
  );
  const restBad = await b.api('GET', `/v1/projects/${P}/subscriptions/sub1`, undefined, {
    authorization: 'Bearer nope',
  });
  t.equal(restBad.status, 401, 'REST with wrong credentials: 401');
  const restOk = await b.api('GET', `/v1/projects/${P}/subscriptions/sub1`);
  t.equal(restOk.status, 200, 'REST with credentials: 200');

  for (const headers of [{}, { authorization: 'Bearer nope' }] as Record<string, string>[]) {
    let opened = false;
    const client = new StreamClient(b.streamUrl('sub1'), { headers });
    client.ws.on('open', () => (opened = true));
    const error = await client.opened.then(
      () => undefined,
      (e: Error) => e,
    );
    t.ok(error, `upgrade with ${JSON.stringify(headers)} refused`);
    t.equal(client.httpRefusal?.status, 401, 'with HTTP 401');
    let body: any;
    try {
      body = JSON.parse(client.httpRefusal?.body ?? '');
    } catch {
      body = client.httpRefusal?.body;
    }
    t.match(body, { error: { code: 401, status: 'UNAUTHENTICATED' } }, 'and the error envelope');
    await sleep(100);
    t.notOk(opened, 'no socket was opened');
  }
  t.equal(b.app.websocketServer.clients.size, 0, 'the server holds no WebSocket');
  await sleep(200);
  const connections = await new Promise<number>((resolve) => b.app.server.getConnections((_, n) => resolve(n)));
  t.equal(connections, 0, 'refused upgrades leave no connection behind once the clients are gone');

  const client = await b.open('sub1', first('sub1'));
  await b.publish('topic1', [{ data: b64('authed') }]);
  const [m] = await client.takeMessages(1);
  t.equal(unb64(m.message.data), 'authed', 'with credentials the stream works');
  const started = Date.now();
  const closedInTime = await Promise.race([b.close().then(() => true), sleep(3000).then(() => false)]);
  t.ok(
    closedInTime,
    `app.close() completes after refused upgrades (${closedInTime ? `${Date.now() - started} ms` : 'still waiting after 3 s'})`,
  );
  if (!closedInTime) for (const socket of b.sockets) socket.destroy();
  await b.close();
  t.equal(
    client.closeInfo?.code ?? (await client.waitClose()).code,
    4014,
    'the authenticated stream was ended with 4014',
  );
});

t.test('a broken client does not disturb another stream of the same subscription', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const good = await b.open('sub1', first('sub1'));
  let sent = 0;
  const roundTrip = async (what: string) => {
    const text = `rt-${sent++}`;
    await b.publish('topic1', [{ data: b64(text) }]);
    const deadline = Date.now() + 3000;
    for (;;) {
      const [m] = await good.takeMessages(1, Math.max(1, deadline - Date.now()));
      good.send({ ackIds: [m.ackId] });
      if (unb64(m.message.data) === text) break;
    }
    t.pass(`good stream still delivers after: ${what}`);
  };

  const garbage = await b.open('sub1', first('sub1'));
  garbage.send('}}}not json');
  await garbage.waitClose();
  await serverSockets(b, 1); // the server has let go of it (else it may still lease a message)
  await roundTrip('a sibling sent garbage');

  const binary = await b.open('sub1', first('sub1'));
  binary.send(Buffer.alloc(1500 * 1024, 0xff), true);
  await binary.waitClose();
  await serverSockets(b, 1); // the server has let go of it (else it may still lease a message)
  await roundTrip('a sibling sent a big binary frame');

  const crasher = await b.open('sub1', first('sub1'));
  (crasher.ws as any)._socket.destroy();
  await crasher.closed;
  await serverSockets(b, 1); // the server has let go of it (else it may still lease a message)
  await roundTrip('a sibling socket was destroyed');

  const halfOpen = new StreamClient(b.streamUrl('sub1'));
  b.clients.push(halfOpen);
  await halfOpen.opened;
  halfOpen.send('{"streamAckDeadlineSeconds": 10, "subscr');
  await halfOpen.waitClose();
  await serverSockets(b, 1); // the server has let go of it (else it may still lease a message)
  await roundTrip('a sibling sent a truncated first frame');

  // A peer that stops answering pings is dropped after about two heartbeats.
  const dead = await b.open('sub1', first('sub1'), { autoPong: false });
  const started = Date.now();
  const close = await dead.waitClose(5 * HEARTBEAT_MS).catch(() => undefined);
  t.ok(
    close,
    `a peer that never answers pings is dropped (${close ? `${Date.now() - started} ms, code ${close.code}` : 'not dropped'})`,
  );
  await roundTrip('a dead sibling was dropped');

  t.ok(good.isOpen, 'the good stream is open');
  t.notOk(
    good.frames.some((f) => f?.error),
    'and never got an error',
  );
});

t.test('closing a stream', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('eod', 'topic1', { enableExactlyOnceDelivery: true });

  // Acks sent just before a graceful close: every frame that reached the server is handled.
  const a = await b.open('eod', first('eod'));
  await b.publish(
    'topic1',
    Array.from({ length: 20 }, (_, i) => ({ data: b64(`close-${i}`) })),
  );
  const messages = await a.takeMessages(20);
  for (const m of messages) a.send({ ackIds: [m.ackId] });
  a.ws.close(1000);
  await a.waitClose();
  await serverSockets(b, 0);
  await b.app.broker.streams.settled(); // the frames that reached the server are being applied
  const reply = await b.api('POST', `/v1/projects/${P}/subscriptions/eod:acknowledge`, { ackIds: ackIdsOf(messages) });
  const stillValid =
    reply.status === 200
      ? messages.length
      : messages.length - Object.keys(reply.body?.error?.details?.[0]?.metadata ?? {}).length;
  t.equal(stillValid, 0, `acks sent before a graceful close were all applied (${stillValid} of 20 were dropped)`);

  // A client that has sent its close frame gets no new leases: a message published meanwhile is
  // not stranded on it for the whole stream deadline. (The client's socket stops reading, so the
  // server's close handshake cannot finish and its side of the stream stays in CLOSING.)
  const closing = await b.open('eod', first('eod', { streamAckDeadlineSeconds: 60 }));
  (closing.ws as any)._socket.pause();
  closing.ws.close(1000);
  await sleep(200);
  await b.publish('topic1', [{ data: b64('while-closing') }]);
  await sleep(300);
  const other = await b.open('eod', first('eod'));
  const got = await other.takeMessages(1, 2000).catch(() => []);
  t.equal(
    got.length,
    1,
    'a message published while a stream was closing reaches an open stream at once (not after the 60 s lease)',
  );
  closing.terminate();
});

t.test('a connection that never sends its first frame is closed', async (t) => {
  const b = await openBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const silent = new StreamClient(b.streamUrl('sub1'));
  b.clients.push(silent);
  await silent.opened;
  const close = await silent.waitClose(10 * HEARTBEAT_MS);
  t.equal(close.code, 4004, 'closed with DEADLINE_EXCEEDED after two heartbeat periods');
  t.equal(JSON.parse(close.reason).error.status, 'DEADLINE_EXCEEDED');
});
