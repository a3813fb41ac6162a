// gRPC and HTTP/1.1 on one port (src/grpc/one-port.ts): REST, a WebSocket streaming pull and a
// gRPC streaming pull at once on one subscription; the connection sniffing's edge cases, over raw
// sockets; and server reflection (grpcurl's way of listing the services).

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { createRequire } from 'node:module';
import net from 'node:net';
import { dirname, join } from 'node:path';
import t from 'tap';
import { waitUntil } from '../helpers/wait.ts';
import { StreamClient } from '../streaming/_ws.ts';
import { ackIdsOf, P, rpc, sleep, startGrpcBroker, subName } from './_client.ts';

const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
/** An empty SETTINGS frame: length 0, type 4, no flags, stream 0. */
const EMPTY_SETTINGS = Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]);

/** Opens a raw connection, writes `bytes` in pieces of `step` bytes, and collects the answer. */
async function rawExchange(port: number, bytes: Buffer, { step = 1, waitMs = 1000 } = {}) {
  const socket = net.connect(port, '127.0.0.1');
  let received = Buffer.alloc(0);
  let closed = false;
  socket.on('data', (chunk) => (received = Buffer.concat([received, chunk])));
  socket.on('error', () => {});
  socket.on('close', () => (closed = true));
  await new Promise((resolve) => socket.once('connect', resolve));
  for (let at = 0; at < bytes.length; at += step) {
    socket.write(bytes.subarray(at, at + step));
    await sleep(2);
  }
  await waitUntil(() => closed || received.length > 0, waitMs, 10);
  await sleep(50);
  return { socket, received: () => received, closed: () => closed };
}

t.test('REST, WebSocket and gRPC streaming pull on one port and one subscription', async (t) => {
  const b = await startGrpcBroker(t);
  const base = `http://127.0.0.1:${b.port}/v1/projects/${P}`;
  const rest = async (method: string, path: string, body?: object) => {
    const response = await fetch(`${base}${path}`, {
      method,
      headers: { 'content-type': 'application/json' },
      body: body && JSON.stringify(body),
    });
    return { status: response.status, body: await response.json() };
  };
  t.equal((await rest('PUT', '/topics/shared', {})).status, 200, 'a topic created over REST');
  await rpc(b.subscriber, 'CreateSubscription', { name: subName('shared-sub'), topic: `projects/${P}/topics/shared` });
  t.equal(
    (await rest('GET', '/subscriptions/shared-sub')).status,
    200,
    'a subscription created over gRPC, read over REST',
  );

  const ws = new StreamClient(`ws://127.0.0.1:${b.port}/v1/projects/${P}/subscriptions/shared-sub:streamingPull`);
  t.teardown(() => ws.terminate());
  await ws.opened;
  ws.send({ streamAckDeadlineSeconds: 60, maxOutstandingMessages: 3 });
  await ws.take((f) => f?.subscriptionProperties, 3000, 'subscriptionProperties');
  const grpcStream = await b.open('shared-sub', { maxOutstandingMessages: '3' });

  const viaRest = await rest('POST', '/topics/shared:publish', {
    messages: Array.from({ length: 5 }, (_, i) => ({ data: Buffer.from(`r${i}`).toString('base64') })),
  });
  const viaGrpc = await b.publish(
    'shared',
    Array.from({ length: 5 }, (_, i) => ({ data: `g${i}` })),
  );
  const published = [...viaRest.body.messageIds, ...viaGrpc];
  t.equal(published.length, 10, 'published over REST and gRPC');

  const wsMessages = (await ws.takeMessages(3)) as { ackId: string; message: { messageId: string } }[];
  const grpcMessages = await grpcStream.takeMessages(3);
  t.ok(await grpcStream.quiet(300), 'each stream holds its three');
  const pulled = await rest('POST', '/subscriptions/shared-sub:pull', { maxMessages: 10 });
  const ids = [
    ...wsMessages.map((m) => m.message.messageId),
    ...grpcMessages.map((m) => m.message.messageId),
    ...pulled.body.receivedMessages.map((m: { message: { messageId: string } }) => m.message.messageId),
  ];
  t.strictSame(ids.sort(), [...published].sort(), 'WebSocket 3 + gRPC 3 + REST pull 4: each message once');

  // Acks on each transport; all settled, nothing comes back after nacks of the acked IDs.
  ws.send({ ackIds: wsMessages.map((m) => m.ackId) });
  grpcStream.write({ ackIds: ackIdsOf(grpcMessages) });
  await rest('POST', '/subscriptions/shared-sub:acknowledge', {
    ackIds: pulled.body.receivedMessages.map((m: { ackId: string }) => m.ackId),
  });
  await ws.roundTrip();
  await grpcStream.roundTrip();
  t.ok(await grpcStream.quiet(300), 'nothing is delivered again');
  t.ok(ws.isOpen && !grpcStream.status, 'both streams are open');
});

t.test('connection sniffing', async (t) => {
  const b = await startGrpcBroker(t);
  const healthy = async (what: string) => {
    const response = await fetch(`http://127.0.0.1:${b.port}/healthz`);
    t.equal(response.status, 200, `the server still answers HTTP after ${what}`);
    t.ok((await rpc(b.publisher, 'ListTopics', { project: `projects/${P}` })) !== undefined, `and gRPC`);
  };

  // The HTTP/2 preface one byte per write: the server answers with its SETTINGS frame.
  const h2 = await rawExchange(b.port, Buffer.concat([PREFACE, EMPTY_SETTINGS]));
  const answer = h2.received();
  t.ok(answer.length >= 9, `the server answered (${answer.length} bytes)`);
  t.equal(answer[3], 4, 'with an HTTP/2 SETTINGS frame (type 4)');
  t.equal(answer.readUInt32BE(5) & 0x7fffffff, 0, 'on stream 0');
  t.notOk(answer.toString('latin1').startsWith('HTTP/1'), 'not an HTTP/1 answer');
  h2.socket.destroy();

  // HTTP/1 requests one byte per write, one of them starting like the preface ("P").
  const get = await rawExchange(b.port, Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
  t.match(get.received().toString(), /^HTTP\/1\.1 200 /, 'GET written byte by byte: 200');
  const body = '{}';
  const put = await rawExchange(
    b.port,
    Buffer.from(
      `PUT /v1/projects/${P}/topics/bytewise HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`,
    ),
  );
  t.match(put.received().toString(), /^HTTP\/1\.1 200 /, 'PUT written byte by byte: 200');
  t.match(await rpc(b.publisher, 'GetTopic', { topic: `projects/${P}/topics/bytewise` }), {
    name: `projects/${P}/topics/bytewise`,
  });

  // A first line that is no HTTP: the HTTP 400 envelope.
  for (const garbage of ['HELLO WORLD\r\n\r\n', 'PRX nonsense\r\n\r\n', 'PRI * HTTP/2.0\r\n\r\nXY\r\n\r\n']) {
    const exchange = await rawExchange(b.port, Buffer.from(garbage), { step: 4 });
    const text = exchange.received().toString();
    t.match(text, /^HTTP\/1\.1 400 /, `${JSON.stringify(garbage)}: HTTP 400`);
    const envelope = JSON.parse(text.slice(text.indexOf('\r\n\r\n') + 4) || '{}');
    t.match(envelope, { error: { code: 400, status: 'INVALID_ARGUMENT' } }, `${JSON.stringify(garbage)}: envelope`);
    exchange.socket.destroy();
  }

  // Connections that close early: before any byte, and halfway into the preface.
  const silent = net.connect(b.port, '127.0.0.1');
  silent.on('error', () => {});
  await new Promise((resolve) => silent.once('connect', resolve));
  silent.destroy();
  const partial = await rawExchange(b.port, PREFACE.subarray(0, 10), { waitMs: 100 });
  partial.socket.destroy();
  const ended = net.connect(b.port, '127.0.0.1');
  ended.on('error', () => {});
  ended.end('PRI * HT');
  await sleep(100);
  await healthy('connections that closed early');
});

t.test('a connection that sends nothing is closed after headersTimeout', async (t) => {
  const b = await startGrpcBroker(t);
  b.app.server.headersTimeout = 500;
  const silent = await rawExchange(b.port, Buffer.alloc(0), { waitMs: 3000 });
  t.ok(silent.closed(), 'a silent connection is closed');
  const partial = await rawExchange(b.port, PREFACE.subarray(0, 8), { waitMs: 3000 });
  t.ok(partial.closed(), 'a connection that stops halfway into the preface is closed');
});

t.test('server reflection lists the Pub/Sub services', async (t) => {
  const b = await startGrpcBroker(t);
  const require = createRequire(import.meta.url);
  const reflectionRoot = join(dirname(require.resolve('@grpc/reflection/package.json')), 'build', 'proto');
  const definition = protoLoader.loadSync('grpc/reflection/v1/reflection.proto', {
    includeDirs: [reflectionRoot],
    keepCase: true,
  });
  const ServerReflection = (grpc.loadPackageDefinition(definition) as any).grpc.reflection.v1.ServerReflection;
  const client = new ServerReflection(b.address, grpc.credentials.createInsecure());
  t.teardown(() => client.close());
  const ask = (request: object) =>
    new Promise<any>((resolve, reject) => {
      const call = client.ServerReflectionInfo();
      call.on('data', (response: any) => {
        resolve(response);
        call.end();
      });
      call.on('error', reject);
      call.write(request);
    });
  const listed = await ask({ list_services: '' });
  const names = listed.list_services_response.service.map((s: { name: string }) => s.name);
  t.ok(names.includes('google.pubsub.v1.Publisher'), 'Publisher is listed');
  t.ok(names.includes('google.pubsub.v1.Subscriber'), 'Subscriber is listed');
  const file = await ask({ file_containing_symbol: 'google.pubsub.v1.Subscriber' });
  const descriptors: Buffer[] = file.file_descriptor_response.file_descriptor_proto;
  t.ok(
    descriptors.some((d) => d.includes('google.pubsub.v1') && d.includes('StreamingPull')),
    'the Subscriber symbol resolves to a file descriptor of google.pubsub.v1 with StreamingPull',
  );
});
