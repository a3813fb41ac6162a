// Builds a broker app for a test: a fresh key namespace on the chosen Redis target, an
// optional ManualClock, and an `api` helper that sends JSON and returns status + body.
//
//   const broker = await startBroker(t, { target, clock: new ManualClock() });
//   const { status, body } = await broker.api('PUT', '/v1/projects/p/topics/orders', {});

import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.ts';
import type { Clock } from '../../src/broker/clock.ts';
import { redisTargets, uniquePrefix, type RedisClient, type RedisTarget } from './redis.ts';
import { waitUntil } from './wait.ts';

export type JsonApi = (method: string, url: string, body?: unknown) => Promise<{ status: number; body: any }>;

export interface TestBroker {
  app: FastifyInstance;
  redis: RedisClient;
  prefix: string;
  api: JsonApi;
}

interface Teardown {
  teardown(fn: () => unknown): void;
}

export async function startBroker(
  t: Teardown,
  options: {
    target?: RedisTarget;
    clock?: Clock;
    pullWaitMs?: number;
    name?: string;
    /** The key prefix of a store an earlier broker of the test used (default: a fresh one). */
    prefix?: string;
    stageBodiesFromBytes?: number;
  } = {},
): Promise<TestBroker> {
  const target = options.target ?? redisTargets()[0];
  const redis = target.connect();
  const prefix = options.prefix ?? uniquePrefix(options.name ?? 'broker');
  const app = await buildApp({
    redis,
    keyPrefix: prefix,
    clock: options.clock,
    pullWaitMs: options.pullWaitMs ?? 200,
    stageBodiesFromBytes: options.stageBodiesFromBytes,
  });
  t.teardown(async () => {
    await app.close();
    redis.disconnect();
  });
  return { app, redis, prefix, api: jsonApi(app) };
}

/**
 * Requests to `app` (injected) sending JSON; the answer's body parsed as JSON (a body that is not
 * JSON throws, or with `orText` comes back as text).
 */
export function jsonApi(app: FastifyInstance, { orText = false } = {}): JsonApi {
  return async (method, url, body) => {
    const response = await app.inject({
      method: method as 'GET',
      url,
      ...(body === undefined ? {} : { payload: body as object, headers: { 'content-type': 'application/json' } }),
    });
    return { status: response.statusCode, body: response.body ? parseBody(response.body, orText) : undefined };
  };
}

function parseBody(text: string, orText: boolean): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    if (orText) return text;
    throw error;
  }
}

/** Calls through `api` that must answer 200: the answer's body, or an error naming the call and the answer. */
export function okApi(api: JsonApi): (method: string, url: string, body?: unknown) => Promise<any> {
  return async (method, url, body) => {
    const reply = await api(method, url, body);
    if (reply.status !== 200) throw new Error(`${method} ${url}: ${reply.status} ${JSON.stringify(reply.body)}`);
    return reply.body;
  };
}

/** Waits until `app`'s /readyz answers 200; throws `failure` after 15 s. */
export async function waitReady(app: FastifyInstance, failure = 'not ready'): Promise<void> {
  const ready = async () => (await app.inject({ method: 'GET', url: '/readyz' })).statusCode === 200;
  if (!(await waitUntil(ready, 15_000, 50))) throw new Error(failure);
}

export const b64 = (text: string) => Buffer.from(text).toString('base64');
export const unb64 = (data: string | undefined) => Buffer.from(data ?? '', 'base64').toString();
