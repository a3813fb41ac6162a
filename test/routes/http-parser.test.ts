// Requests that Node's HTTP parser refuses never reach a route, so no HTTP client can send them:
// this test writes raw bytes over TCP to a listening app. Each must answer the Google error
// envelope (never Fastify's {"error":"Bad Request","statusCode":400}) with the status Node
// itself would answer (400, 431 for oversized headers, 413 for oversized chunk extensions, 408
// when the request does not arrive in time), close the connection, change nothing and log no
// error. A method the parser knows but no route has (PROPFIND) gets the not-found envelope.

import { connect, type AddressInfo } from 'node:net';
import t from 'tap';
import { buildApp } from '../../src/app.ts';
import { redisTargets, uniquePrefix } from '../helpers/redis.ts';

const P = 'raw-project';
const TOPIC = `/v1/projects/${P}/topics/raw-topic`;
const SUB = `/v1/projects/${P}/subscriptions/raw-sub`;

interface RawAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
  /** The server closed the connection. */
  closed: boolean;
}

/** Sends `bytes` on a new connection; reads until the server closes it or `waitMs` pass. */
function sendRaw(port: number, bytes: string | Buffer, waitMs = 2000): Promise<RawAnswer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let closed = false;
    const finish = () => {
      clearTimeout(timer);
      socket.destroy();
      const text = Buffer.concat(chunks).toString('latin1');
      const split = text.indexOf('\r\n\r\n');
      if (split === -1) return reject(new Error(`no HTTP answer: ${JSON.stringify(text.slice(0, 200))}`));
      const [statusLine, ...headerLines] = text.slice(0, split).split('\r\n');
      const headers = Object.fromEntries(
        headerLines.map((line) => [
          line.slice(0, line.indexOf(':')).toLowerCase(),
          line.slice(line.indexOf(':') + 1).trim(),
        ]),
      );
      resolve({ status: Number(statusLine.split(' ')[1]), headers, body: text.slice(split + 4), closed });
    };
    const timer = setTimeout(finish, waitMs);
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('end', () => {
      closed = true;
      finish();
    });
    // The server may reset a connection it refuses while the client still sends.
    socket.on('error', () => {});
    socket.on('close', () => {
      closed = true;
      finish();
    });
    socket.write(bytes);
  });
}

t.test('requests the HTTP parser refuses', async (t) => {
  const redis = redisTargets()[0].connect();
  const logged: { level: number; msg: string }[] = [];
  const app = await buildApp({
    redis,
    keyPrefix: uniquePrefix('http-parser'),
    logger: { level: 'warn', stream: { write: (line: string) => void logged.push(JSON.parse(line)) } },
  });
  // A request not received in time is found by a check every connectionsCheckingInterval (a
  // createServer option, read when the server starts listening): quick, for the 408 case.
  Object.assign(app.server, { connectionsCheckingInterval: 50, headersTimeout: 300 });
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(async () => {
    await app.close();
    redis.disconnect();
  });
  const port = (app.server.address() as AddressInfo).port;
  const inject = async (method: 'PUT' | 'POST' | 'GET', url: string, body?: unknown) => {
    const response = await app.inject({ method, url, ...(body === undefined ? {} : { payload: body as object }) });
    return { status: response.statusCode, body: response.json() };
  };
  t.equal((await inject('PUT', TOPIC, {})).status, 200, 'topic');
  t.equal((await inject('PUT', SUB, { topic: `projects/${P}/topics/raw-topic` })).status, 200, 'subscription');

  const refused = async (
    what: string,
    bytes: string | Buffer,
    status: number,
    canonical: string,
    message: string,
    waitMs?: number,
  ) => {
    const answer = await sendRaw(port, bytes, waitMs);
    t.strictSame(
      {
        status: answer.status,
        contentType: answer.headers['content-type'],
        contentLength: Number(answer.headers['content-length']),
        connection: answer.headers.connection,
        closed: answer.closed,
        body: JSON.parse(answer.body),
      },
      {
        status,
        contentType: 'application/json; charset=utf-8',
        contentLength: Buffer.byteLength(answer.body),
        connection: 'close',
        closed: true,
        body: { error: { code: status, message, status: canonical } },
      },
      what,
    );
  };
  const malformed = (what: string, bytes: string | Buffer, reason: string) =>
    refused(what, bytes, 400, 'INVALID_ARGUMENT', `Malformed HTTP request: ${reason}.`);

  // The raw client itself works: a well-formed request is answered as usual.
  const plain = await sendRaw(port, `GET ${TOPIC} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  t.strictSame(
    { status: plain.status, body: JSON.parse(plain.body) },
    { status: 200, body: { name: `projects/${P}/topics/raw-topic`, state: 'ACTIVE' } },
    'a well-formed request over the raw socket',
  );

  await malformed('unknown method FOO', `FOO ${TOPIC} HTTP/1.1\r\nHost: x\r\n\r\n`, 'Invalid method encountered');
  await malformed('lowercase method', `get ${TOPIC} HTTP/1.1\r\nHost: x\r\n\r\n`, 'Invalid method encountered');
  await malformed('not HTTP at all', 'hello\r\n\r\n', 'Invalid method encountered');
  await malformed(
    'a raw non-ASCII byte in the path',
    Buffer.concat([Buffer.from(`GET ${TOPIC}`), Buffer.from('é'), Buffer.from(' HTTP/1.1\r\nHost: x\r\n\r\n')]),
    'Invalid char in url path',
  );
  await malformed(
    'a control character in the path',
    `GET ${TOPIC}\x01 HTTP/1.1\r\nHost: x\r\n\r\n`,
    'Invalid char in url path',
  );
  await malformed('HTTP version 9.9', `GET ${TOPIC} HTTP/9.9\r\nHost: x\r\n\r\n`, 'Invalid HTTP version');
  await malformed('a header name with a space', `GET ${TOPIC} HTTP/1.1\r\nHo st: x\r\n\r\n`, 'Invalid header token');
  await malformed(
    'Content-Length not a number',
    `POST ${TOPIC}:publish HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n`,
    'Invalid character in Content-Length',
  );
  const publish = '{"messages":[{"data":"eA=="}]}';
  await malformed(
    'two Content-Length headers',
    `POST ${TOPIC}:publish HTTP/1.1\r\nHost: x\r\nContent-Length: ${publish.length}\r\nContent-Length: ${publish.length}\r\n\r\n${publish}`,
    'Duplicate Content-Length',
  );
  await malformed(
    'Content-Length and Transfer-Encoding',
    `POST ${TOPIC}:publish HTTP/1.1\r\nHost: x\r\nContent-Length: ${publish.length}\r\nTransfer-Encoding: chunked\r\n\r\n${publish}`,
    "Transfer-Encoding can't be present with Content-Length",
  );
  // Framing broken inside the body: the publish route was reached, but never got a body.
  const chunked = `POST ${TOPIC}:publish HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n`;
  const half = publish.slice(0, 10);
  await malformed(
    'a broken chunk size in a publish',
    `${chunked}${half.length.toString(16)}\r\n${half}\r\nzz\r\n${publish.slice(10)}\r\n0\r\n\r\n`,
    'Invalid character in chunk size',
  );
  await refused(
    'chunk extensions over 16 KiB in a publish',
    `${chunked}${half.length.toString(16)};${'e'.repeat(20_000)}\r\n${half}\r\n0\r\n\r\n`,
    413,
    'INVALID_ARGUMENT',
    'Request chunk extensions too large.',
  );
  for (const size of [20_000, 1_000_000]) {
    await refused(
      `a header of ${size} bytes`,
      `GET ${TOPIC} HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(size)}\r\n\r\n`,
      431,
      'INVALID_ARGUMENT',
      'Request header fields too large: the request line and headers may hold at most 16384 bytes.',
    );
  }
  await refused(
    'headers that never end',
    `GET ${TOPIC} HTTP/1.1\r\nHost: x\r\n`,
    408,
    'DEADLINE_EXCEEDED',
    'The request was not received in time.',
    3000,
  );

  // A method Node knows, that no route has: the not-found handler's envelope.
  const propfind = await sendRaw(port, `PROPFIND ${TOPIC} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  t.strictSame(
    { status: propfind.status, contentType: propfind.headers['content-type'], body: JSON.parse(propfind.body) },
    {
      status: 404,
      contentType: 'application/json; charset=utf-8',
      body: { error: { code: 404, message: `No such method or resource: PROPFIND ${TOPIC}`, status: 'NOT_FOUND' } },
    },
    'PROPFIND',
  );

  t.strictSame(
    await inject('POST', `${SUB}:pull`, { maxMessages: 10, returnImmediately: true }),
    { status: 200, body: {} },
    'none of the refused publishes stored a message',
  );
  t.strictSame(logged, [], 'nothing was logged at warn or above');
});
