// Shared pieces of the client tests: a broker that really listens (streaming pull needs a
// socket), REST calls against it, a WebSocket class that records what the client sends, and
// polling helpers.

import type { FastifyInstance } from 'fastify';
import { WebSocket } from 'ws';
import { buildApp } from '../../src/app.ts';
import { redisTargets, uniquePrefix, type RedisClient } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';

export interface LiveBroker {
  app: FastifyInstance;
  redis: RedisClient;
  /** http://127.0.0.1:{port} */
  url: string;
  rest: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>;
  /** Creates topic `topic` and subscription `subscription` (with extra subscription fields) in project `p`. */
  createPair: (topic: string, subscription: string, fields?: Record<string, unknown>) => Promise<void>;
}

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** buildApp on the standalone test Redis, listening on a free port (it serves the examples too). */
export async function startLiveBroker(
  t: Teardown,
  options: { name: string; heartbeatMs?: number },
): Promise<LiveBroker> {
  const redis = redisTargets()[0].connect();
  const app = await buildApp({
    redis,
    keyPrefix: uniquePrefix(options.name),
    streamHeartbeatMs: options.heartbeatMs ?? 200,
    pullWaitMs: 200,
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(async () => {
    await app.close();
    redis.disconnect();
  });
  const { port } = app.server.address() as { port: number };
  const url = `http://127.0.0.1:${port}`;
  const rest = async (method: string, path: string, body?: unknown) => {
    const response = await fetch(`${url}${path}`, {
      method,
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  };
  const createPair = async (topic: string, subscription: string, fields: Record<string, unknown> = {}) => {
    const created = await rest('PUT', `/v1/projects/p/topics/${topic}`, {});
    if (created.status !== 200) throw new Error(`create topic: ${JSON.stringify(created)}`);
    const sub = await rest('PUT', `/v1/projects/p/subscriptions/${subscription}`, {
      topic: `projects/p/topics/${topic}`,
      ...fields,
    });
    if (sub.status !== 200) throw new Error(`create subscription: ${JSON.stringify(sub)}`);
  };
  return { app, redis, url, rest, createPair };
}

/** One WebSocket the client opened, and every frame it sent (parsed). */
export interface RecordedStream {
  url: string;
  sent: any[];
  socket: WebSocket;
}

/** A `ws` WebSocket subclass that records the frames the client sends, stream by stream. */
export function recordingWebSocket(): { WebSocket: typeof WebSocket; streams: RecordedStream[] } {
  const streams: RecordedStream[] = [];
  class RecordingWebSocket extends WebSocket {
    constructor(url: string) {
      super(url);
      const stream: RecordedStream = { url, sent: [], socket: this };
      streams.push(stream);
      const send = this.send.bind(this) as (data: string) => void;
      (this as unknown as { send: (data: string) => void }).send = (data: string) => {
        stream.sent.push(JSON.parse(data));
        send(data);
      };
    }
  }
  return { WebSocket: RecordingWebSocket as unknown as typeof WebSocket, streams };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls until `condition` holds; fails with `what` after `timeoutMs`. */
export async function waitFor(condition: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  if (!(await waitUntil(condition, timeoutMs, 10)))
    throw new Error(`timed out after ${timeoutMs} ms waiting for: ${what}`);
}

/**
 * Proves that every one of `ackIds` was really acknowledged: nack them all over REST (a no-op
 * for acked deliveries, and it makes any un-acked one available at once), then pull: nothing
 * may come back.
 */
export async function assertNothingLeft(
  t: { same: (...args: any[]) => unknown; equal: (...args: any[]) => unknown },
  broker: LiveBroker,
  subscription: string,
  ackIds: string[],
): Promise<void> {
  for (let i = 0; i < ackIds.length; i += 500) {
    const nack = await broker.rest('POST', `/v1/projects/p/subscriptions/${subscription}:modifyAckDeadline`, {
      ackIds: ackIds.slice(i, i + 500),
      ackDeadlineSeconds: 0,
    });
    // Exactly-once subscriptions answer 400 EXACTLY_ONCE_ACKID_FAILURE for used-up ack IDs.
    const ok = nack.status === 200 || nack.body?.error?.details?.[0]?.reason === 'EXACTLY_ONCE_ACKID_FAILURE';
    t.equal(ok, true, 'nacking the acked deliveries is accepted');
  }
  const pulled = await broker.rest('POST', `/v1/projects/p/subscriptions/${subscription}:pull`, {
    maxMessages: 1000,
    returnImmediately: true,
  });
  t.same(
    (pulled.body.receivedMessages ?? []).map((m: any) => Buffer.from(m.message.data ?? '', 'base64').toString()),
    [],
    'nothing is left on the subscription',
  );
}
