// The streaming client (src/client) against a real broker: buildApp listening on a port, the
// client using the 'ws' package's WebSocket as Node 20 users would.
import t from 'tap';
import { WebSocket } from 'ws';
import { PubSubClient, PubSubError, type Message, type SubscriberState } from '../../src/client/index.ts';
import { assertNothingLeft, recordingWebSocket, sleep, startLiveBroker, waitFor } from './_support.ts';

t.test('publish, then subscribe: every message arrives intact and is acked', async (t) => {
  const broker = await startLiveBroker(t, { name: 'client-basic' });
  await broker.createPair('basic', 'basic-sub');
  const client = new PubSubClient({ endpoint: broker.url, projectId: 'p', WebSocket });

  const ids = await client.publish('basic', [
    { data: 'one', attributes: { n: '1' } },
    { data: new Uint8Array([0, 255, 1, 128]) },
    { data: 'üñí€ 😀' },
    { attributes: { only: 'attributes' } },
  ]);
  t.equal(ids.length, 4, 'one message ID per message');

  const got: Message[] = [];
  const states: SubscriberState[] = [];
  const subscriber = client.subscribe(
    'basic-sub',
    (message) => {
      got.push(message);
      message.ack();
    },
    { onStateChange: (state) => states.push(state) },
  );
  await waitFor(() => got.length === 4, '4 messages');

  const byId = new Map(got.map((message) => [message.messageId, message]));
  t.same([...byId.keys()].sort(), [...ids].sort(), 'the published IDs arrive');
  t.equal(byId.get(ids[0])!.text(), 'one');
  t.same(byId.get(ids[0])!.attributes, { n: '1' });
  t.same([...byId.get(ids[1])!.data], [0, 255, 1, 128], 'binary data survives');
  t.equal(byId.get(ids[2])!.text(), 'üñí€ 😀', 'UTF-8 survives');
  t.equal(byId.get(ids[3])!.data.length, 0, 'no data: empty bytes');
  t.same(byId.get(ids[3])!.attributes, { only: 'attributes' });
  t.match(byId.get(ids[0])!.publishTime, /^\d{4}-\d\d-\d\dT/, 'publishTime is RFC 3339');
  t.same(subscriber.subscriptionProperties, { exactlyOnceDeliveryEnabled: false, messageOrderingEnabled: false });
  t.equal(subscriber.state, 'open');

  await subscriber.close();
  t.equal(subscriber.state, 'closed');
  t.same(states, ['open', 'closing', 'closed'], 'state changes');
  t.equal(await subscriber.closed, undefined, 'closed resolves without an error');
  await assertNothingLeft(
    t,
    broker,
    'basic-sub',
    got.map((message) => message.ackId),
  );
});

t.test('publish splits runs of ordering keys and big lists into several requests, keeping order', async (t) => {
  const broker = await startLiveBroker(t, { name: 'client-publish' });
  await broker.createPair('split', 'split-sub', { enableMessageOrdering: true });
  const client = new PubSubClient({ endpoint: broker.url, projectId: 'p', WebSocket });
  const messages = [
    ...Array.from({ length: 1200 }, (_, i) => ({ data: `plain-${i}` })),
    { data: 'a-0', orderingKey: 'a' },
    { data: 'a-1', orderingKey: 'a' },
    { data: 'b-0', orderingKey: 'b' },
    { data: 'a-2', orderingKey: 'a' },
  ];
  const ids = await client.publish('split', messages);
  t.equal(ids.length, messages.length);
  t.equal(new Set(ids).size, ids.length, 'distinct IDs');
  const numeric = ids.map(Number);
  t.same(
    numeric,
    [...numeric].sort((a, b) => a - b),
    'IDs are assigned in input order',
  );

  const error = await client.publish('no-such-topic', [{ data: 'x' }]).catch((e: unknown) => e);
  t.ok(error instanceof PubSubError, 'a REST error rejects with a PubSubError');
  t.equal((error as PubSubError).status, 'NOT_FOUND');
  t.equal((error as PubSubError).httpStatus, 404);
});

t.test('exactly-once: ackWithResponse reports SUCCESS, and INVALID once the lease was nacked elsewhere', async (t) => {
  const broker = await startLiveBroker(t, { name: 'client-eod' });
  await broker.createPair('eod-topic', 'eod-sub', { enableExactlyOnceDelivery: true });
  const client = new PubSubClient({ endpoint: broker.url, projectId: 'p', WebSocket });
  const inbox: Message[] = [];
  const subscriber = client.subscribe('eod-sub', (message) => void inbox.push(message), {
    streamAckDeadlineSeconds: 30,
  });
  t.teardown(() => subscriber.close());
  const next = async () => {
    await waitFor(() => inbox.length > 0, 'a message');
    return inbox.shift()!;
  };

  await client.publish('eod-topic', [{ data: 'first' }]);
  const first = await next();
  t.same(subscriber.subscriptionProperties, { exactlyOnceDeliveryEnabled: true, messageOrderingEnabled: false });
  t.equal(await first.ackWithResponse(), 'SUCCESS', 'the broker confirms the ack');
  t.equal(await first.ackWithResponse(), 'SUCCESS', 'asking again gives the same answer (nothing is sent twice)');
  t.equal(await first.nackWithResponse(), 'INVALID', 'a nack after the ack is refused');

  await client.publish('eod-topic', [{ data: 'second' }]);
  const second = await next();
  const nacked = await broker.rest('POST', '/v1/projects/p/subscriptions/eod-sub:modifyAckDeadline', {
    ackIds: [second.ackId],
    ackDeadlineSeconds: 0,
  });
  t.equal(nacked.status, 200, 'another client nacks the lease');
  t.equal(await second.ackWithResponse(), 'INVALID', 'the ack of a lease nacked elsewhere is INVALID');
  const again = await next();
  t.equal(again.messageId, second.messageId, 'the message comes again, to the handler');
  t.not(again.ackId, second.ackId, 'with a new ack ID');
  t.equal(await again.nackWithResponse(), 'SUCCESS', 'nackWithResponse is confirmed too');
  const third = await next();
  t.equal(third.messageId, second.messageId, 'a confirmed nack redelivers');
  t.equal(await third.ackWithResponse(), 'SUCCESS');

  await subscriber.close();
  await assertNothingLeft(t, broker, 'eod-sub', [first.ackId, third.ackId]);
});

t.test('reconnect: dropped and shut-down streams resume with the same clientId; no ack lost, none twice', async (t) => {
  const broker = await startLiveBroker(t, { name: 'client-reconnect' });
  await broker.createPair('rc-topic', 'rc-sub');
  const recording = recordingWebSocket();
  const restAckIds: string[] = [];
  const recordingFetch = async (
    url: string,
    init: { method: string; headers: Record<string, string>; body?: string },
  ) => {
    if (url.endsWith(':acknowledge')) restAckIds.push(...JSON.parse(init.body!).ackIds);
    return fetch(url, init);
  };
  const client = new PubSubClient({
    endpoint: broker.url,
    projectId: 'p',
    WebSocket: recording.WebSocket,
    fetch: recordingFetch,
  });
  const TOTAL = 60;
  const handled: string[] = [];
  const ackedIds = new Set<string>();
  const ackIds: string[] = [];
  const duplicates: string[] = [];
  let acksWhileDown = 0;
  const errors: Error[] = [];
  const subscriber = client.subscribe(
    'rc-sub',
    async (message) => {
      if (ackedIds.has(message.messageId)) duplicates.push(message.messageId);
      handled.push(message.messageId);
      await sleep(5 + Math.random() * 40);
      if (subscriber.state !== 'open') acksWhileDown++;
      ackedIds.add(message.messageId);
      ackIds.push(message.ackId);
      message.ack();
    },
    {
      streamAckDeadlineSeconds: 10,
      maxOutstandingMessages: 20,
      reconnect: { initialDelayMs: 300, maxDelayMs: 1000 },
      onError: (e) => errors.push(e),
    },
  );
  const publishBatch = (from: number, count: number) =>
    client.publish(
      'rc-topic',
      Array.from({ length: count }, (_, i) => ({ data: `m${from + i}` })),
    );

  await publishBatch(0, 20);
  await waitFor(() => ackedIds.size >= 5, '5 acks before the drop');
  // An abnormal drop (1006): the server side vanishes without a close frame.
  for (const socket of broker.app.websocketServer.clients) socket.terminate();
  await waitFor(() => subscriber.state === 'reconnecting', 'reconnecting');
  await waitFor(() => subscriber.state === 'open', 'open again');
  await publishBatch(20, 20);
  await waitFor(() => ackedIds.size >= 30, '30 acks');
  // A graceful shutdown of the streams: UNAVAILABLE, close code 4014.
  broker.app.broker.streams.closeAll();
  await waitFor(() => subscriber.state === 'reconnecting', 'reconnecting after UNAVAILABLE');
  await publishBatch(40, 20);
  await waitFor(() => ackedIds.size === TOTAL, `all ${TOTAL} acked`, 20_000);
  await subscriber.close();

  t.ok(recording.streams.length >= 3, `at least 3 streams were opened (${recording.streams.length})`);
  t.same(
    [...new Set(recording.streams.map((stream) => stream.sent[0]?.clientId))],
    [subscriber.clientId],
    'every stream opened with the same clientId',
  );
  t.ok(acksWhileDown > 0, `some acks were made while disconnected (${acksWhileDown})`);
  const closeCodes = errors.map((e) => (e as PubSubError).closeCode);
  t.ok(closeCodes.includes(1006), 'the drop was reported as 1006');
  t.ok(closeCodes.includes(4014), 'the shutdown was reported as 4014');
  t.ok(
    errors.every((e) => e instanceof PubSubError && e.retryable),
    'both were retryable',
  );
  t.same(duplicates, [], 'no acked message was handled again');
  t.equal(new Set(handled).size, TOTAL, 'every message was handled');
  const sentAckIds = new Set([
    ...recording.streams.flatMap((stream) => stream.sent.flatMap((frame) => frame.ackIds ?? [])),
    ...restAckIds,
  ]);
  t.ok(
    ackIds.every((ackId) => sentAckIds.has(ackId)),
    'every ack went out, on a stream or (from close() on) over REST',
  );
  await assertNothingLeft(t, broker, 'rc-sub', ackIds);
});

t.test('ordered subscription: each key is handled in order, one message at a time, even across a nack', async (t) => {
  const broker = await startLiveBroker(t, { name: 'client-ordered' });
  await broker.createPair('ord-topic', 'ord-sub', { enableMessageOrdering: true });
  const client = new PubSubClient({ endpoint: broker.url, projectId: 'p', WebSocket });
  const KEYS = ['a', 'b', 'c'];
  const PER_KEY = 12;
  const active = new Map<string, number>();
  let overlap = 0;
  const ackedOrder = new Map<string, number[]>(KEYS.map((key) => [key, []]));
  let nackedOnce = false;
  const subscriber = client.subscribe(
    'ord-sub',
    async (message) => {
      const key = message.orderingKey!;
      const seq = Number(message.text().split('-')[1]);
      active.set(key, (active.get(key) ?? 0) + 1);
      if (active.get(key)! > 1) overlap++;
      await sleep(Math.random() * 15);
      active.set(key, active.get(key)! - 1);
      if (key === 'b' && seq === 4 && !nackedOnce) {
        nackedOnce = true;
        message.nack(); // b-4 and every later b come again, in order
        return;
      }
      ackedOrder.get(key)!.push(seq);
      message.ack();
    },
    { streamAckDeadlineSeconds: 30 },
  );
  for (let i = 0; i < PER_KEY; i++) {
    // One request per key and step, interleaving the keys.
    for (const key of KEYS) await client.publish('ord-topic', [{ data: `${key}-${i}`, orderingKey: key }]);
  }
  await waitFor(
    () => [...ackedOrder.values()].every((seqs) => seqs.length >= PER_KEY),
    'every key fully acked',
    20_000,
  );
  await subscriber.close();
  t.equal(overlap, 0, 'never two messages of one key at once');
  t.ok(nackedOnce, 'b-4 was nacked once');
  const expected = Array.from({ length: PER_KEY }, (_, i) => i);
  for (const key of KEYS) t.same(ackedOrder.get(key), expected, `key ${key} acked in order, each once`);
});

t.test('flow control: at most maxOutstandingMessages handed out and unsettled', async (t) => {
  const broker = await startLiveBroker(t, { name: 'client-flow' });
  await broker.createPair('flow', 'flow-sub');
  const client = new PubSubClient({ endpoint: broker.url, projectId: 'p', WebSocket });
  const held: Message[] = [];
  let peak = 0;
  let total = 0;
  const subscriber = client.subscribe(
    'flow-sub',
    (message) => {
      held.push(message);
      total++;
      peak = Math.max(peak, held.length);
    },
    { maxOutstandingMessages: 3 },
  );
  await client.publish(
    'flow',
    Array.from({ length: 10 }, (_, i) => ({ data: `f${i}` })),
  );
  await waitFor(() => held.length === 3, '3 messages handed out');
  await sleep(300);
  t.equal(held.length, 3, 'no fourth message while three are unsettled');
  while (total < 10 || held.length > 0) {
    const message = held.shift();
    if (message) message.ack();
    else await sleep(10);
  }
  t.equal(peak, 3, 'the peak was 3');
  await subscriber.close();
});

t.test('close waits for running handlers, sends their acks, and nacks what was not handled', async (t) => {
  const broker = await startLiveBroker(t, { name: 'client-close' });
  await broker.createPair('cl-topic', 'cl-sub');
  const client = new PubSubClient({ endpoint: broker.url, projectId: 'p', WebSocket });
  const started: string[] = [];
  const ackedIds: string[] = [];
  const subscriber = client.subscribe(
    'cl-sub',
    async (message) => {
      started.push(message.text());
      await sleep(300);
      ackedIds.push(message.ackId);
      message.ack();
    },
    { maxOutstandingMessages: 2 },
  );
  await client.publish(
    'cl-topic',
    Array.from({ length: 5 }, (_, i) => ({ data: `c${i}` })),
  );
  await waitFor(() => started.length === 2, 'two handlers running');
  const closing = subscriber.close();
  t.equal(subscriber.state, 'closing');
  await closing;
  t.equal(ackedIds.length, 2, 'the running handlers finished and acked');
  t.equal(started.length, 2, 'no handler started after close()');
  // The broker has the acks, and the three others are available again at once (nacked).
  const pulled = await broker.rest('POST', '/v1/projects/p/subscriptions/cl-sub:pull', {
    maxMessages: 10,
    returnImmediately: true,
  });
  const texts = (pulled.body.receivedMessages ?? [])
    .map((m: any) => Buffer.from(m.message.data, 'base64').toString())
    .sort();
  const expected = ['c0', 'c1', 'c2', 'c3', 'c4'].filter((text) => !started.includes(text));
  t.same(texts, expected, 'only the unhandled messages are available');
});

t.test('a missing subscription ends the subscriber with NOT_FOUND (4005), no reconnect', async (t) => {
  const broker = await startLiveBroker(t, { name: 'client-fatal' });
  const client = new PubSubClient({ endpoint: broker.url, projectId: 'p', WebSocket });
  const errors: Error[] = [];
  const subscriber = client.subscribe('missing-sub', () => {}, { onError: (e) => errors.push(e) });
  const error = await subscriber.closed;
  t.ok(error instanceof PubSubError);
  t.equal(error?.status, 'NOT_FOUND');
  t.equal(error?.closeCode, 4005);
  t.equal(error?.retryable, false);
  t.equal(subscriber.state, 'closed');
  t.same(errors, [error], 'reported once through onError');
  await subscriber.close(); // harmless after the end
});
