// TLS (TLS_CERT_FILE, TLS_KEY_FILE) on the one port, with a certificate the test makes and bearer
// tokens: HTTPS with Node's client (no ALPN) and with curl's ALPN offer (h2 and http/1.1: it gets
// http/1.1), WSS streaming pull, and gRPC over TLS (ALPN h2) with the official client, its token
// sent as call credentials. Standalone Redis.

import { client, PROJECT } from '../grpc/_official.ts';
import * as grpc from '@grpc/grpc-js';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { request } from 'node:https';
import type { AddressInfo } from 'node:net';
import { promisify } from 'node:util';
import t from 'tap';
import WebSocket from 'ws';
import { buildApp } from '../../src/app.ts';
import { ALICE_TOKEN, bearer, tokenAuthentication } from '../helpers/auth.ts';
import { redisTargets, uniquePrefix } from '../helpers/redis.ts';
import { makeCertificate } from '../helpers/tls.ts';
import { waitUntil } from '../helpers/wait.ts';

const certificate = makeCertificate(t);
const redis = redisTargets()[0].connect();
const app = await buildApp({
  redis,
  keyPrefix: uniquePrefix('tls'),
  pullWaitMs: 200,
  authentication: tokenAuthentication(t),
  tls: { cert: certificate.cert, key: certificate.key },
});
await app.listen({ port: 0, host: '127.0.0.1' });
const port = (app.server.address() as AddressInfo).port;
t.teardown(async () => {
  await app.close();
  redis.disconnect();
});

/** An HTTPS request trusting the test certificate; status, body and the protocol ALPN agreed on. */
function https(method: string, path: string, headers: Record<string, string>, options: { alpn?: string[] } = {}) {
  return new Promise<{ status: number; body: string; alpn: string | false | null }>((resolve, reject) => {
    // Node's https offers no ALPN unless told; its types do not list that TLS option.
    const tlsOptions = { ca: certificate.cert, ALPNProtocols: options.alpn } as object;
    const req = request({ host: 'localhost', port, method, path, headers, agent: false, ...tlsOptions }, (response) => {
      let body = '';
      response.on('data', (chunk) => (body += chunk));
      response.on('end', () =>
        resolve({
          status: response.statusCode ?? 0,
          body,
          alpn: (response.socket as import('node:tls').TLSSocket).alpnProtocol,
        }),
      );
    });
    req.on('error', reject);
    req.end();
  });
}

t.test('HTTPS: REST with a token, whether the client offers ALPN or not', async (t) => {
  const plain = await https('PUT', `/v1/projects/${PROJECT}/topics/tls-topic`, bearer(ALICE_TOKEN));
  t.equal(plain.status, 200, 'Node https (no ALPN): the call succeeds');
  t.equal(plain.alpn, false, 'no protocol was negotiated');
  const offered = await https('GET', `/v1/projects/${PROJECT}/topics/tls-topic`, bearer(ALICE_TOKEN), {
    alpn: ['h2', 'http/1.1'],
  });
  t.equal(offered.status, 200, 'offering h2 and http/1.1, as curl and browsers do: the call succeeds');
  t.equal(offered.alpn, 'http/1.1', 'over http/1.1');
  t.equal((await https('GET', `/v1/projects/${PROJECT}/topics/tls-topic`, {})).status, 401, 'still authenticated');
});

const CURL = '/usr/bin/curl';
t.test('HTTPS with curl', { skip: !existsSync(CURL) && `${CURL} is not installed` }, async (t) => {
  const { stdout } = await promisify(execFile)(CURL, [
    '-s',
    '--cacert',
    certificate.certFile,
    '-H',
    `Authorization: Bearer ${ALICE_TOKEN}`,
    '-w',
    ' %{http_code} %{http_version}',
    `https://localhost:${port}/v1/projects/${PROJECT}/topics/tls-topic`,
  ]);
  t.match(
    stdout,
    /"name":"projects\/grpc-project\/topics\/tls-topic".* 200 1\.1$/,
    'curl gets the topic over HTTP/1.1',
  );
});

t.test('WSS: streaming pull over TLS with a token', async (t) => {
  const socket = new WebSocket(`wss://localhost:${port}/v1/projects/${PROJECT}/subscriptions/tls-sub:streamingPull`, {
    headers: bearer(ALICE_TOKEN),
    ca: certificate.cert,
  });
  t.teardown(() => socket.terminate());
  await new Promise((resolve, reject) => {
    socket.once('open', resolve);
    socket.once('error', reject);
  });
  const frame = new Promise<any>((resolve) => socket.once('message', (data) => resolve(JSON.parse(String(data)))));
  socket.send(
    JSON.stringify({ subscription: `projects/${PROJECT}/subscriptions/tls-sub`, streamAckDeadlineSeconds: 60 }),
  );
  t.match(await frame, { error: { status: 'NOT_FOUND' } }, 'the stream answers (an unknown subscription here)');
});

/** The official client over gRPC with TLS, trusting the test certificate, sending `token`. */
function officialClient(token: string) {
  const callCredentials = grpc.credentials.createFromMetadataGenerator((_params, callback) => {
    const metadata = new grpc.Metadata();
    metadata.set('authorization', `Bearer ${token}`);
    callback(null, metadata);
  });
  return new client.PubSub({
    projectId: PROJECT,
    apiEndpoint: `localhost:${port}`,
    emulatorMode: false,
    sslCreds: grpc.credentials.combineChannelCredentials(grpc.credentials.createSsl(certificate.cert), callCredentials),
  });
}

t.test('gRPC over TLS: the official client with a token publishes and streams', async (t) => {
  const pubsub = officialClient(ALICE_TOKEN);
  t.teardown(() => pubsub.close());
  const [topic] = await pubsub.createTopic('tls-grpc-topic');
  const [subscription] = await topic.createSubscription('tls-grpc-sub');
  const received: string[] = [];
  subscription.on('message', (message) => {
    received.push(message.data.toString());
    message.ack();
  });
  subscription.on('error', (error) => t.fail(`subscriber error: ${error.message}`));
  t.teardown(() => subscription.close());
  await topic.publishMessage({ data: Buffer.from('over tls') });
  t.ok(await waitUntil(() => received.length === 1, 15_000), 'the message arrives over a TLS stream');
  t.same(received, ['over tls']);

  const stranger = officialClient('not-a-listed-token-at-all');
  t.teardown(() => stranger.close());
  const error = await stranger.getTopics().then(
    () => undefined,
    (e: { code?: number }) => e,
  );
  t.equal(error?.code, grpc.status.UNAUTHENTICATED, 'an unknown token: UNAUTHENTICATED');
});
