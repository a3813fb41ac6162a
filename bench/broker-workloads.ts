/**
 * Workloads against the broker over HTTP (Pub/Sub REST v1): publish (optionally with ordering
 * keys), pull+ack on a backlog, and the Redis memory cost of a retained message.
 */
import type { Redis } from 'ioredis';
import { Keys } from '../src/redis/keys.ts';
import type { HttpClient } from './http.ts';
import { Latency, runConcurrently, sleep, type LatencySummary } from './stats.ts';

export const PROJECT = 'bench';

export interface ThroughputResult {
  workload: string;
  messages: number;
  seconds: number;
  msgPerSec: number;
  /** Latency per request kind (publish, pull, ack, addBulk). */
  latency: Record<string, LatencySummary>;
  notes?: Record<string, number | string>;
}

export interface SubscriptionSpec {
  id: string;
  exactlyOnce?: boolean;
  ordered?: boolean;
  filter?: string;
  deadLetterPolicy?: { deadLetterTopic: string; maxDeliveryAttempts: number };
  retryPolicy?: { minimumBackoff: string; maximumBackoff: string };
  retainAckedMessages?: boolean;
}

/** A message as :pull (and streaming pull) returns it. */
export interface PulledMessage {
  ackId: string;
  message: { messageId: string; data?: string; orderingKey?: string };
}

export const topicPath = (id: string) => `/v1/projects/${PROJECT}/topics/${id}`;
export const subscriptionPath = (id: string) => `/v1/projects/${PROJECT}/subscriptions/${id}`;

/** Creates a topic and its subscriptions (ack deadline 60 s, so nothing expires mid-run). */
export async function createTopic(
  client: HttpClient,
  topicId: string,
  subscriptions: SubscriptionSpec[],
): Promise<void> {
  await client.json('PUT', topicPath(topicId), {});
  for (const sub of subscriptions) {
    await client.json('PUT', subscriptionPath(sub.id), {
      topic: `projects/${PROJECT}/topics/${topicId}`,
      ackDeadlineSeconds: 60,
      ...(sub.exactlyOnce ? { enableExactlyOnceDelivery: true } : {}),
      ...(sub.ordered ? { enableMessageOrdering: true } : {}),
      ...(sub.filter ? { filter: sub.filter } : {}),
      ...(sub.deadLetterPolicy ? { deadLetterPolicy: sub.deadLetterPolicy } : {}),
      ...(sub.retryPolicy ? { retryPolicy: sub.retryPolicy } : {}),
      ...(sub.retainAckedMessages ? { retainAckedMessages: true } : {}),
    });
  }
}

export async function deleteTopic(client: HttpClient, topicId: string, subscriptionIds: string[]): Promise<void> {
  for (const id of subscriptionIds) await client.json('DELETE', subscriptionPath(id));
  await client.json('DELETE', topicPath(topicId));
}

/**
 * Publishes `messages` messages in requests of `bodies[i]` (each `batch` messages), from
 * `concurrency` concurrent publishers; rate = messages / wall time. With several clients
 * (endpoints), request i goes through `client[i % client.length]`: the publish is split evenly.
 *
 * Ordered publishing: `body(i)` builds request i (one ordering key per request) and
 * `orderingKeyOf(i)` names its key; like the official clients, a key has at most one publish
 * in flight, so the broker accepts a key's requests in request order. `onPublished` gets the
 * message IDs of each request.
 */
export async function publishWorkload(options: {
  workload: string;
  client: HttpClient | HttpClient[];
  topicId: string;
  messages: number;
  batch: number;
  concurrency: number;
  bodies: Buffer[];
  timeoutMs: number;
  body?: (index: number) => Buffer;
  orderingKeyOf?: (index: number) => number;
  onPublished?: (index: number, messageIds: string[]) => void;
}): Promise<ThroughputResult> {
  const { batch, bodies } = options;
  const clients = Array.isArray(options.client) ? options.client : [options.client];
  const inFlightByKey = new Map<number, Promise<unknown>>();
  const requests = Math.ceil(options.messages / batch);
  if (options.messages % batch !== 0)
    throw new Error(`message count ${options.messages} is not a multiple of ${batch}`);
  const path = `${topicPath(options.topicId)}:publish`;
  const latency = new Latency();
  let next = 0;
  const seconds = await runConcurrently(options.concurrency, options.timeoutMs, options.workload, async (_, stop) => {
    while (!stop()) {
      const index = next++;
      if (index >= requests) return;
      const key = options.orderingKeyOf?.(index);
      let settled = () => {};
      if (key !== undefined) {
        const previous = inFlightByKey.get(key);
        const mine = new Promise<void>((resolve) => {
          settled = () => {
            if (inFlightByKey.get(key) === mine) inFlightByKey.delete(key);
            resolve();
          };
        });
        inFlightByKey.set(key, mine);
        if (previous) await previous;
      }
      try {
        const body = options.body ? options.body(index) : bodies[index % bodies.length];
        const started = performance.now();
        const response = await clients[index % clients.length].request('POST', path, body);
        latency.since(started);
        if (response.status !== 200) {
          throw new Error(`publish -> HTTP ${response.status}: ${response.body.toString().slice(0, 300)}`);
        }
        const ids = (JSON.parse(response.body.toString()) as { messageIds?: string[] }).messageIds;
        if (ids?.length !== batch) throw new Error(`publish returned ${ids?.length} message IDs for ${batch} messages`);
        options.onPublished?.(index, ids);
      } finally {
        settled();
      }
    }
  });
  return {
    workload: options.workload,
    messages: options.messages,
    seconds,
    msgPerSec: options.messages / seconds,
    latency: { publish: latency.summary() },
  };
}

/**
 * Drains a backlog of exactly `messages` messages: each of `concurrency` pullers pulls up to
 * `maxMessages` (returnImmediately) and acks the whole batch with one :acknowledge call.
 * Rate = acknowledged messages / wall time. Fails on any non-200 (exactly-once acks report
 * per-ID failures as errors) or if the backlog does not come out exactly once.
 */
export async function pullAckWorkload(options: {
  workload: string;
  client: HttpClient;
  subscriptionId: string;
  messages: number;
  maxMessages: number;
  concurrency: number;
  timeoutMs: number;
  /** Sees every pulled batch before it is acked (e.g. an ordering check). */
  onBatch?: (batch: PulledMessage[]) => void;
  /** Acknowledges a pulled batch its own way (default: one :acknowledge); latencies by request kind. */
  settle?: (batch: PulledMessage[], latency: (kind: string, started: number) => void) => Promise<void>;
}): Promise<ThroughputResult> {
  const { client } = options;
  const pullPath = `${subscriptionPath(options.subscriptionId)}:pull`;
  const ackPath = `${subscriptionPath(options.subscriptionId)}:acknowledge`;
  const pullBody = Buffer.from(JSON.stringify({ maxMessages: options.maxMessages, returnImmediately: true }));
  const pullLatency = new Latency();
  const ackLatency = new Latency();
  const settleLatencies = new Map<string, Latency>();
  const settleLatency = (kind: string, started: number) => {
    if (!settleLatencies.has(kind)) settleLatencies.set(kind, new Latency());
    settleLatencies.get(kind)!.since(started);
  };
  let received = 0;
  let acked = 0;
  let pulls = 0;
  let emptyPulls = 0;
  const seconds = await runConcurrently(options.concurrency, options.timeoutMs, options.workload, async (_, stop) => {
    while (!stop() && received < options.messages) {
      const pullStarted = performance.now();
      const response = await client.request('POST', pullPath, pullBody);
      pullLatency.since(pullStarted);
      pulls++;
      if (response.status !== 200) {
        throw new Error(`pull -> HTTP ${response.status}: ${response.body.toString().slice(0, 300)}`);
      }
      const batch =
        (JSON.parse(response.body.toString()) as { receivedMessages?: PulledMessage[] }).receivedMessages ?? [];
      if (batch.length === 0) {
        // Others hold the rest (leased, not yet acked) or it is all gone.
        emptyPulls++;
        await sleep(2);
        continue;
      }
      received += batch.length;
      options.onBatch?.(batch);
      if (options.settle) {
        await options.settle(batch, settleLatency);
        acked += batch.length;
        continue;
      }
      const ackBody = JSON.stringify({ ackIds: batch.map((m) => m.ackId) });
      const ackStarted = performance.now();
      const ack = await client.request('POST', ackPath, ackBody);
      ackLatency.since(ackStarted);
      if (ack.status !== 200)
        throw new Error(`acknowledge -> HTTP ${ack.status}: ${ack.body.toString().slice(0, 300)}`);
      acked += batch.length;
    }
  });
  if (acked !== options.messages) {
    throw new Error(`${options.workload}: acked ${acked} messages, expected exactly ${options.messages}`);
  }
  const after = (await client.json('POST', pullPath, { maxMessages: 10, returnImmediately: true })) as {
    receivedMessages?: unknown[];
  };
  if (after.receivedMessages?.length) throw new Error(`${options.workload}: the backlog was not empty after the run`);
  return {
    workload: options.workload,
    messages: acked,
    seconds,
    msgPerSec: acked / seconds,
    latency: options.settle
      ? {
          pull: pullLatency.summary(),
          ...Object.fromEntries([...settleLatencies].map(([kind, latency]) => [kind, latency.summary()])),
        }
      : { pull: pullLatency.summary(), ack: ackLatency.summary() },
    notes: {
      pulls,
      emptyPulls,
      avgMessagesPerPull: Math.round((received / Math.max(1, pulls - emptyPulls)) * 10) / 10,
    },
  };
}

// ------------------------------------------------------------------ ordering

/**
 * Checks ordered delivery: every pulled message of a key must be the key's next message in
 * publish order (as the publish responses reported it). Nothing is redelivered in these runs
 * (60 s ack deadline, everything acked), so any other message is a violation.
 */
export class OrderChecker {
  private readonly published = new Map<string, string[]>();
  private readonly delivered = new Map<string, number>();
  violations = 0;
  firstViolation?: string;

  /** Records one publish request's message IDs, in order, under its key. */
  record(key: string, messageIds: string[]): void {
    let ids = this.published.get(key);
    if (!ids) this.published.set(key, (ids = []));
    for (const id of messageIds) ids.push(id);
  }

  check(batch: PulledMessage[]): void {
    for (const { message } of batch) {
      const key = message.orderingKey;
      if (!key) {
        this.violation(`message ${message.messageId} came without its ordering key`);
        continue;
      }
      const position = this.delivered.get(key) ?? 0;
      const expected = this.published.get(key)?.[position];
      if (expected !== message.messageId) {
        this.violation(`key ${key}: got message ${message.messageId} where ${expected} (#${position}) was due`);
      }
      this.delivered.set(key, position + 1);
    }
  }

  private violation(text: string): void {
    this.violations++;
    this.firstViolation ??= text;
  }
}

/** Messages of a subscription still queued (ready) and leased (unacked), read from Redis. */
export async function subscriptionBacklog(
  admin: Redis,
  keyPrefix: string,
  subscriptionId: string,
): Promise<{ ready: number; leased: number } | undefined> {
  const keys = new Keys(keyPrefix);
  const subJson = await admin.hget(keys.subscriptions, `projects/${PROJECT}/subscriptions/${subscriptionId}`);
  if (!subJson) return undefined;
  const { uid, topicUid } = JSON.parse(subJson) as { uid: string; topicUid: string };
  const sub = keys.topicData(topicUid).subscription(uid);
  const [ready, leased] = await Promise.all([admin.llen(sub.ready), admin.zcard(sub.leased)]);
  return { ready, leased };
}

// ------------------------------------------------------------------ memory

export interface MemoryResult {
  messages: number;
  dataBytes: number;
  subscriptions: number;
  usedMemoryBefore: number;
  usedMemoryAfter: number;
  bytesPerMessage: number;
  /** MEMORY USAGE of the topic's data keys after publishing, per retained message. */
  breakdownBytesPerMessage: Record<string, number>;
  publish: ThroughputResult;
}

export async function usedMemory(admin: Redis): Promise<number> {
  const info = await admin.info('memory');
  return Number(/used_memory:(\d+)/.exec(info)?.[1]);
}

/** Lets AOF flushes and client buffer shrinking settle, then reads used_memory. */
async function settledUsedMemory(admin: Redis): Promise<number> {
  await sleep(2500);
  return usedMemory(admin);
}

/**
 * Bytes of Redis memory per retained message: `messages` messages of exactly `dataBytes`
 * bytes published to a fresh topic with two subscriptions, nothing pulled or acked.
 */
export async function memoryWorkload(options: {
  client: HttpClient;
  admin: Redis;
  keyPrefix: string;
  topicId: string;
  subscriptionIds: [string, string];
  messages: number;
  batch: number;
  concurrency: number;
  bodies: Buffer[];
  timeoutMs: number;
}): Promise<MemoryResult> {
  const { client, admin } = options;
  await createTopic(
    client,
    options.topicId,
    options.subscriptionIds.map((id) => ({ id })),
  );
  const before = await settledUsedMemory(admin);
  const publish = await publishWorkload({
    workload: 'publish (memory, 2 subscriptions)',
    client,
    topicId: options.topicId,
    messages: options.messages,
    batch: options.batch,
    concurrency: options.concurrency,
    bodies: options.bodies,
    timeoutMs: options.timeoutMs,
  });
  const after = await settledUsedMemory(admin);
  const breakdown = await dataKeyUsage(admin, options.keyPrefix, options.topicId, options.subscriptionIds);
  const perMessage = Object.fromEntries(
    Object.entries(breakdown).map(([name, bytes]) => [name, Math.round((bytes / options.messages) * 10) / 10]),
  );
  return {
    messages: options.messages,
    dataBytes: 1024,
    subscriptions: options.subscriptionIds.length,
    usedMemoryBefore: before,
    usedMemoryAfter: after,
    bytesPerMessage: Math.round(((after - before) / options.messages) * 10) / 10,
    breakdownBytesPerMessage: perMessage,
    publish,
  };
}

/** MEMORY USAGE (exact: SAMPLES 0) of every data key of one topic (its body blocks summed). */
async function dataKeyUsage(
  admin: Redis,
  keyPrefix: string,
  topicId: string,
  subscriptionIds: string[],
): Promise<Record<string, number>> {
  const keys = new Keys(keyPrefix);
  const topicJson = await admin.hget(keys.topics, `projects/${PROJECT}/topics/${topicId}`);
  if (!topicJson) return {};
  const data = keys.topicData((JSON.parse(topicJson) as { uid: string }).uid);
  const usage: Record<string, number> = { bodies: 0 };
  for await (const blockKeys of admin.scanStream({ match: `${data.bodies}*`, count: 1000 })) {
    for (const key of blockKeys as string[])
      usage.bodies += Number((await admin.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')) ?? 0);
  }
  const named: Record<string, string> = { refs: data.refs };
  for (const [i, id] of subscriptionIds.entries()) {
    const subJson = await admin.hget(keys.subscriptions, `projects/${PROJECT}/subscriptions/${id}`);
    if (!subJson) continue;
    const sub = data.subscription((JSON.parse(subJson) as { uid: string }).uid);
    named[`ready[${i}]`] = sub.ready;
  }
  for (const [name, key] of Object.entries(named)) {
    usage[name] = Number((await admin.call('MEMORY', 'USAGE', key, 'SAMPLES', '0')) ?? 0);
  }
  return usage;
}
