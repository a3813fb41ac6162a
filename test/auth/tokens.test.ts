// Bearer tokens (AUTH_TOKENS_FILE) on every front end of a listening broker: REST, the WebSocket
// upgrade of streaming pull (Authorization header, and the browser forms: a `bearer.<token>`
// subprotocol or `?access_token=`), gRPC metadata (unary calls and StreamingPull), the open
// paths, the principal each call carries in its caller context, and the streaming client
// (src/client) with its token option. Standalone Redis.

import * as grpc from '@grpc/grpc-js';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import WebSocket from 'ws';
import { buildApp } from '../../src/app.ts';
import { PubSubClient, type PubSubError } from '../../src/client/index.ts';
import type { Authentication } from '../../src/auth/authentication.ts';
import type { CallContext } from '../../src/broker/call-context.ts';
import { packageDefinition } from '../../src/grpc/protos.ts';
import { ALICE, ALICE_TOKEN, bearer, ROBOT, ROBOT_TOKEN, tokenAuthentication } from '../helpers/auth.ts';
import { redisTargets, uniquePrefix } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';
import { PullStream, rpc } from '../grpc/_client.ts';

const P = 'auth-project';
const pubsub = (
  grpc.loadPackageDefinition(packageDefinition) as unknown as {
    google: { pubsub: { v1: Record<'Publisher' | 'Subscriber', grpc.ServiceClientConstructor> } };
  }
).google.pubsub.v1;

/** A listening broker authenticating with `authentication`; its log lines are kept. */
async function listening(t: Test, authentication: Authentication) {
  const redis = redisTargets()[0].connect();
  const logLines: string[] = [];
  const logStream = new Writable({
    write(chunk, _encoding, done) {
      logLines.push(String(chunk));
      done();
    },
  });
  const app = await buildApp({
    redis,
    keyPrefix: uniquePrefix('auth'),
    pullWaitMs: 200,
    authentication,
    logger: { level: 'debug', stream: logStream },
    logRequests: true,
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = `127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const clients: grpc.Client[] = [];
  t.teardown(async () => {
    for (const client of clients) client.close();
    await app.close();
    redis.disconnect();
  });
  const rest = async (method: string, path: string, headers: Record<string, string> = {}, body?: unknown) => {
    const response = await fetch(`http://${address}${path}`, {
      method,
      headers: { 'content-type': 'application/json', ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let json: any;
    try {
      json = JSON.parse(text);
    } catch {
      json = text;
    }
    return { status: response.status, body: json, headers: response.headers };
  };
  const grpcClient = (kind: 'Publisher' | 'Subscriber') => {
    const client = new pubsub[kind](address, grpc.credentials.createInsecure());
    clients.push(client);
    return client;
  };
  return { app, address, rest, grpcClient, logLines };
}

/** Records the caller context of every topics.get call of `app`'s broker. */
function callersOfTopicGet(app: { broker: { topics: { get: (caller: CallContext, ...rest: any[]) => unknown } } }) {
  const callers: CallContext[] = [];
  const { topics } = app.broker;
  const get = topics.get.bind(topics);
  topics.get = (caller, ...rest) => {
    callers.push(caller);
    return get(caller, ...rest);
  };
  return callers;
}

const metadataOf = (headers: Record<string, string>) => {
  const metadata = new grpc.Metadata();
  for (const [key, value] of Object.entries(headers)) metadata.set(key, value);
  return metadata;
};

t.test('REST: a call without a valid bearer token is refused with 401 and changes nothing', async (t) => {
  const b = await listening(t, tokenAuthentication(t));
  const topic = `/v1/projects/${P}/topics/topic1`;
  const refusals: [string, Record<string, string>, RegExp][] = [
    ['no Authorization header', {}, /missing required authentication credential/],
    ['an unknown token', bearer('not-a-listed-token-at-all'), /invalid authentication credentials/],
    ['another scheme', { authorization: `Basic ${Buffer.from(`a:${ALICE_TOKEN}`).toString('base64')}` }, /Bearer/],
    ['a token hash instead of the token', bearer('sha256:00'), /invalid authentication credentials/],
  ];
  for (const [what, headers, message] of refusals) {
    const answer = await b.rest('PUT', topic, headers);
    t.match(answer, { status: 401, body: { error: { code: 401, status: 'UNAUTHENTICATED', message } } }, what);
    t.equal(answer.headers.get('www-authenticate'), 'Bearer realm="pubsub"', `${what}: names the scheme`);
  }
  t.equal((await b.rest('GET', topic, bearer(ALICE_TOKEN))).status, 404, 'no topic was created');
  t.equal((await b.rest('GET', `/v1/no/such/route`)).status, 401, 'an unknown route is not revealed either');

  const callers = callersOfTopicGet(b.app);
  t.equal((await b.rest('PUT', topic, bearer(ALICE_TOKEN))).status, 200, 'a plain token of the file works');
  t.equal((await b.rest('GET', topic, bearer(ALICE_TOKEN))).status, 200);
  t.equal(
    (await b.rest('GET', topic, { authorization: `bearer  ${ROBOT_TOKEN}` })).status,
    200,
    'so does a hashed one',
  );
  t.same(
    callers.map((c) => [c.endpoint, c.principal]),
    [
      ['rest', ALICE],
      ['rest', ROBOT],
    ],
    'the caller context carries the principal the token names',
  );
});

t.test('REST: the health routes are open, /metrics and the rest need a token unless listed', async (t) => {
  const closed = await listening(t, tokenAuthentication(t));
  t.equal((await closed.rest('GET', '/healthz')).status, 200, '/healthz is open by default');
  t.equal((await closed.rest('GET', '/readyz')).status, 200, '/readyz is open by default');
  t.equal((await closed.rest('GET', '/metrics')).status, 401, '/metrics needs a token by default');
  t.equal((await closed.rest('GET', '/metrics', bearer(ALICE_TOKEN))).status, 200, 'and answers with one');
  t.equal((await closed.rest('GET', '/openapi.yaml')).status, 401, '/openapi.yaml needs a token by default');

  const open = await listening(t, tokenAuthentication(t, { env: { AUTH_OPEN_PATHS: '/metrics,/openapi.yaml' } }));
  t.equal((await open.rest('GET', '/metrics')).status, 200, 'AUTH_OPEN_PATHS opens /metrics');
  t.equal((await open.rest('GET', '/openapi.yaml')).status, 200, 'and /openapi.yaml');
  t.equal((await open.rest('GET', '/healthz')).status, 401, 'and only what it lists');
});

/** Opens a WebSocket; resolves with the socket once open, or the HTTP status of the refused upgrade. */
function upgrade(url: string, options: { headers?: Record<string, string>; protocols?: string[] } = {}) {
  return new Promise<{ socket?: WebSocket; status?: number; body?: string }>((resolve) => {
    const socket = new WebSocket(url, options.protocols ?? [], { headers: options.headers });
    socket.on('open', () => resolve({ socket }));
    socket.on('unexpected-response', (_request, response) => {
      let body = '';
      response.on('data', (chunk: Buffer) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode, body }));
    });
    socket.on('error', () => resolve({}));
  });
}

/** The first frame a stream answers (subscriptionProperties) after its first request. */
async function firstFrame(socket: WebSocket, subscription: string): Promise<any> {
  const frame = new Promise<any>((resolve) => socket.once('message', (data) => resolve(JSON.parse(String(data)))));
  socket.send(JSON.stringify({ subscription, streamAckDeadlineSeconds: 60 }));
  return frame;
}

t.test('WebSocket: the upgrade takes the header, or the browser forms, and never logs the token', async (t) => {
  const b = await listening(t, tokenAuthentication(t));
  await b.rest('PUT', `/v1/projects/${P}/topics/topic1`, bearer(ALICE_TOKEN));
  await b.rest('PUT', `/v1/projects/${P}/subscriptions/sub1`, bearer(ALICE_TOKEN), {
    topic: `projects/${P}/topics/topic1`,
  });
  const url = `ws://${b.address}/v1/projects/${P}/subscriptions/sub1:streamingPull`;
  const opened: WebSocket[] = [];
  t.teardown(() => {
    for (const socket of opened) socket.terminate();
  });

  const refused: [string, Parameters<typeof upgrade>][] = [
    ['no token', [url]],
    ['a wrong header', [url, { headers: bearer('not-a-listed-token-at-all') }]],
    ['a wrong subprotocol token', [url, { protocols: ['pubsub', 'bearer.not-a-listed-token-at-all'] }]],
    ['a wrong query token', [`${url}?access_token=not-a-listed-token-at-all`]],
  ];
  for (const [what, args] of refused) {
    const answer = await upgrade(...args);
    t.notOk(answer.socket, `${what}: no socket`);
    t.equal(answer.status, 401, `${what}: 401`);
    t.match(JSON.parse(answer.body ?? '{}'), { error: { code: 401, status: 'UNAUTHENTICATED' } }, `${what}: envelope`);
  }

  const accepted: [string, Parameters<typeof upgrade>, string][] = [
    ['the Authorization header', [url, { headers: bearer(ALICE_TOKEN) }], ''],
    ['a bearer.<token> subprotocol', [url, { protocols: ['pubsub', `bearer.${ROBOT_TOKEN}`] }], 'pubsub'],
    ['the access_token query parameter', [`${url}?access_token=${ALICE_TOKEN}`], ''],
  ];
  for (const [what, args, protocol] of accepted) {
    const { socket } = await upgrade(...args);
    t.ok(socket, `${what}: the upgrade succeeds`);
    if (!socket) continue;
    opened.push(socket);
    t.equal(socket.protocol, protocol, `${what}: the broker answers subprotocol "${protocol}", never the token`);
    t.ok((await firstFrame(socket, `projects/${P}/subscriptions/sub1`)).subscriptionProperties, `${what}: it streams`);
  }
  const log = b.logLines.join('');
  t.match(log, /access_token=<redacted>/, 'the request log shows the query without its token');
  for (const token of [ALICE_TOKEN, ROBOT_TOKEN, 'not-a-listed-token-at-all'])
    t.notOk(log.includes(token), 'no token appears in the log');
});

t.test('gRPC: calls and streams need authorization metadata', async (t) => {
  const b = await listening(t, tokenAuthentication(t));
  const publisher = b.grpcClient('Publisher');
  const subscriber = b.grpcClient('Subscriber');
  const topic = `projects/${P}/topics/grpc-topic`;
  const subscription = `projects/${P}/subscriptions/grpc-sub`;

  for (const [what, headers] of [
    ['no metadata', {}],
    ['an unknown token', bearer('not-a-listed-token-at-all')],
    ['another scheme', { authorization: `Basic ${ALICE_TOKEN}` }],
  ] as [string, Record<string, string>][]) {
    const error = await rpc(publisher, 'CreateTopic', { name: topic }, metadataOf(headers)).then(
      () => undefined,
      (e: grpc.ServiceError) => e,
    );
    t.equal(error?.code, grpc.status.UNAUTHENTICATED, `${what}: UNAUTHENTICATED (16)`);
  }
  t.equal((await b.rest('GET', `/v1/${topic}`, bearer(ALICE_TOKEN))).status, 404, 'nothing was created');

  const callers = callersOfTopicGet(b.app);
  const authed = metadataOf(bearer(ROBOT_TOKEN));
  await rpc(publisher, 'CreateTopic', { name: topic }, authed);
  await rpc(publisher, 'GetTopic', { topic }, authed);
  t.same(
    callers.map((c) => [c.endpoint, c.principal]),
    [['grpc', ROBOT]],
    'the caller context carries the principal',
  );
  await rpc(subscriber, 'CreateSubscription', { name: subscription, topic }, authed);

  const refused = new PullStream(subscriber);
  refused.write({ subscription, streamAckDeadlineSeconds: 60 });
  t.equal((await refused.waitEnd()).code, grpc.status.UNAUTHENTICATED, 'StreamingPull without a token: 16');

  const call = (
    subscriber as unknown as { StreamingPull(m: grpc.Metadata): grpc.ClientDuplexStream<object, any> }
  ).StreamingPull(metadataOf(bearer(ALICE_TOKEN)));
  const frame = new Promise<any>((resolve) => call.once('data', resolve));
  call.on('error', () => {});
  call.write({ subscription, streamAckDeadlineSeconds: 60 });
  t.ok((await frame).subscriptionProperties, 'StreamingPull with a token streams');
  call.cancel();
});

t.test('the streaming client (src/client) with a token publishes and streams', async (t) => {
  const b = await listening(t, tokenAuthentication(t));
  await b.rest('PUT', `/v1/projects/${P}/topics/client-topic`, bearer(ALICE_TOKEN));
  await b.rest('PUT', `/v1/projects/${P}/subscriptions/client-sub`, bearer(ALICE_TOKEN), {
    topic: `projects/${P}/topics/client-topic`,
  });
  const endpoint = `http://${b.address}`;

  const anonymous = new PubSubClient({ endpoint, projectId: P, WebSocket });
  const refused = await anonymous.publish('client-topic', [{ data: 'x' }]).then(
    () => undefined,
    (error: PubSubError) => error,
  );
  t.equal(refused?.status, 'UNAUTHENTICATED', 'without a token, publish is refused');

  const client = new PubSubClient({ endpoint, projectId: P, WebSocket, token: ALICE_TOKEN });
  const [id] = await client.publish('client-topic', [{ data: 'with a token' }]);
  const received: string[] = [];
  const subscriber = client.subscribe('client-sub', (message) => {
    received.push(message.text());
    message.ack();
  });
  t.ok(await waitUntil(() => received.length === 1, 15_000), 'the stream, opened with the token, delivers');
  t.same(received, ['with a token']);
  t.ok(id, 'publish answered a message ID');
  await subscriber.close();

  t.throws(
    () => new PubSubClient({ endpoint, projectId: P, token: 'has+slash/and=' }),
    /token may hold only letters, digits and -._~/,
    'a token a subprotocol cannot carry is refused at once',
  );
});
