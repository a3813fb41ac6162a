/**
 * Push delivery end to end: the broker POSTs every message of a push subscription to an
 * endpoint in this process that answers 204 at once, while the messages are being published.
 * Rate = messages / (first publish request -> every message pushed and its ack settled).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Redis } from 'ioredis';
import {
  createTopic,
  deleteTopic,
  PROJECT,
  subscriptionBacklog,
  subscriptionPath,
  type ThroughputResult,
} from './broker-workloads.ts';
import type { HttpClient } from './http.ts';
import { Latency, sleep } from './stats.ts';

/** A push endpoint that acknowledges everything and notes which message IDs came, and when. */
class CountingEndpoint {
  readonly server: Server;
  /** Message ID -> times pushed. */
  readonly pushed = new Map<string, number>();
  requests = 0;
  /** publish time -> push received, per first push of a message. */
  latency = new Latency();
  private waiting?: { count: number; resolve: () => void };

  constructor() {
    this.server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => {
        response.writeHead(204).end();
        this.requests++;
        const { message } = JSON.parse(Buffer.concat(chunks).toString()) as {
          message: { messageId: string; publishTime: string };
        };
        const times = this.pushed.get(message.messageId) ?? 0;
        this.pushed.set(message.messageId, times + 1);
        if (times === 0) this.latency.record(Date.now() - Date.parse(message.publishTime));
        if (this.waiting && this.pushed.size >= this.waiting.count) this.waiting.resolve();
      });
    });
    // Keep-alive connections stay open between the broker's requests, as a real endpoint's would.
    this.server.keepAliveTimeout = 60_000;
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/push`;
  }

  /** Resolves once `count` distinct messages have been pushed. */
  received(count: number): Promise<void> {
    if (this.pushed.size >= count) return Promise.resolve();
    return new Promise((resolve) => (this.waiting = { count, resolve }));
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

export async function pushWorkload(options: {
  workload: string;
  client: HttpClient;
  admin: Redis;
  keyPrefix: string;
  topicId: string;
  messages: number;
  timeoutMs: number;
  /** Publishes the `messages` messages to the topic. */
  publish: () => Promise<ThroughputResult>;
  /** Runs the measured part (the bench's CPU accounting wraps it). */
  measure: (run: () => Promise<ThroughputResult>) => Promise<ThroughputResult>;
}): Promise<ThroughputResult> {
  const { client, topicId } = options;
  const endpoint = new CountingEndpoint();
  const pushEndpoint = await endpoint.listen();
  try {
    await createTopic(client, topicId, []);
    await client.json('PUT', subscriptionPath(topicId), {
      topic: `projects/${PROJECT}/topics/${topicId}`,
      ackDeadlineSeconds: 60,
      pushConfig: { pushEndpoint },
    });
    // The broker starts pushing once it has listed the new subscription: one message shows it has.
    await client.json('POST', `/v1/projects/${PROJECT}/topics/${topicId}:publish`, {
      messages: [{ data: Buffer.from('first').toString('base64') }],
    });
    await withTimeout(endpoint.received(1), 30_000, `${options.workload}: the first message was never pushed`);
    await settled(options, () => true);
    endpoint.pushed.clear();
    endpoint.requests = 0;
    endpoint.latency = new Latency();

    const result = await options.measure(async () => {
      const started = performance.now();
      const published = await options.publish();
      await withTimeout(
        endpoint.received(options.messages),
        options.timeoutMs,
        `${options.workload}: ${endpoint.pushed.size} of ${options.messages} messages pushed in time`,
      );
      await settled(options, () => performance.now() - started < options.timeoutMs);
      const seconds = (performance.now() - started) / 1000;
      return {
        workload: options.workload,
        messages: options.messages,
        seconds,
        msgPerSec: options.messages / seconds,
        latency: { publish: published.latency.publish, 'publish time->pushed': endpoint.latency.summary() },
        notes: {
          publishMsgPerSec: Math.round(published.msgPerSec),
          pushRequests: endpoint.requests,
          pushedAgain: endpoint.requests - endpoint.pushed.size,
        },
      };
    });
    if (endpoint.pushed.size !== options.messages)
      throw new Error(`${options.workload}: ${endpoint.pushed.size} distinct messages pushed of ${options.messages}`);
    await deleteTopic(client, topicId, [topicId]);
    return result;
  } finally {
    await endpoint.close();
  }
}

/** Waits until nothing of the subscription is ready or leased: every push acknowledged. */
async function settled(
  options: { admin: Redis; keyPrefix: string; topicId: string; workload: string },
  stillTime: () => boolean,
): Promise<void> {
  for (;;) {
    const backlog = await subscriptionBacklog(options.admin, options.keyPrefix, options.topicId);
    if (backlog && backlog.ready === 0 && backlog.leased === 0) return;
    if (!stillTime()) throw new Error(`${options.workload}: pushed messages were still unacknowledged at the timeout`);
    await sleep(5);
  }
}

function withTimeout(promise: Promise<void>, ms: number, message: string): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(message)), ms))),
  ]).finally(() => clearTimeout(timer));
}
