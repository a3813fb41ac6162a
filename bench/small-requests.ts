/**
 * Small requests: one-message publishes, and pulls, deadline changes and acknowledgements of a few
 * messages, each request on one of `connections` keep-alive connections sending back to back for
 * a fixed time, against the same loop on a bare Fastify route running one EVALSHA
 * (bench/bare-route.ts), the floor of any request that runs a script.
 */
import type { ChildProcess } from 'node:child_process';
import { type PulledMessage, subscriptionPath, topicPath } from './broker-workloads.ts';
import type { ThroughputResult } from './broker-workloads.ts';
import { HttpClient } from './http.ts';
import { forkScript } from './processes.ts';
import { Latency } from './stats.ts';

/** The bare route's child process, listening on `baseUrl`. */
export interface BareRoute {
  pid: number;
  baseUrl: string;
  stop(): void;
}

export async function startBareRoute(redisUrl: string): Promise<BareRoute> {
  const child: ChildProcess = forkScript(new URL('./bare-route.ts', import.meta.url).pathname, {
    BARE_REDIS_URL: redisUrl,
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (message: { port: number }) => resolve(message.port));
    child.once('exit', (code) => reject(new Error(`the bare route exited (${code}) before listening`)));
  });
  return { pid: child.pid!, baseUrl: `http://127.0.0.1:${port}`, stop: () => child.kill('SIGTERM') };
}

/** One request of a loop: its path and body; `answered` sees the response body. */
interface SmallRequest {
  path: string;
  body: string;
  answered?(body: Buffer): void;
}

/**
 * Sends requests from `next` on `connections` connections, each waiting for its answer before
 * sending the next, for `seconds` (or until `next` has nothing more). A request answered with
 * anything but 200 fails the run.
 */
export async function requestLoop(options: {
  workload: string;
  baseUrl: string;
  connections: number;
  seconds: number;
  next: () => SmallRequest | undefined;
}): Promise<ThroughputResult> {
  const client = new HttpClient(options.baseUrl, options.connections);
  const latency = new Latency();
  let requests = 0;
  const started = performance.now();
  const endAt = started + options.seconds * 1000;
  try {
    await Promise.all(
      Array.from({ length: options.connections }, async () => {
        for (;;) {
          if (performance.now() >= endAt) return;
          const request = options.next();
          if (!request) return;
          const sentAt = performance.now();
          const response = await client.request('POST', request.path, request.body);
          if (response.status !== 200) {
            throw new Error(`${options.workload}: ${request.path} -> HTTP ${response.status}: ${response.body}`);
          }
          latency.since(sentAt);
          requests++;
          request.answered?.(response.body);
        }
      }),
    );
  } finally {
    client.close();
  }
  const seconds = (performance.now() - started) / 1000;
  return {
    workload: options.workload,
    messages: requests,
    seconds,
    msgPerSec: requests / seconds,
    latency: { request: latency.summary() },
    notes: { connections: options.connections, unit: 'requests' },
  };
}

/** The message of every publish: 64 bytes of data. */
export const SMALL_MESSAGE = { data: Buffer.alloc(64, 'a').toString('base64') };
const ONE_MESSAGE_PUBLISH = JSON.stringify({ messages: [SMALL_MESSAGE] });

/** One-message publishes to `topicId` (the bare route takes the same body). */
export const publishRequests = (topicId: string) => () => ({
  path: `${topicPath(topicId)}:publish`,
  body: ONE_MESSAGE_PUBLISH,
});

export const bareRequests = () => () => ({ path: '/bare', body: ONE_MESSAGE_PUBLISH });

/**
 * Pulls of `perRequest` messages that return at once; the ack IDs they got are put in `leased`,
 * in groups of the size each pull got, for the deadline changes and acknowledgements after.
 */
export const pullRequests = (subscriptionId: string, perRequest: number, leased: string[][]) => {
  const body = JSON.stringify({ maxMessages: perRequest, returnImmediately: true });
  return () => ({
    path: `${subscriptionPath(subscriptionId)}:pull`,
    body,
    answered: (response: Buffer) => {
      const received = (JSON.parse(response.toString('utf8')).receivedMessages ?? []) as PulledMessage[];
      if (received.length > 0) leased.push(received.map((m) => m.ackId));
    },
  });
};

/** Deadline changes of the leased groups, one request each, in order; `done` gets each group. */
export const modifyRequests = (subscriptionId: string, leased: string[][], done: string[][]) => {
  let next = 0;
  return () => {
    const ackIds = leased[next++];
    if (!ackIds) return undefined;
    done.push(ackIds);
    return {
      path: `${subscriptionPath(subscriptionId)}:modifyAckDeadline`,
      body: JSON.stringify({ ackIds, ackDeadlineSeconds: 600 }),
    };
  };
};

/** Acknowledgements of the groups, one request each, until none is left. */
export const acknowledgeRequests = (subscriptionId: string, groups: string[][]) => {
  let next = 0;
  return () => {
    const ackIds = groups[next++];
    if (!ackIds) return undefined;
    return { path: `${subscriptionPath(subscriptionId)}:acknowledge`, body: JSON.stringify({ ackIds }) };
  };
};
