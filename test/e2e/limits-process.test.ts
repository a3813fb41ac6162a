// No client exhausts a broker process's file descriptors or memory by opening connections, long
// polls or streams: a real broker (src/server.ts) with small MAX_CONNECTIONS, MAX_LONG_POLLS and
// MAX_STREAMS is flooded past each, and
//   - closes the connections past MAX_CONNECTIONS as it accepts them (plain HTTP ones and gRPC
//     ones alike), so that its descriptors (/proc/<pid>/fd) stay within the limit;
//   - refuses the long polls and streams past their limits with RESOURCE_EXHAUSTED (429, close
//     code 4008) while serving a normal client;
//   - ends up where it started: descriptors back, memory not growing round after round.
// The limits of each kind, over every front end: limits.test.ts.

import { readdirSync, readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import t from 'tap';
import { call, startBrokerProcess, stopProcess } from '../helpers/processes.ts';
import { testRedisUrl, uniquePrefix } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';
import { StreamClient } from '../streaming/_ws.ts';

const MAX_CONNECTIONS = 30;
const MAX_LONG_POLLS = 4;
const MAX_STREAMS = 4;
const HTTP2_PREFACE = 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n';

const openFds = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;
const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;

/**
 * Opens `count` connections that never finish a request: HTTP ones with a request line and no
 * end of headers, and (every other one) gRPC ones with the HTTP/2 preface and nothing after.
 * Resolves once each is connected or closed; `closedByServer` counts those the broker closed.
 */
async function flood(port: number, count: number) {
  const sockets: Socket[] = [];
  let closedByServer = 0;
  let leaving = false;
  await Promise.all(
    Array.from(
      { length: count },
      (_, i) =>
        new Promise<void>((settled) => {
          const socket = connect(port, '127.0.0.1', () => {
            socket.write(i % 2 === 0 ? 'GET /v1/projects/p/topics HTTP/1.1\r\nHost: x\r\n' : HTTP2_PREFACE);
            settled();
          });
          socket.on('error', () => settled());
          socket.on('close', () => {
            if (!leaving) closedByServer++;
            settled();
          });
          sockets.push(socket);
        }),
    ),
  );
  return {
    closedByServer: () => closedByServer,
    /** The client leaves: closes every connection still open. */
    leave: () => {
      leaving = true;
      for (const socket of sockets) socket.destroy();
    },
  };
}

t.test('connections, long polls and streams past their limits are refused; a normal client is served', async (t) => {
  const broker = await startBrokerProcess({
    REDIS_URL: testRedisUrl(),
    KEY_PREFIX: uniquePrefix('limits-process'),
    MAX_CONNECTIONS: String(MAX_CONNECTIONS),
    MAX_LONG_POLLS: String(MAX_LONG_POLLS),
    MAX_STREAMS: String(MAX_STREAMS),
    PULL_WAIT_SECONDS: '60',
  });
  t.teardown(() => stopProcess(broker.child, 'SIGTERM', 10_000));
  const pid = broker.child.pid!;
  const port = Number(new URL(broker.url).port);
  t.equal((await call(broker.url, 'PUT', '/v1/projects/p/topics/orders', {})).status, 200);
  const subscription = { topic: 'projects/p/topics/orders' };
  t.equal((await call(broker.url, 'PUT', '/v1/projects/p/subscriptions/work', subscription)).status, 200);
  // Connections of these calls may still be open (keep-alive): the baseline is the higher for it.
  const baselineFds = openFds(pid);

  await t.test('connections', async (t) => {
    const held = await flood(port, 4 * MAX_CONNECTIONS);
    t.ok(
      await waitUntil(async () => held.closedByServer() >= 3 * MAX_CONNECTIONS, 10_000, 50),
      `the connections past ${MAX_CONNECTIONS} are closed (${held.closedByServer()} of ${4 * MAX_CONNECTIONS})`,
    );
    const fds = openFds(pid);
    t.ok(fds <= baselineFds + MAX_CONNECTIONS, `descriptors stay within the limit (${baselineFds} -> ${fds})`);
    held.leave();
    t.ok(
      await waitUntil(async () => openFds(pid) <= baselineFds + 2, 10_000, 50),
      'and go back once the clients leave',
    );
    t.equal((await call(broker.url, 'GET', '/v1/projects/p/topics')).status, 200, 'a normal client is served');
  });

  await t.test('long polls', async (t) => {
    // Raw connections, each with one pull, so that the test decides when each client leaves.
    const body = JSON.stringify({ maxMessages: 1 });
    const answers: string[] = [];
    const pulls = Array.from({ length: 3 * MAX_LONG_POLLS }, () => {
      const socket = connect(port, '127.0.0.1', () =>
        socket.write(
          'POST /v1/projects/p/subscriptions/work:pull HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
            `Content-Length: ${body.length}\r\n\r\n${body}`,
        ),
      );
      socket.on('error', () => {});
      socket.once('data', (chunk: Buffer) => answers.push(chunk.toString('latin1')));
      return socket;
    });
    t.ok(
      await waitUntil(async () => answers.length >= 2 * MAX_LONG_POLLS, 10_000, 50),
      'the pulls past the limit are answered at once',
    );
    t.ok(
      answers.every((answer) => answer.startsWith('HTTP/1.1 429') && answer.includes('"RESOURCE_EXHAUSTED"')),
      'with 429 RESOURCE_EXHAUSTED',
    );
    t.equal((await call(broker.url, 'GET', '/v1/projects/p/topics/orders')).status, 200, 'a normal client is served');
    const published = await call(broker.url, 'POST', '/v1/projects/p/topics/orders:publish', {
      messages: [{ data: Buffer.from('hello').toString('base64') }],
    });
    t.equal(published.status, 200, 'a publish too');
    t.ok(
      await waitUntil(async () => answers.some((answer) => answer.startsWith('HTTP/1.1 200')), 10_000, 50),
      'a waiting pull gets it',
    );
    for (const socket of pulls) socket.end();
    t.ok(
      await waitUntil(async () => openFds(pid) <= baselineFds + 2, 10_000, 50),
      `descriptors go back once the clients leave (${baselineFds} -> ${openFds(pid)})`,
    );
  });

  await t.test('streams', async (t) => {
    const url = `ws://127.0.0.1:${port}/v1/projects/p/subscriptions/work:streamingPull`;
    const streams = Array.from({ length: 2 * MAX_STREAMS }, () => new StreamClient(url));
    await Promise.all(streams.map((stream) => stream.opened.catch(() => {})));
    for (const stream of streams) if (stream.isOpen) stream.send({ streamAckDeadlineSeconds: 60 });
    t.ok(
      await waitUntil(async () => streams.filter((stream) => stream.closeInfo).length >= MAX_STREAMS, 10_000, 50),
      'the streams past the limit are closed',
    );
    const closed = streams.filter((stream) => stream.closeInfo);
    t.equal(closed.length, MAX_STREAMS, `${MAX_STREAMS} stay open`);
    t.ok(
      closed.every((stream) => stream.closeInfo!.code === 4008),
      `the others end with 4008 (RESOURCE_EXHAUSTED), which clients retry (${closed.map((stream) => stream.closeInfo!.code).join(', ')})`,
    );
    t.equal((await call(broker.url, 'GET', '/v1/projects/p/topics')).status, 200, 'a normal client is served');
    for (const stream of streams) stream.terminate();
    t.ok(
      await waitUntil(async () => openFds(pid) <= baselineFds + 2, 10_000, 50),
      `descriptors go back once the streams close (${baselineFds} -> ${openFds(pid)})`,
    );
  });

  await t.test('round after round, descriptors and memory stay bounded', async (t) => {
    const rounds: number[] = [];
    for (let round = 0; round < 6; round++) {
      const held = await flood(port, 4 * MAX_CONNECTIONS);
      await waitUntil(async () => held.closedByServer() >= 3 * MAX_CONNECTIONS, 10_000, 50);
      t.ok(openFds(pid) <= baselineFds + MAX_CONNECTIONS, `round ${round}: descriptors within the limit`);
      held.leave();
      await waitUntil(async () => openFds(pid) <= baselineFds + 2, 10_000, 50);
      rounds.push(rssMiB(pid));
    }
    const finalFds = openFds(pid);
    t.ok(finalFds <= baselineFds + 2, `descriptors back where they started (${baselineFds} -> ${finalFds})`);
    const growth = rounds[rounds.length - 1] - rounds[1];
    t.ok(growth < 32, `memory does not grow with the rounds (RSS ${rounds.map(Math.round).join(', ')} MiB)`);
  });
  t.notMatch(broker.output(), /Error|failed/, 'nothing went wrong in the broker');
});
