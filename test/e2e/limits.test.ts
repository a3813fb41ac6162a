// The limits that protect the broker (src/broker/limits.ts), reached through every front end:
//   - topics, subscriptions and snapshots per project, subscriptions per topic: RESOURCE_EXHAUSTED
//     (429 over REST, code 8 over gRPC) with a message naming the setting; exact under concurrent
//     creates; a refused subscription leaves no data behind; updates, deletes and detaches work
//     at the limit and give places back;
//   - open streams per subscription and per node (gRPC and WebSocket), long polls per node;
//   - the per-principal request rate limit, one for every front end, its memory bounded;
//   - request sizes over gRPC (over REST: routes/matrix.test.ts, publish-validation.test.ts), and
//     the bytes of request bodies an HTTP server holds at once.
// Connections and file descriptors of a real broker process: limits-process.test.ts.

import { status as grpcStatus } from '@grpc/grpc-js';
import { type AddressInfo, connect, type Socket } from 'node:net';
import t, { type Test } from 'tap';
import { PUBLISH_BODY_LIMIT } from '../../routes/limits.ts';
import { buildApp } from '../../src/app.ts';
import { RequestRateLimiter } from '../../src/broker/limits.ts';
import { parseResourceName } from '../../src/broker/names.ts';
import { StreamClient } from '../streaming/_ws.ts';
import { redisTargets, uniquePrefix } from '../helpers/redis.ts';
import { sleep } from '../helpers/stream-responses.ts';
import { waitUntil } from '../helpers/wait.ts';
import { P, rpc, rpcError, startGrpcBroker, subName, topicName } from '../grpc/_client.ts';

const v1 = `/v1/projects/${P}`;

function refused(t: Test, reply: { status: number; body: any }, setting: string, what: string) {
  t.equal(reply.status, 429, `${what}: 429`);
  t.equal(reply.body?.error?.status, 'RESOURCE_EXHAUSTED', `${what}: RESOURCE_EXHAUSTED`);
  t.equal(reply.body?.error?.code, 429, `${what}: the envelope's code`);
  t.match(reply.body?.error?.message, setting, `${what}: the message names ${setting}`);
}

t.test('topics per project: the create past the limit is refused, over REST and gRPC', async (t) => {
  const b = await startGrpcBroker(t, { limits: { topicsPerProject: 3 } });
  for (const id of ['top1', 'top2', 'top3']) t.equal((await b.api('PUT', `${v1}/topics/${id}`, {})).status, 200);
  refused(t, await b.api('PUT', `${v1}/topics/top4`, {}), 'MAX_TOPICS_PER_PROJECT', 'REST');
  const error = await rpcError(b.publisher, 'CreateTopic', { name: topicName('top4') });
  t.equal(error.code, grpcStatus.RESOURCE_EXHAUSTED, 'gRPC: code 8');
  t.match(error.details, /limit of 3 topics \(MAX_TOPICS_PER_PROJECT\)/);
  t.equal((await b.api('GET', `${v1}/topics/top4`)).status, 404, 'nothing was created');

  t.equal((await b.api('PUT', '/v1/projects/other/topics/top4', {})).status, 200, 'another project has its own count');
  const update = await b.api('PATCH', `${v1}/topics/top1`, { topic: { labels: { a: 'b' } }, updateMask: 'labels' });
  t.equal(update.status, 200, 'an update at the limit is no create');
  t.equal((await b.api('PUT', `${v1}/topics/top1`, {})).status, 409, 'an existing name is still ALREADY_EXISTS');
  t.equal((await b.api('DELETE', `${v1}/topics/top1`)).status, 200);
  t.equal((await b.api('PUT', `${v1}/topics/top4`, {})).status, 200, 'a delete gives its place back');
});

t.test('subscriptions per topic and per project; a refused one leaves no data behind', async (t) => {
  const b = await startGrpcBroker(t, { limits: { subscriptionsPerTopic: 2, subscriptionsPerProject: 3 } });
  await b.topic('top-a');
  await b.topic('top-b');
  const sub = (id: string, topic: string) =>
    b.api('PUT', `${v1}/subscriptions/${id}`, { topic: `projects/${P}/topics/${topic}` });
  t.equal((await sub('sub-a1', 'top-a')).status, 200);
  t.equal((await sub('sub-a2', 'top-a')).status, 200);
  const overTopic = await sub('sub-a3', 'top-a');
  refused(t, overTopic, 'MAX_SUBSCRIPTIONS_PER_TOPIC', 'per topic');
  t.match(overTopic.body.error.message, `Topic projects/${P}/topics/top-a has reached its limit of 2 subscriptions`);
  const error = await rpcError(b.subscriber, 'CreateSubscription', {
    name: subName('sub-a3'),
    topic: topicName('top-a'),
  });
  t.equal(error.code, grpcStatus.RESOURCE_EXHAUSTED, 'gRPC: code 8');

  const { redis, keys } = b.app.broker.ctx;
  const topic = await b.app.broker.topics.read(parseResourceName('topics', topicName('top-a')));
  t.equal(await redis.hlen(keys.topicData(topic.uid).attached), 2, 'the refused subscription is not attached');
  t.equal(await redis.zcard(keys.pendingCleanups), 0, 'and nothing of it waits for clean-up');

  t.equal((await sub('sub-b1', 'top-b')).status, 200, 'another topic has room');
  refused(t, await sub('sub-b2', 'top-b'), 'MAX_SUBSCRIPTIONS_PER_PROJECT', 'per project');

  // Detached, a subscription no longer counts against its topic (it still does in its project).
  t.equal((await b.api('POST', `${v1}/subscriptions/sub-a1:detach`)).status, 200);
  t.equal((await b.api('DELETE', `${v1}/subscriptions/sub-b1`)).status, 200);
  t.equal((await sub('sub-a3', 'top-a')).status, 200, 'a detach gives the topic a place back');
  const update = await b.api('PATCH', `${v1}/subscriptions/sub-a2`, {
    subscription: { ackDeadlineSeconds: 30 },
    updateMask: 'ackDeadlineSeconds',
  });
  t.equal(update.status, 200, 'an update at the limits is no create');
});

t.test('snapshots per project', async (t) => {
  const b = await startGrpcBroker(t, { limits: { snapshotsPerProject: 1 } });
  await b.topic('top');
  await b.subscription('sub', 'top');
  const snapshot = (id: string) =>
    b.api('PUT', `${v1}/snapshots/${id}`, { subscription: `projects/${P}/subscriptions/sub` });
  t.equal((await snapshot('snap-one')).status, 200);
  refused(t, await snapshot('snap-two'), 'MAX_SNAPSHOTS_PER_PROJECT', 'second snapshot');
  const { redis, keys } = b.app.broker.ctx;
  t.equal(await redis.zcard(keys.pendingCleanups), 0, 'nothing was captured for it');
  t.equal((await b.api('DELETE', `${v1}/snapshots/snap-one`)).status, 200);
  t.equal((await snapshot('snap-two')).status, 200, 'a delete gives its place back');
});

t.test('concurrent creates never pass a limit: it is checked with the compare-and-set', async (t) => {
  const b = await startGrpcBroker(t, { limits: { topicsPerProject: 5, subscriptionsPerTopic: 4 } });
  const topics = await Promise.all(
    Array.from({ length: 20 }, (_, i) => b.api('PUT', `/v1/projects/race/topics/top${i}`, {})),
  );
  t.equal(topics.filter((reply) => reply.status === 200).length, 5, 'five topics created');
  t.equal(topics.filter((reply) => reply.status === 429).length, 15, 'the others refused');
  const listed = await b.api('GET', '/v1/projects/race/topics?pageSize=100');
  t.equal(listed.body.topics.length, 5);

  const subscriptions = await Promise.all(
    Array.from({ length: 12 }, (_, i) =>
      b.api('PUT', `/v1/projects/race/subscriptions/sub${i}`, { topic: listed.body.topics[0].name }),
    ),
  );
  t.equal(subscriptions.filter((reply) => reply.status === 200).length, 4, 'four subscriptions of the topic');
  t.equal(subscriptions.filter((reply) => reply.status === 429).length, 8);
  const { redis, keys } = b.app.broker.ctx;
  const topic = await b.app.broker.topics.read(parseResourceName('topics', listed.body.topics[0].name));
  t.equal(await redis.hlen(keys.topicData(topic.uid).attached), 4, 'only those are attached');
});

t.test('open streams per subscription and per node, over gRPC and WebSocket', async (t) => {
  const b = await startGrpcBroker(t, { limits: { streams: 3, streamsPerSubscription: 2 } });
  await b.topic('top');
  await b.subscription('sub-a', 'top');
  await b.subscription('sub-b', 'top');
  const a1 = await b.open('sub-a');
  await b.open('sub-a');
  const third = b.stream();
  third.write({ subscription: subName('sub-a'), streamAckDeadlineSeconds: 60 });
  const perSubscription = await third.waitEnd();
  t.equal(perSubscription.code, grpcStatus.RESOURCE_EXHAUSTED, 'a third stream of a: code 8 (clients retry it)');
  t.match(perSubscription.details, /MAX_STREAMS_PER_SUBSCRIPTION/);

  const ws = (sub: string) =>
    new StreamClient(`ws://127.0.0.1:${b.port}/v1/projects/${P}/subscriptions/${sub}:streamingPull`);
  const overWs = ws('sub-a');
  await overWs.opened;
  overWs.send({ streamAckDeadlineSeconds: 60 });
  const closedWs = await overWs.waitClose();
  t.equal(closedWs.code, 4000 + grpcStatus.RESOURCE_EXHAUSTED, 'over WebSocket: close code 4008');
  t.match(closedWs.reason, /RESOURCE_EXHAUSTED/);

  await b.open('sub-b');
  const fourth = b.stream();
  const perNode = await fourth.waitEnd();
  t.equal(perNode.code, grpcStatus.RESOURCE_EXHAUSTED, 'a fourth stream on the node: refused before its first request');
  t.match(perNode.details, /MAX_STREAMS\)/);
  const overWsNode = ws('sub-b');
  await overWsNode.opened;
  t.equal((await overWsNode.waitClose()).code, 4008, 'and over WebSocket');

  // Unary calls go on meanwhile; a closed stream gives its place back.
  const got = await rpc(b.publisher, 'GetTopic', { topic: topicName('top') });
  t.equal(got.name, topicName('top'), 'unary calls are served meanwhile');
  a1.cancel();
  t.ok(await waitUntil(async () => b.sessions() === 2, 3000, 20), 'the cancelled stream is gone');
  const again = await b.open('sub-a');
  t.ok(again, 'a stream opens once another has closed');
});

t.test('long polls per node: the one past the limit is refused at once; others are served', async (t) => {
  const b = await startGrpcBroker(t, { limits: { longPolls: 2 }, pullWaitMs: 30_000 });
  await b.topic('top');
  await b.subscription('sub', 'top');
  const waiting = new AbortController();
  const longPoll = () =>
    fetch(`http://127.0.0.1:${b.port}${v1}/subscriptions/sub:pull`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ maxMessages: 10 }),
      signal: waiting.signal,
    }).catch(() => undefined);
  const polls = [longPoll(), longPoll()];
  const places = (b.app.broker.delivery as unknown as { options: { longPolls: { inUse: number } } }).options.longPolls;
  t.ok(await waitUntil(async () => places.inUse === 2, 5000, 10), 'two pulls wait');

  const third = await b.api('POST', `${v1}/subscriptions/sub:pull`, { maxMessages: 10 });
  refused(t, third, 'MAX_LONG_POLLS', 'a third long poll');
  const overGrpc = await rpcError(b.subscriber, 'Pull', { subscription: subName('sub'), maxMessages: 10 });
  t.equal(overGrpc.code, grpcStatus.RESOURCE_EXHAUSTED, 'over gRPC too');
  const immediate = await b.api('POST', `${v1}/subscriptions/sub:pull`, { maxMessages: 10, returnImmediately: true });
  t.equal(immediate.status, 200, 'a pull that does not wait is served');
  t.equal((await b.api('GET', `${v1}/topics/top`)).status, 200, 'and other calls');

  waiting.abort();
  await Promise.all(polls);
  t.ok(await waitUntil(async () => places.inUse === 0, 5000, 10), 'a pull that ends gives its place back');
});

t.test('the request rate limit: one per caller, for every front end', async (t) => {
  const b = await startGrpcBroker(t, { limits: { requestsPerSecond: 0.001 } });
  const first = await b.app.inject({ method: 'GET', url: `${v1}/topics` });
  t.equal(first.statusCode, 200, 'the first request passes (a burst of one)');
  const second = await b.app.inject({ method: 'GET', url: `${v1}/topics` });
  t.equal(second.statusCode, 429);
  t.match(JSON.parse(second.body).error, { status: 'RESOURCE_EXHAUSTED', message: /RATE_LIMIT_PER_SECOND/ });
  const elsewhere = await b.app.inject({ method: 'GET', url: `${v1}/topics`, remoteAddress: '10.1.2.3' });
  t.equal(elsewhere.statusCode, 200, 'without authentication, each address has its own budget');
  t.equal((await b.app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200, 'probes are not counted');

  // The gRPC client connects from 127.0.0.1 too: the same caller, the same budget.
  const overGrpc = await rpcError(b.publisher, 'ListTopics', { project: `projects/${P}` });
  t.equal(overGrpc.code, grpcStatus.RESOURCE_EXHAUSTED, 'gRPC shares the limit');
  const stream = b.stream();
  t.equal((await stream.waitEnd()).code, grpcStatus.RESOURCE_EXHAUSTED, 'so does opening a stream');
  const ws = new StreamClient(`ws://127.0.0.1:${b.port}${v1}/subscriptions/s:streamingPull`);
  await ws.opened.catch(() => {});
  t.equal(ws.httpRefusal?.status, 429, 'and the WebSocket upgrade');
});

t.test('the rate limiter refills, tells principals apart and remembers a bounded number of callers', async (t) => {
  let now = 0;
  const limiter = new RequestRateLimiter(2, () => now, 100);
  const alice = { principal: 'user:alice', endpoint: 'rest' as const, region: '' };
  limiter.admit(alice);
  limiter.admit(alice);
  t.throws(() => limiter.admit(alice), { message: /RATE_LIMIT_PER_SECOND/ }, 'a burst of two, then refused');
  limiter.admit({ ...alice, principal: 'user:bob' });
  now += 500;
  limiter.admit(alice);
  t.throws(() => limiter.admit(alice), { message: /RATE_LIMIT_PER_SECOND/ }, 'half a second refills one');
  for (let i = 0; i < 10_000; i++) limiter.admit({ ...alice, principal: `user:${i}` });
  t.equal(limiter.tracked, 100, 'at most 100 callers remembered');
  t.doesNotThrow(() => limiter.admit(alice), 'a forgotten caller starts with a full bucket');
});

t.test(
  'request sizes over gRPC: a message past 16 MiB is refused by the gRPC layer; the broker serves on',
  async (t) => {
    const b = await startGrpcBroker(t);
    await b.topic('top');
    const data = Buffer.alloc(PUBLISH_BODY_LIMIT + 1, 'x');
    const error = await rpcError(b.publisher, 'Publish', { topic: topicName('top'), messages: [{ data }] });
    t.equal(error.code, grpcStatus.RESOURCE_EXHAUSTED, 'RESOURCE_EXHAUSTED (grpc-js: larger than max)');
    const overData = await rpcError(b.publisher, 'Publish', {
      topic: topicName('top'),
      messages: [{ data: Buffer.alloc(10_000_001, 'x') }],
    });
    t.equal(overData.code, grpcStatus.INVALID_ARGUMENT, "within it, Pub/Sub's own publish limit: INVALID_ARGUMENT");
    const published = await rpc(b.publisher, 'Publish', {
      topic: topicName('top'),
      messages: [{ data: Buffer.from('ok') }],
    });
    t.equal(published.messageIds.length, 1, 'a normal publish goes on');
  },
);

t.test('request bodies in flight: one that does not fit the budget is refused unread', async (t) => {
  const redis = redisTargets()[0].connect();
  const app = await buildApp({ redis, keyPrefix: uniquePrefix('bodies'), maxBodyBytesInFlight: 1024 * 1024 });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as AddressInfo).port;
  const sockets: Socket[] = [];
  t.teardown(async () => {
    for (const socket of sockets) socket.destroy();
    await app.close();
    redis.disconnect();
  });
  t.equal((await app.inject({ method: 'PUT', url: `${v1}/topics/top` })).statusCode, 200);
  /** Sends the headers of a publish declaring `length` bytes and `body` of it; resolves with the first answer. */
  const publish = (length: number, body: string) => {
    const socket = connect(port, '127.0.0.1', () =>
      socket.write(
        `POST ${v1}/topics/top:publish HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${length}\r\n\r\n${body}`,
      ),
    );
    sockets.push(socket);
    socket.on('error', () => {});
    const answer = new Promise<string>((resolve) => socket.once('data', (chunk) => resolve(chunk.toString())));
    return { socket, answer };
  };
  const slow = publish(700_000, '{"messages":[{"data":"');
  await sleep(200);
  const refusedAnswer = await publish(700_000, '').answer;
  t.match(refusedAnswer, /^HTTP\/1.1 429/, 'a second large body does not fit: 429');
  t.match(
    refusedAnswer,
    /MAX_BODY_MIB_IN_FLIGHT.*"status":"RESOURCE_EXHAUSTED"/s,
    'RESOURCE_EXHAUSTED, naming the setting',
  );
  t.equal((await app.inject({ method: 'GET', url: `${v1}/topics/top` })).statusCode, 200, 'calls without a body go on');
  slow.socket.destroy();
  const body = JSON.stringify({ messages: [{ data: Buffer.from('hi').toString('base64') }] });
  let answer = '';
  await waitUntil(async () => (answer = await publish(body.length, body).answer).startsWith('HTTP/1.1 200'), 5000, 50);
  t.match(answer, /^HTTP\/1.1 200/, 'a body abandoned gives its bytes back');
  const large = JSON.stringify({ messages: [{ data: Buffer.alloc(500_000).toString('base64') }] });
  for (const time of ['first', 'second']) {
    t.match(await publish(large.length, large).answer, /^HTTP\/1.1 200/, `a large body answered (${time})`);
  }
});
