/**
 * Streaming pull workloads: WebSocket subscribers (the `ws` package) on the broker's
 * `:streamingPull` route (see openapi.yaml) that ack every received batch at once with one
 * `{ackIds}` frame, while HTTP publishers publish.
 *
 * - throughput: publishers at full speed; end-to-end rate = messages / (first publish -> last
 *   message received); every message must arrive (distinct message IDs are counted).
 * - latency: publishers paced to a fixed rate; each message's data carries the send time of
 *   its publish request (StampedBodies); latency = receive time - that send time.
 */
import type { Redis } from 'ioredis';
import WebSocket from 'ws';
import {
  publishWorkload,
  subscriptionBacklog,
  subscriptionPath,
  topicPath,
  type PulledMessage,
  type ThroughputResult,
} from './broker-workloads.ts';
import type { HttpClient } from './http.ts';
import { StampedBodies } from './payloads.ts';
import { E2E_LATENCY } from './report.ts';
import { Latency, sleep, unrefSleep } from './stats.ts';
import { scriptCalls } from './waiters-workloads.ts';

interface ServerFrame {
  receivedMessages?: PulledMessage[];
  subscriptionProperties?: unknown;
  error?: { code: number; message: string; status: string };
}

/** What both streaming workloads need: the broker, its Redis, and the streams' settings. */
interface StreamingWorkload {
  workload: string;
  client: HttpClient;
  admin: Redis;
  keyPrefix: string;
  topicId: string;
  subscriptionId: string;
  stream: StreamSettings;
}

export interface StreamSettings {
  /** ws://host:port of the broker. */
  wsBase: string;
  subscribers: number;
  maxOutstandingMessages: number;
  ackDeadlineSeconds: number;
}

/**
 * One streaming pull: opens the WebSocket, sends the first frame, and for every
 * `receivedMessages` frame sends one `{ackIds}` frame with all of its ack IDs, then hands the
 * messages (and the time the frame arrived, performance.now()) to `onMessages`.
 */
class StreamSubscriber {
  private readonly ws: WebSocket;
  /** Rejects when the stream fails: an error frame or a close we did not ask for. */
  readonly failed: Promise<never>;
  private fail!: (error: Error) => void;
  private closing = false;
  private started?: () => void;
  private keepAliveAnswered?: () => void;
  /** Frames with messages (each answered by one ack frame) and the messages in them. */
  deliveryFrames = 0;
  messages = 0;

  constructor(
    url: string,
    private readonly settings: StreamSettings,
    private readonly onMessages: (messages: PulledMessage[], receivedAtMs: number) => void,
  ) {
    this.failed = new Promise<never>((_, reject) => (this.fail = reject));
    this.failed.catch(() => {});
    this.ws = new WebSocket(url, { perMessageDeflate: false });
    this.ws.on('message', (data: Buffer) => this.handle(data));
    this.ws.on('error', (error) => this.fail(new Error(`streaming pull ${url}: ${error.message}`)));
    this.ws.on('close', (code, reason) => {
      if (!this.closing)
        this.fail(new Error(`streaming pull ${url} closed by the server: ${code} ${reason.toString()}`));
    });
  }

  /** Connects and sends the first frame; resolves once the server has answered it (subscriptionProperties). */
  async open(): Promise<void> {
    const started = new Promise<void>((resolve) => (this.started = resolve));
    await Promise.race([new Promise<void>((resolve) => this.ws.once('open', () => resolve())), this.failed]);
    this.ws.send(
      JSON.stringify({
        streamAckDeadlineSeconds: this.settings.ackDeadlineSeconds,
        maxOutstandingMessages: this.settings.maxOutstandingMessages,
      }),
    );
    await Promise.race([started, this.failed]);
  }

  /**
   * Sends a keep-alive `{}` and waits for its `{}` answer: the server handles a stream's frames
   * in order, so by then every ack sent before has been applied.
   */
  async settle(): Promise<void> {
    const answered = new Promise<void>((resolve) => (this.keepAliveAnswered = resolve));
    this.ws.send('{}');
    await Promise.race([answered, this.failed]);
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.ws.readyState === WebSocket.CLOSED) return;
    const closed = new Promise<void>((resolve) => this.ws.once('close', () => resolve()));
    this.ws.close(1000);
    await Promise.race([closed, unrefSleep(2000)]);
    if ((this.ws.readyState as number) !== WebSocket.CLOSED) this.ws.terminate();
  }

  private handle(data: Buffer): void {
    const receivedAt = performance.now();
    const frame = JSON.parse(data.toString('utf8')) as ServerFrame;
    const received = frame.receivedMessages;
    if (received?.length) {
      this.deliveryFrames++;
      const ackIds = new Array<string>(received.length);
      for (let i = 0; i < received.length; i++) ackIds[i] = received[i].ackId;
      this.ws.send(JSON.stringify({ ackIds }));
      this.messages += received.length;
      this.onMessages(received, receivedAt);
    } else if (frame.error) {
      this.fail(new Error(`streaming pull error frame: ${JSON.stringify(frame.error)}`));
    } else if (frame.subscriptionProperties) {
      this.started?.();
      this.started = undefined;
    } else if (this.keepAliveAnswered && Object.keys(frame).length === 0) {
      this.keepAliveAnswered();
      this.keepAliveAnswered = undefined;
    }
  }
}

async function openSubscribers(
  settings: StreamSettings,
  subscriptionId: string,
  onMessages: (messages: PulledMessage[], receivedAtMs: number) => void,
): Promise<StreamSubscriber[]> {
  const url = `${settings.wsBase}${subscriptionPath(subscriptionId)}:streamingPull`;
  const subscribers = Array.from(
    { length: settings.subscribers },
    () => new StreamSubscriber(url, settings, onMessages),
  );
  try {
    await Promise.all(subscribers.map((s) => s.open()));
  } catch (error) {
    await Promise.all(subscribers.map((s) => s.close()));
    throw error;
  }
  return subscribers;
}

/** Waits until `done` is called (the caller does when its goal is reached), a stream fails, or the timeout. */
function waitFor(what: string, timeoutMs: number, subscribers: StreamSubscriber[]) {
  let resolve!: () => void;
  const reached = new Promise<void>((done) => (resolve = done));
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: timed out after ${timeoutMs / 1000} s`)), timeoutMs);
    timer.unref();
  });
  return {
    done: resolve,
    wait: () =>
      Promise.race([reached, timeout, ...subscribers.map((s) => s.failed)]).finally(() => clearTimeout(timer)),
  };
}

/** Acks applied and nothing left over: every stream's keep-alive answered, backlog empty in Redis. */
async function settleAndCheck(
  workload: string,
  subscribers: StreamSubscriber[],
  admin: Redis,
  keyPrefix: string,
  subscriptionId: string,
): Promise<void> {
  await Promise.all(subscribers.map((s) => s.settle()));
  const backlog = await subscriptionBacklog(admin, keyPrefix, subscriptionId);
  if (!backlog) throw new Error(`${workload}: subscription ${subscriptionId} is gone`);
  if (backlog.ready > 0 || backlog.leased > 0) {
    throw new Error(
      `${workload}: ${backlog.ready} messages still ready and ${backlog.leased} leased after all were received and acked`,
    );
  }
}

/**
 * `subscribers` streaming pulls on `subscriptionId` (fresh, no backlog) while `concurrency`
 * publishers publish `messages` messages at full speed. Rate = messages / (first publish ->
 * last message received). Fails unless every published message is received.
 */
export async function streamingThroughputWorkload(
  options: StreamingWorkload & {
    messages: number;
    batch: number;
    concurrency: number;
    bodies: Buffer[];
    timeoutMs: number;
    /** Wraps the measured part (publishing and receiving; not opening the streams), when given. */
    measure?: <T>(run: () => Promise<T>) => Promise<T>;
  },
): Promise<ThroughputResult> {
  const seen = new Set<string>();
  let duplicates = 0;
  let lastReceivedAt = 0;
  const goal = { done: () => {} };
  const onMessages = (messages: PulledMessage[], receivedAt: number) => {
    for (const { message } of messages) {
      if (seen.has(message.messageId)) duplicates++;
      else seen.add(message.messageId);
    }
    lastReceivedAt = receivedAt;
    if (seen.size >= options.messages) goal.done();
  };
  const subscribers = await openSubscribers(options.stream, options.subscriptionId, onMessages);
  const measure = options.measure ?? ((run) => run());
  try {
    return await measure(receiveAll);
  } finally {
    await Promise.all(subscribers.map((s) => s.close()));
  }

  async function receiveAll(): Promise<ThroughputResult> {
    const scriptsBefore = await scriptCalls(options.admin);
    const all = waitFor(options.workload, options.timeoutMs, subscribers);
    goal.done = all.done;
    const started = performance.now();
    const publishing = publishWorkload({
      workload: options.workload,
      client: options.client,
      topicId: options.topicId,
      messages: options.messages,
      batch: options.batch,
      concurrency: options.concurrency,
      bodies: options.bodies,
      timeoutMs: options.timeoutMs,
    });
    publishing.catch(() => {});
    const [publish] = await Promise.all([Promise.race([publishing, ...subscribers.map((s) => s.failed)]), all.wait()]);
    const seconds = (lastReceivedAt - started) / 1000;
    if (seen.size !== options.messages)
      throw new Error(`${options.workload}: received ${seen.size} distinct messages of ${options.messages}`);
    await settleAndCheck(options.workload, subscribers, options.admin, options.keyPrefix, options.subscriptionId);
    const frames = subscribers.reduce((sum, s) => sum + s.deliveryFrames, 0);
    const delivered = subscribers.reduce((sum, s) => sum + s.messages, 0);
    // Every script but the publishes and the acks (one per delivery frame) is a pull: how many
    // the subscription's leaser ran for the messages, however many streams share them.
    const scripts = (await scriptCalls(options.admin)) - scriptsBefore;
    const pullScripts = scripts - Math.ceil(options.messages / options.batch) - frames;
    return {
      workload: options.workload,
      messages: seen.size,
      seconds,
      msgPerSec: seen.size / seconds,
      latency: { publish: publish.latency.publish },
      notes: {
        subscribers: subscribers.length,
        publishSeconds: Math.round(publish.seconds * 1000) / 1000,
        publishMsgPerSec: Math.round(publish.msgPerSec),
        distinctReceived: seen.size,
        duplicates,
        deliveryFrames: frames,
        avgMessagesPerFrame: Math.round((delivered / Math.max(1, frames)) * 10) / 10,
        perSubscriber: subscribers.map((s) => s.messages).join('/'),
        pullScriptsPerMessage: Math.round((pullScripts / seen.size) * 1000) / 1000,
      },
    };
  }
}

/**
 * Publish-to-delivery latency at a fixed rate: requests of `batch` stamped messages are sent on
 * a schedule (rate / batch requests per second, open loop: a slow answer does not delay the next
 * request) for `seconds`, to a topic whose subscription `subscribers` streams consume and ack.
 * Latency = time the frame with the message arrived - send time of its publish request.
 */
export async function streamingLatencyWorkload(
  options: StreamingWorkload & {
    rate: number;
    seconds: number;
    batch: number;
    dataBytes: number;
    timeoutMs: number;
  },
): Promise<ThroughputResult> {
  const requests = Math.max(1, Math.round((options.rate * options.seconds) / options.batch));
  const total = requests * options.batch;
  const intervalMs = (1000 * options.batch) / options.rate;
  const stamped = new StampedBodies(1000, options.dataBytes);
  const endToEnd = new Latency();
  const publishLatency = new Latency();
  const sendLag = new Latency();
  const seen = new Set<string>();
  let duplicates = 0;
  let firstReceivedAt = 0;
  let lastReceivedAt = 0;
  const goal = { done: () => {} };
  const onMessages = (messages: PulledMessage[], receivedAt: number) => {
    for (const { message } of messages) {
      if (seen.has(message.messageId)) {
        duplicates++;
        continue;
      }
      seen.add(message.messageId);
      endToEnd.record(receivedAt - StampedBodies.sentAt(message.data ?? ''));
    }
    firstReceivedAt ||= receivedAt;
    lastReceivedAt = receivedAt;
    if (seen.size >= total) goal.done();
  };
  const subscribers = await openSubscribers(options.stream, options.subscriptionId, onMessages);
  try {
    const all = waitFor(options.workload, options.timeoutMs, subscribers);
    goal.done = all.done;
    const path = `${topicPath(options.topicId)}:publish`;
    let failure: Error | undefined;
    const inFlight = new Set<Promise<void>>();
    let maxInFlight = 0;
    const send = (index: number, scheduledAt: number) => {
      const sentAt = performance.now();
      sendLag.record(sentAt - scheduledAt);
      const request = options.client
        .request('POST', path, stamped.body(options.batch, sentAt))
        .then((response) => {
          publishLatency.since(sentAt);
          if (response.status !== 200)
            throw new Error(`publish -> HTTP ${response.status}: ${response.body.toString().slice(0, 300)}`);
        })
        .catch((error: Error) => {
          failure ??= new Error(`${options.workload}: request ${index}: ${error.message}`);
        })
        .finally(() => inFlight.delete(request));
      inFlight.add(request);
      maxInFlight = Math.max(maxInFlight, inFlight.size);
    };
    const started = performance.now();
    let next = 0;
    while (next < requests && !failure) {
      const now = performance.now();
      const due = Math.min(requests, Math.floor((now - started) / intervalMs) + 1);
      for (; next < due; next++) send(next, started + next * intervalMs);
      if (next < requests) await sleep(Math.max(0, started + next * intervalMs - performance.now()));
    }
    const sendSeconds = (performance.now() - started) / 1000;
    await Promise.all(inFlight);
    if (failure) throw failure;
    await all.wait();
    if (seen.size !== total)
      throw new Error(`${options.workload}: received ${seen.size} distinct messages of ${total}`);
    await settleAndCheck(options.workload, subscribers, options.admin, options.keyPrefix, options.subscriptionId);
    const lag = sendLag.summary();
    const frames = subscribers.reduce((sum, s) => sum + s.deliveryFrames, 0);
    return {
      workload: options.workload,
      messages: total,
      seconds: (lastReceivedAt - started) / 1000,
      msgPerSec: total / ((lastReceivedAt - started) / 1000),
      latency: { [E2E_LATENCY]: endToEnd.summary(), publish: publishLatency.summary() },
      notes: {
        targetMsgPerSec: options.rate,
        messagesPerRequest: options.batch,
        requestsPerSecond: Math.round((1000 / intervalMs) * 10) / 10,
        sendSeconds: Math.round(sendSeconds * 1000) / 1000,
        achievedPublishMsgPerSec: Math.round(total / sendSeconds),
        sendLagP99Ms: lag.p99Ms,
        sendLagMaxMs: lag.maxMs,
        maxRequestsInFlight: maxInFlight,
        duplicates,
        deliveryFrames: frames,
        avgMessagesPerFrame: Math.round((total / Math.max(1, frames)) * 10) / 10,
        perSubscriber: subscribers.map((s) => s.messages).join('/'),
        firstDeliveryAfterMs: Math.round((firstReceivedAt - started) * 1000) / 1000,
      },
    };
  } finally {
    await Promise.all(subscribers.map((s) => s.close()));
  }
}
