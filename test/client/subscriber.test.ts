// The subscriber's protocol behaviour, driven frame by frame: a fake WebSocket plays the broker
// and a fake clock drives the timers, so lease renewal, keep-alives, backoff and resends are
// checked on their exact schedule.
import t from 'tap';
import {
  PubSubClient,
  type PubSubError,
  isRetryableCloseCode,
  type Message,
  type SubscribeOptions,
} from '../../src/client/index.ts';
import { FakeClock, FakeSocket, settle } from './_fakes.ts';

const PLAIN = { exactlyOnceDeliveryEnabled: false, messageOrderingEnabled: false };
const EXACTLY_ONCE = { exactlyOnceDeliveryEnabled: true, messageOrderingEnabled: false };
const ORDERED = { exactlyOnceDeliveryEnabled: false, messageOrderingEnabled: true };

const wire = (messageId: string, ackId: string, data = `data-${messageId}`, orderingKey?: string) => ({
  ackId,
  message: {
    messageId,
    publishTime: '2024-05-01T00:00:00.000Z',
    data: Buffer.from(data).toString('base64'),
    ...(orderingKey ? { orderingKey } : {}),
  },
});

interface Setup {
  clock: FakeClock;
  subscriber: ReturnType<PubSubClient['subscribe']>;
  received: Message[];
  errors: Error[];
  restCalls: { url: string; body: any }[];
  /** Opens the next stream the subscriber creates and sends the subscription properties. */
  openStream: (properties?: object) => Promise<FakeSocket>;
}

function setup(
  t: { teardown(fn: () => unknown): void },
  options: SubscribeOptions = {},
  handler?: (message: Message) => void | Promise<void>,
): Setup {
  FakeSocket.reset();
  const clock = new FakeClock().install();
  t.teardown(() => clock.uninstall());
  const restCalls: { url: string; body: any }[] = [];
  const fetch = async (url: string, init: { body?: string }) => {
    restCalls.push({ url, body: JSON.parse(init.body ?? '{}') });
    return { ok: true, status: 200, text: async () => '{}' };
  };
  const client = new PubSubClient({ endpoint: 'http://broker.test', projectId: 'p', WebSocket: FakeSocket, fetch });
  const received: Message[] = [];
  const errors: Error[] = [];
  const subscriber = client.subscribe(
    's-sub',
    handler ??
      ((message) => {
        received.push(message);
        return new Promise<void>(() => {}); // still working on it
      }),
    { streamAckDeadlineSeconds: 10, onError: (error) => errors.push(error), ...options },
  );
  const openStream = async (properties: object = PLAIN) => {
    const before = FakeSocket.instances.length;
    for (let i = 0; i < 100 && FakeSocket.instances.length === before; i++) await clock.advance(10);
    const socket = FakeSocket.last();
    socket.open();
    socket.serverSend({ subscriptionProperties: properties });
    await settle();
    return socket;
  };
  return { clock, subscriber, received, errors, restCalls, openStream };
}

t.test('leases are renewed every half deadline until maxExtensionSeconds; a silent stream is replaced', async (t) => {
  const { clock, subscriber, received, errors, openStream } = setup(t, { maxExtensionSeconds: 25 });
  const start = clock.now;
  const first = await openStream();
  t.equal(first.url, 'ws://broker.test/v1/projects/p/subscriptions/s-sub:streamingPull');
  t.same(
    first.frames()[0],
    {
      subscription: 'projects/p/subscriptions/s-sub',
      streamAckDeadlineSeconds: 10,
      clientId: subscriber.clientId,
      maxOutstandingMessages: 1000,
    },
    'the first frame',
  );
  t.equal(subscriber.state, 'open');

  first.serverSend({ receivedMessages: [wire('1', 'A1')] });
  t.equal(received.length, 1, 'handed to the handler');
  await clock.advance(29_000);
  const renewals = first.sent
    .filter(({ frame }) => frame.modifyDeadlineAckIds)
    .map(({ at, frame }) => [at - start, frame.modifyDeadlineAckIds, frame.modifyDeadlineSeconds]);
  t.same(
    renewals,
    [
      [5_000, ['A1'], [10]],
      [10_000, ['A1'], [10]],
      [15_000, ['A1'], [10]],
      // It arrived 10 ms after the renewal timer started: the last renewals end 25 s after that.
      [20_000, ['A1'], [6]],
      [25_000, ['A1'], [1]],
    ],
    'renewed every 5 s, for at most 25 s in all',
  );

  await clock.advance(1_000);
  t.same(first.sent.at(-1), { at: start + 30_000, frame: {} }, 'a keep-alive {} after 30 s');
  await clock.advance(30_000);
  t.equal(subscriber.state, 'reconnecting', 'no answer within 30 s: the stream is dropped');
  t.equal(first.closedByClient?.code, 4000);
  t.equal(errors.length, 1);
  t.equal((errors[0] as PubSubError).retryable, true);
  t.match(errors[0].message, /keep-alive/);

  received[0].ack(); // while disconnected: queued
  const second = await openStream();
  t.not(second, first, 'a new stream');
  t.equal(second.frames()[0].clientId, subscriber.clientId, 'with the same clientId');
  t.same(second.frames('ackIds'), [{ ackIds: ['A1'] }], 'the ack made while disconnected goes out as soon as it opens');
});

t.test('a stream that answers its keep-alives is kept', async (t) => {
  const { clock, openStream } = setup(t);
  const socket = await openStream();
  for (let i = 0; i < 4; i++) {
    await clock.advance(30_000);
    t.same(socket.frames().at(-1), {}, `keep-alive ${i + 1}`);
    socket.serverSend({});
  }
  t.equal(FakeSocket.instances.length, 1, 'never replaced');
});

t.test(
  'after a drop: recent acks are sent again, held leases renewed at once, redeliveries take the old place',
  async (t) => {
    const { clock, received, openStream } = setup(t);
    const first = await openStream();
    first.serverSend({ receivedMessages: [wire('1', 'A1'), wire('2', 'A2'), wire('3', 'A3')] });
    received[0].ack();
    await clock.advance(5);
    t.same(first.frames('ackIds'), [{ ackIds: ['A1'] }], 'acks are batched and sent');
    await clock.advance(16_000);
    first.serverSend({});
    received[1].ack();
    await clock.advance(5);
    first.serverClose(1006);

    const second = await openStream();
    t.same(second.frames('ackIds'), [{ ackIds: ['A2'] }], 'only the ack sent within 15 s of the drop is sent again');
    t.same(
      second.frames('modifyDeadlineAckIds'),
      [{ modifyDeadlineAckIds: ['A3'], modifyDeadlineSeconds: [10] }],
      'the held lease is renewed as soon as the stream opens',
    );

    second.serverSend({ receivedMessages: [wire('3', 'B3'), wire('2', 'B2')] });
    t.equal(received.length, 3, 'redeliveries of held or acked messages do not reach the handler');
    t.equal(received[2].ackId, 'B3', 'the held message now carries the new ack ID');
    await clock.advance(5);
    t.same(second.frames('ackIds').at(-1), { ackIds: ['B2'] }, 'the redelivered acked message is acked again');
    received[2].ack();
    received[2].ack();
    received[2].nack();
    await clock.advance(5);
    t.same(second.frames('ackIds').at(-1), { ackIds: ['B3'] }, 'the ack uses the new ack ID');
    t.equal(
      second
        .frames('ackIds')
        .flatMap((frame) => frame.ackIds)
        .filter((id: string) => id === 'B3').length,
      1,
      'settling again sends nothing',
    );
    t.same(
      second.frames('modifyDeadlineSeconds').filter((frame) => frame.modifyDeadlineSeconds.includes(0)),
      [],
      'and the nack after the ack is not sent',
    );
  },
);

t.test('exactly-once: confirmations resolve the responses; transient failures are retried', async (t) => {
  const { clock, received, openStream } = setup(t);
  const first = await openStream(EXACTLY_ONCE);
  first.serverSend({ receivedMessages: [wire('1', 'A1'), wire('2', 'A2'), wire('3', 'A3')] });
  const none = { ackIds: [], invalidAckIds: [], unorderedAckIds: [], temporaryFailedAckIds: [] };

  const acked = received[0].ackWithResponse();
  await clock.advance(5);
  first.serverSend({ acknowledgeConfirmation: { ...none, temporaryFailedAckIds: ['A1'] } });
  await clock.advance(105);
  t.same(
    first.frames('ackIds'),
    [{ ackIds: ['A1'] }, { ackIds: ['A1'] }],
    'a temporary failure is retried after 100 ms',
  );
  first.serverSend({ acknowledgeConfirmation: { ...none, ackIds: ['A1'] } });
  t.equal(await acked, 'SUCCESS');

  const nacked = received[1].nackWithResponse();
  await clock.advance(5);
  t.same(first.frames('modifyDeadlineAckIds'), [{ modifyDeadlineAckIds: ['A2'], modifyDeadlineSeconds: [0] }]);
  first.serverSend({ modifyAckDeadlineConfirmation: { ackIds: ['A2'], invalidAckIds: [], temporaryFailedAckIds: [] } });
  t.equal(await nacked, 'SUCCESS');

  const unsure = received[2].ackWithResponse();
  await clock.advance(5);
  first.serverClose(1006); // before the confirmation
  const second = await openStream(EXACTLY_ONCE);
  t.same(second.frames('ackIds'), [{ ackIds: ['A3'] }], 'an unconfirmed ack is sent again on the next stream');
  second.serverSend({ acknowledgeConfirmation: { ...none, invalidAckIds: ['A3'] } });
  t.equal(await unsure, 'OTHER', 'INVALID after a possibly applied first attempt is reported as OTHER');

  second.serverSend({ receivedMessages: [wire('4', 'A4')] });
  second.serverSend({ receivedMessages: [wire('4', 'B4')] });
  t.same(
    received.slice(3).map((message) => message.ackId),
    ['A4', 'B4'],
    'a redelivery is a new message',
  );
  const stale = received[3].ackWithResponse();
  await clock.advance(5);
  second.serverSend({ acknowledgeConfirmation: { ...none, invalidAckIds: ['A4'] } });
  t.equal(await stale, 'INVALID', 'the superseded delivery cannot be acked');
});

t.test('ordered: one message per key at a time, in order; a nack drops the later ones of its key', async (t) => {
  const calls: string[] = [];
  const finish = new Map<string, () => void>();
  const messages = new Map<string, Message>();
  const { clock, openStream } = setup(t, {}, (message) => {
    calls.push(message.text());
    messages.set(message.text(), message);
    return new Promise<void>((resolve) => finish.set(message.text(), resolve));
  });
  const socket = await openStream(ORDERED);
  socket.serverSend({
    receivedMessages: [
      wire('1', 'A1', 'k1-1', 'k1'),
      wire('2', 'A2', 'k1-2', 'k1'),
      wire('3', 'A3', 'k2-1', 'k2'),
      wire('4', 'A4', 'k1-3', 'k1'),
      wire('5', 'A5', 'plain'),
    ],
  });
  t.same(calls, ['k1-1', 'k2-1', 'plain'], 'the head of each key, and unkeyed messages');
  messages.get('k1-1')!.ack();
  await settle();
  t.same(calls, ['k1-1', 'k2-1', 'plain'], 'settling does not release the key: the handler has to return');
  finish.get('k1-1')!();
  await settle();
  t.same(calls, ['k1-1', 'k2-1', 'plain', 'k1-2'], 'then the next of the key');

  messages.get('k1-2')!.nack();
  finish.get('k1-2')!();
  await clock.advance(5);
  t.same(calls.length, 4, 'k1-3 is not handed out: the broker sends it again after k1-2');
  t.same(
    socket.frames('modifyDeadlineAckIds').at(-1),
    { modifyDeadlineAckIds: ['A2', 'A4'], modifyDeadlineSeconds: [0, 0] },
    'the nack, then the dropped follower',
  );
  socket.serverSend({ receivedMessages: [wire('2', 'B2', 'k1-2', 'k1'), wire('4', 'B4', 'k1-3', 'k1')] });
  t.same(calls.slice(4), ['k1-2'], 'redelivered in order');
  finish.get('k1-2')!();
  await settle();
  t.same(calls.slice(4), ['k1-2', 'k1-3']);
});

t.test('flow control counts messages and bytes until they are settled', async (t) => {
  const received: Message[] = [];
  const { openStream } = setup(t, { maxOutstandingMessages: 5, maxOutstandingBytes: 25 }, (message) => {
    received.push(message); // returns at once: only settling frees room
  });
  const socket = await openStream();
  t.equal(socket.frames()[0].maxOutstandingBytes, 25, 'the limits go to the broker');
  t.equal(socket.frames()[0].maxOutstandingMessages, 5);
  socket.serverSend({ receivedMessages: ['1', '2', '3', '4', '5', '6'].map((id) => wire(id, `A${id}`, '0123456789')) });
  t.equal(received.length, 3, '3 x 10 bytes: at the 25-byte limit');
  received[0].ack();
  await settle();
  t.equal(received.length, 4, 'an ack frees room');
  received[1].nack();
  received[2].ack();
  received[3].ack();
  await settle();
  t.equal(received.length, 6);
});

t.test('close codes: retryable ones reconnect with backoff, the others end the subscriber', async (t) => {
  for (const code of [4001, 4004, 4008, 4010, 4013, 4014, 1000, 1001, 1006, 1011, 1012, 1013]) {
    t.equal(isRetryableCloseCode(code), true, `${code} is retried`);
  }
  for (const code of [4002, 4003, 4005, 4007, 4009, 4012, 4016, 1002, 1008, 1009]) {
    t.equal(isRetryableCloseCode(code), false, `${code} is fatal`);
  }

  const { clock, subscriber, errors } = setup(t, { reconnect: { initialDelayMs: 100, maxDelayMs: 1000 } });
  await clock.advance(0);
  const createdAt: number[] = [clock.now];
  for (let i = 0; i < 7; i++) {
    FakeSocket.last().serverClose(1006); // never opened: the broker is down
    const before = FakeSocket.instances.length;
    while (FakeSocket.instances.length === before) await clock.advance(1);
    createdAt.push(clock.now);
  }
  const delays = createdAt.slice(1).map((at, i) => at - createdAt[i]);
  const bounds = [100, 200, 400, 800, 1000, 1000, 1000];
  delays.forEach((delay, i) => {
    t.ok(
      delay >= bounds[i] / 2 && delay <= bounds[i],
      `delay ${i + 1} (${delay} ms) in [${bounds[i] / 2}, ${bounds[i]}]`,
    );
  });
  t.equal(errors.length, 7);

  const socket = FakeSocket.last();
  socket.open();
  socket.serverSend({ subscriptionProperties: PLAIN });
  socket.serverSend({
    error: {
      code: 400,
      message: 'maxOutstandingMessages may only be set in the first frame.',
      status: 'INVALID_ARGUMENT',
    },
  });
  socket.serverClose(4003, '{"error":{"code":400,"message":"trunc","status":"INVALID_ARGUMENT"}}');
  const error = await subscriber.closed;
  t.equal(error?.status, 'INVALID_ARGUMENT');
  t.equal(
    error?.message,
    'maxOutstandingMessages may only be set in the first frame.',
    'the error frame has the whole message',
  );
  t.equal(error?.closeCode, 4003);
  t.equal(subscriber.state, 'closed');
  await clock.advance(60_000);
  t.equal(FakeSocket.last(), socket, 'no reconnect');
});

t.test('close() from an error listener while a stream drops: no reconnect', async (t) => {
  const { clock, subscriber, received, restCalls, openStream } = setup(t);
  const states: string[] = [];
  subscriber.on('state', (state) => states.push(state));
  const socket = await openStream();
  socket.serverSend({ receivedMessages: [wire('1', 'A1')] });
  received[0].ack();
  subscriber.on('error', () => void subscriber.close());
  socket.serverClose(1006);
  await clock.advance(60_000);
  await subscriber.closed;
  t.same(states, ['open', 'closing', 'closed'], 'never reconnecting once closing');
  t.equal(FakeSocket.instances.length, 1, 'no new stream');
  t.same(
    restCalls.map(({ url, body }) => [url.split(':').at(-1), body.ackIds]),
    [['acknowledge', ['A1']]],
    'the ack goes over REST',
  );
});

t.test('close: the broker confirms it read the stream, which then closes; what is left goes over REST', async (t) => {
  const received: Message[] = [];
  const { clock, subscriber, restCalls, openStream } = setup(t, {}, (message) => void received.push(message));
  const socket = await openStream();
  socket.serverSend({ receivedMessages: [wire('1', 'A1'), wire('2', 'A2'), wire('3', 'A3')] });
  received[0].ack();
  await clock.advance(5);
  t.same(socket.frames().at(-1), { ackIds: ['A1'] }, 'sent on the stream before close()');
  received[1].ack();
  const closing = subscriber.close();
  await clock.advance(20);
  t.same(socket.frames().at(-1), {}, 'close() sends nothing more on the stream but a keep-alive as a barrier');
  t.equal(socket.closedByClient, undefined, 'and keeps the stream until the broker answers it');
  socket.serverSend({ receivedMessages: [wire('4', 'A4')] }); // room the broker had: nacked too
  socket.serverSend({});
  await clock.advance(20);
  await closing;
  t.equal(socket.closedByClient?.code, 1000, 'then closes it');
  const rest = 'http://broker.test/v1/projects/p/subscriptions/s-sub';
  t.same(restCalls[0], { url: `${rest}:acknowledge`, body: { ackIds: ['A2'] } }, 'from close() on, acks go over REST');
  const nacks = restCalls.slice(1);
  t.ok(
    nacks.every(({ url, body }) => url === `${rest}:modifyAckDeadline` && body.ackDeadlineSeconds === 0),
    'and nacks',
  );
  t.same(
    nacks.flatMap(({ body }) => body.ackIds),
    ['A3', 'A4'],
    'the unsettled message, then the late one',
  );
  t.equal(received.length, 3, 'the late message never reached the handler');
  t.equal(subscriber.state, 'closed');
  t.equal(await received[1].ackWithResponse(), 'SUCCESS');
});

t.test('close while disconnected: acks go over REST', async (t) => {
  const { clock, subscriber, received, restCalls, openStream } = setup(t, { closeTimeoutMs: 1000 });
  const socket = await openStream();
  socket.serverSend({ receivedMessages: [wire('1', 'A1'), wire('2', 'A2')] });
  socket.serverClose(1006);
  const response = received[0].ackWithResponse();
  const closing = subscriber.close();
  await clock.advance(1_100); // the second handler never returns: close() gives up waiting after closeTimeoutMs
  await closing;
  t.same(restCalls, [
    { url: 'http://broker.test/v1/projects/p/subscriptions/s-sub:acknowledge', body: { ackIds: ['A1'] } },
    {
      url: 'http://broker.test/v1/projects/p/subscriptions/s-sub:modifyAckDeadline',
      body: { ackIds: ['A2'], ackDeadlineSeconds: 0 },
    },
  ]);
  t.equal(await response, 'SUCCESS');
  t.equal(FakeSocket.instances.length, 1, 'no reconnect once closing');
});

t.test('a handler that throws: the message is nacked and the error reported', async (t) => {
  const { clock, errors, openStream } = setup(t, {}, () => {
    throw new Error('boom');
  });
  const socket = await openStream();
  socket.serverSend({ receivedMessages: [wire('1', 'A1')] });
  await clock.advance(5);
  t.same(socket.frames('modifyDeadlineAckIds'), [{ modifyDeadlineAckIds: ['A1'], modifyDeadlineSeconds: [0] }]);
  t.equal(errors[0].name, 'HandlerError');
  t.match(errors[0].message, /message 1 failed: boom/);
});
