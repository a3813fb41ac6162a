/**
 * The client side of the client comparison (bench/client-workloads.ts), in a child process of
 * the bench: the official Node client (@google-cloud/pubsub) over gRPC and over REST, and this
 * repository's streaming client (src/client) over WebSocket. The parent sends one job at a time
 * over IPC and gets back its timing; its own CPU is read from /proc like the broker's.
 *
 * Environment: BENCH_CLIENT_BROKER (host:port of the broker), BENCH_CLIENT_PROJECT, and
 * PUBSUB_EMULATOR_HOST (the same host:port: how the official client is pointed at an emulator).
 */
import { randomBytes } from 'node:crypto';

// Before the client is loaded: its transport would otherwise probe the cloud metadata address.
process.env.METADATA_SERVER_DETECTION = 'none';

const { PubSub } = await import('@google-cloud/pubsub');
const { PassThroughClient } = await import('google-auth-library');
const { WebSocket } = await import('ws');
const { PubSubClient } = await import('../src/client/index.ts');
type ClientConfig = import('@google-cloud/pubsub').ClientConfig;
type Topic = import('@google-cloud/pubsub').Topic;

export type Transport = 'grpc' | 'rest' | 'ws';

export type ClientJob =
  | { kind: 'publish'; transport: 'grpc' | 'rest'; topicId: string; messages: number; window: number }
  | {
      kind: 'receive';
      transport: 'grpc' | 'ws';
      subscriptionId: string;
      messages: number;
      timeoutMs: number;
      /** gRPC: the official client's flowControl.maxMessages (default: the client's own, 1000). */
      maxMessages?: number;
    };

export interface ClientJobResult {
  messages: number;
  /** Start of the job -> last publish resolved / every message received and its ack applied. */
  seconds: number;
  /** receive: start -> last message received (acks may still be on their way). */
  receivedSeconds?: number;
  duplicates?: number;
  /** publish: the official client's batches as the broker saw them (messages per request). */
  notes?: Record<string, number | string>;
}

export type ToWorker = { id: number; job: ClientJob } | { id: number; close: true };
export type FromWorker =
  | { ready: true }
  | { id: number; result: ClientJobResult }
  | { id: number; error: string }
  | { id: number; closed: true };

const broker = process.env.BENCH_CLIENT_BROKER ?? '';
const projectId = process.env.BENCH_CLIENT_PROJECT ?? 'bench';
if (!broker || process.env.PUBSUB_EMULATOR_HOST !== broker)
  throw new Error('BENCH_CLIENT_BROKER and PUBSUB_EMULATOR_HOST must both name the broker (host:port)');

/** A pool of distinct random 1 KB payloads, cycled through. */
const payloads = Array.from({ length: 1000 }, () => randomBytes(1024));

/** gRPC: PUBSUB_EMULATOR_HOST (insecure HTTP/2, no credentials) and a project ID. */
const grpcClient = new PubSub({ projectId });

/**
 * REST: google-gax's HTTP/1.1 + JSON transport ("fallback"), plain HTTP, no credentials; an
 * explicit apiEndpoint takes precedence over PUBSUB_EMULATOR_HOST. validateStatus lets gax
 * decode error bodies itself (see test/e2e/official-client.test.ts).
 */
const noCredentials = new PassThroughClient({ transporterOptions: { validateStatus: () => true } });
const restConfig: ClientConfig & { fallback: 'rest'; protocol: string } = {
  projectId,
  apiEndpoint: broker,
  fallback: 'rest',
  protocol: 'http',
  authClient: noCredentials as unknown as ClientConfig['authClient'],
};
const restClient = new PubSub(restConfig);

const wsClient = new PubSubClient({ endpoint: `http://${broker}`, projectId, WebSocket });

const topics = new Map<string, Topic>();
const topicOf = (transport: 'grpc' | 'rest', topicId: string) => {
  const key = `${transport} ${topicId}`;
  let topic = topics.get(key);
  if (!topic) {
    // Default batching (100 messages, 1 MB or 10 ms per batch).
    topic = (transport === 'grpc' ? grpcClient : restClient).topic(topicId);
    topics.set(key, topic);
  }
  return topic;
};

/**
 * `messages` topic.publishMessage calls, at most `window` unresolved at a time (the client
 * batches them itself); resolves when the last one has its message ID.
 */
async function publish(job: Extract<ClientJob, { kind: 'publish' }>): Promise<ClientJobResult> {
  const topic = topicOf(job.transport, job.topicId);
  const started = performance.now();
  let next = 0;
  let done = 0;
  let failure: Error | undefined;
  await new Promise<void>((resolve, reject) => {
    const launch = () => {
      while (next < job.messages && next - done < job.window && !failure) {
        const data = payloads[next++ % payloads.length];
        topic.publishMessage({ data }).then(
          () => {
            done++;
            if (done === job.messages) resolve();
            else launch();
          },
          (error: Error) => {
            failure ??= error;
            reject(error);
          },
        );
      }
    };
    launch();
  });
  const seconds = (performance.now() - started) / 1000;
  return { messages: job.messages, seconds };
}

/**
 * Receives `messages` distinct messages of a subscription that holds exactly that backlog and
 * acks each as it arrives; then closes the subscriber, which waits for the last acks to be
 * applied. gRPC: the official client's subscription.on('message') (StreamingPull, its defaults:
 * 5 streams, each asking for at most flowControl.maxMessages (1000) outstanding messages; acks as
 * batched unary Acknowledge calls). ws: this
 * repository's client (one WebSocket stream, 1000 outstanding messages, acks on the stream).
 */
async function receive(job: Extract<ClientJob, { kind: 'receive' }>): Promise<ClientJobResult> {
  const seen = new Set<string>();
  let duplicates = 0;
  let receivedAt = 0;
  let reached!: () => void;
  let failed!: (error: Error) => void;
  const all = new Promise<void>((resolve, reject) => {
    reached = resolve;
    failed = reject;
  });
  const timer = setTimeout(
    () => failed(new Error(`receive ${job.subscriptionId}: ${seen.size} of ${job.messages} after ${job.timeoutMs} ms`)),
    job.timeoutMs,
  );
  const count = (messageId: string) => {
    if (seen.has(messageId)) duplicates++;
    else seen.add(messageId);
    if (seen.size === job.messages && receivedAt === 0) {
      receivedAt = performance.now();
      reached();
    }
  };
  const started = performance.now();
  try {
    if (job.transport === 'grpc') {
      const subscription = grpcClient.subscription(
        job.subscriptionId,
        job.maxMessages ? { flowControl: { maxMessages: job.maxMessages } } : undefined,
      );
      subscription.on('error', (error: Error) => failed(error));
      subscription.on('message', (message: { id: string; ack(): void }) => {
        message.ack();
        count(message.id);
      });
      try {
        await all;
      } finally {
        await subscription.close();
      }
    } else {
      const subscriber = wsClient.subscribe(
        job.subscriptionId,
        (message) => {
          message.ack();
          count(message.messageId);
        },
        { maxOutstandingMessages: 1000, onError: (error) => failed(error) },
      );
      try {
        await all;
      } finally {
        await subscriber.close();
      }
    }
  } finally {
    clearTimeout(timer);
  }
  return {
    messages: seen.size,
    seconds: (performance.now() - started) / 1000,
    receivedSeconds: (receivedAt - started) / 1000,
    duplicates,
  };
}

const reply = (message: FromWorker) => process.send?.(message);

process.on('message', (message: ToWorker) => {
  if ('close' in message) {
    void Promise.allSettled([grpcClient.close(), restClient.close()]).then(() => {
      reply({ id: message.id, closed: true });
      process.disconnect();
    });
    return;
  }
  const { id, job } = message;
  (job.kind === 'publish' ? publish(job) : receive(job)).then(
    (result) => reply({ id, result }),
    (error: Error) => reply({ id, error: error.stack ?? String(error) }),
  );
});
// The parent ends this process by closing the IPC channel (or by a signal).
process.on('disconnect', () => process.exit(0));
reply({ ready: true });
