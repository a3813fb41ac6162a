/**
 * The client comparison: the same work done by the official Node client (@google-cloud/pubsub)
 * over gRPC and over REST, by this repository's streaming client (src/client) over WebSocket,
 * and by the bench's own HTTP client over REST. The clients run in bench/client-worker.ts, a
 * child process, so that their CPU (the official client's is most of a core) neither shares the
 * bench process's event loop nor hides in its CPU figure; run.ts reads it from /proc.
 */
import type { ChildProcess } from 'node:child_process';
import type { Redis } from 'ioredis';
import { PROJECT, subscriptionBacklog, type ThroughputResult } from './broker-workloads.ts';
import type { ClientJob, ClientJobResult, FromWorker, ToWorker } from './client-worker.ts';
import { forkScript } from './processes.ts';

export class ClientWorker {
  private nextId = 0;
  private readonly pending = new Map<number, { resolve: (message: FromWorker) => void; reject: (e: Error) => void }>();
  private readonly exited: Promise<never>;

  private constructor(private readonly child: ChildProcess) {
    child.on('message', (message: FromWorker) => {
      if (!('id' in message)) return;
      const waiter = this.pending.get(message.id);
      this.pending.delete(message.id);
      waiter?.resolve(message);
    });
    this.exited = new Promise<never>((_, reject) =>
      child.once('exit', (code, signal) => {
        const error = new Error(`client worker exited (code ${code}, signal ${signal})`);
        for (const waiter of this.pending.values()) waiter.reject(error);
        this.pending.clear();
        reject(error);
      }),
    );
    this.exited.catch(() => {});
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Starts bench/client-worker.ts against the broker at `hostPort`; resolves once its clients are loaded. */
  static async start(hostPort: string): Promise<ClientWorker> {
    const child = forkScript(new URL('./client-worker.ts', import.meta.url).pathname, {
      BENCH_CLIENT_BROKER: hostPort,
      BENCH_CLIENT_PROJECT: PROJECT,
      PUBSUB_EMULATOR_HOST: hostPort,
    });
    const worker = new ClientWorker(child);
    await Promise.race([
      new Promise<void>((resolve) =>
        child.on('message', (message: FromWorker) => {
          if ('ready' in message) resolve();
        }),
      ),
      worker.exited,
    ]);
    return worker;
  }

  private call(message: Omit<ToWorker, 'id'>): Promise<FromWorker> {
    const id = this.nextId++;
    return Promise.race([
      new Promise<FromWorker>((resolve, reject) => {
        this.pending.set(id, { resolve, reject });
        this.child.send({ ...message, id } as ToWorker);
      }),
      this.exited,
    ]);
  }

  async run(job: ClientJob): Promise<ClientJobResult> {
    const answer = await this.call({ job });
    if ('error' in answer) throw new Error(`client worker, ${job.kind} over ${job.transport}: ${answer.error}`);
    if (!('result' in answer)) throw new Error('client worker: unexpected answer');
    return answer.result;
  }

  /** Closes the clients (their connections) and lets the process end. */
  async close(): Promise<void> {
    if (this.child.exitCode !== null || !this.child.connected) return;
    await this.call({ close: true }).catch(() => {});
  }
}

/**
 * The official client publishes `messages` 1 KB messages with topic.publishMessage (default
 * batching), `window` unresolved at a time. Rate = messages / (first call -> last message ID).
 */
export async function officialPublishWorkload(options: {
  workload: string;
  worker: ClientWorker;
  transport: 'grpc' | 'rest';
  topicId: string;
  messages: number;
  window: number;
}): Promise<ThroughputResult> {
  const result = await options.worker.run({
    kind: 'publish',
    transport: options.transport,
    topicId: options.topicId,
    messages: options.messages,
    window: options.window,
  });
  return {
    workload: options.workload,
    messages: result.messages,
    seconds: result.seconds,
    msgPerSec: result.messages / result.seconds,
    latency: {},
    notes: { window: options.window },
  };
}

/**
 * Drains a subscription's backlog of exactly `messages` messages with a streaming client (the
 * official one over gRPC, or src/client over WebSocket), acking each message as it arrives.
 * Rate = messages / (subscriber opened -> every message received and the subscriber closed,
 * i.e. its last acks applied). Fails unless all arrive and none is left ready afterwards.
 */
export async function streamingReceiveWorkload(options: {
  workload: string;
  worker: ClientWorker;
  transport: 'grpc' | 'ws';
  admin: Redis;
  keyPrefix: string;
  subscriptionId: string;
  messages: number;
  timeoutMs: number;
  /** gRPC: the official client's flowControl.maxMessages (default: its own, 1000). */
  maxMessages?: number;
}): Promise<ThroughputResult> {
  const result = await options.worker.run({
    kind: 'receive',
    transport: options.transport,
    subscriptionId: options.subscriptionId,
    messages: options.messages,
    timeoutMs: options.timeoutMs,
    maxMessages: options.maxMessages,
  });
  if (result.messages !== options.messages)
    throw new Error(`${options.workload}: received ${result.messages} distinct messages of ${options.messages}`);
  // A lease left over is a redelivery that was in flight when the subscriber closed (it runs out
  // by itself): counted in the notes. A message still ready was never delivered.
  const backlog = await subscriptionBacklog(options.admin, options.keyPrefix, options.subscriptionId);
  if (!backlog || backlog.ready > 0)
    throw new Error(
      `${options.workload}: ${backlog?.ready} messages still ready (${backlog?.leased} leased) after all were received and acked`,
    );
  return {
    workload: options.workload,
    messages: result.messages,
    seconds: result.seconds,
    msgPerSec: result.messages / result.seconds,
    latency: {},
    notes: {
      receivedSeconds: Math.round((result.receivedSeconds ?? 0) * 1000) / 1000,
      duplicates: result.duplicates ?? 0,
      leasedAfterClose: backlog.leased,
      ...(options.maxMessages ? { flowControlMaxMessages: options.maxMessages } : {}),
    },
  };
}
