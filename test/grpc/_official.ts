// What the official-client gRPC tests share: the client, loaded the way an application that
// points it at an emulator would (METADATA_SERVER_DETECTION=none before it is loaded,
// PUBSUB_EMULATOR_HOST and projectId when a PubSub is made: nothing else), and brokers that
// really listen (gRPC needs a socket; app.inject speaks HTTP/1 only).

process.env.METADATA_SERVER_DETECTION = 'none';

import { sampleValue } from '../helpers/metrics.ts';
import type { FastifyInstance } from 'fastify';
import type { AddressInfo } from 'node:net';
import { buildApp } from '../../src/app.ts';
import { testRedisUrl, uniquePrefix, type RedisClient } from '../helpers/redis.ts';
import { Redis } from 'ioredis';

// Loaded after METADATA_SERVER_DETECTION is set (a static import would be hoisted above it).
export const client = await import('@google-cloud/pubsub');
export type PubSub = import('@google-cloud/pubsub').PubSub;
export type Message = import('@google-cloud/pubsub').Message;
export type Subscription = import('@google-cloud/pubsub').Subscription;
export type GoogleError = import('google-gax').GoogleError;

export const PROJECT = 'grpc-project';

/** A PubSub client for the broker at `host` (host:port), configured only by the emulator variable. */
export function pubsubFor(host: string): PubSub {
  process.env.PUBSUB_EMULATOR_HOST = host;
  return new client.PubSub({ projectId: PROJECT });
}

export interface ListeningBroker {
  app: FastifyInstance;
  redis: RedisClient;
  host: string;
  /** HTTP/1 requests that reached the app (REST, WebSocket upgrades), but for the tests' own /metrics reads. */
  http1: string[];
}

/** An in-process broker on the test Redis, listening on a free loopback port. */
export async function listeningBroker(
  t: { teardown(fn: () => unknown): void },
  name: string,
): Promise<ListeningBroker> {
  const redis = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1 });
  const app = await buildApp({ redis, keyPrefix: uniquePrefix(name), pullWaitMs: 2000 });
  const http1: string[] = [];
  app.addHook('onRequest', async (request) => {
    if (request.url !== '/metrics') http1.push(`${request.method} ${request.url}`);
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  t.teardown(async () => {
    await app.close();
    redis.disconnect();
  });
  return { app, redis, host: `127.0.0.1:${(app.server.address() as AddressInfo).port}`, http1 };
}

export const topicPath = (id: string) => `projects/${PROJECT}/topics/${id}`;
export const subscriptionPath = (id: string) => `projects/${PROJECT}/subscriptions/${id}`;
export const unique = (name: string) => `${name}-${Math.random().toString(36).slice(2, 10)}`;

/** The unacknowledged messages of a subscription (leased ones included), from the broker's /metrics. */
export async function backlog(app: FastifyInstance, subscriptionId: string): Promise<number> {
  const text = (await app.inject({ method: 'GET', url: '/metrics' })).body;
  const value = sampleValue(text, 'pubsub_subscription_num_undelivered_messages', {
    project: PROJECT,
    subscription: subscriptionId,
  });
  if (value === undefined) throw new Error(`no backlog line for ${subscriptionId} in /metrics`);
  return value;
}

export { rejection } from '../helpers/official-client.ts';
