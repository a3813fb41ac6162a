// In-process brokers of a deployment with regions: one redis-server process per region (started
// here, so that a test can kill and restart a region's Redis), and one app per region, built
// with buildApp the way src/server.ts builds it (fail-fast connections that reconnect).
//
//   const deployment = await startRegions(t, ['a', 'b', 'c']);
//   await deployment.api('a', 'PUT', '/v1/projects/p/topics/t1', {});
//   await deployment.redis.get('c')!.kill();   // ... and later .start(), then waitReady('c')

import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { buildApp } from '../../src/app.ts';
import { jsonApi, waitReady as waitAppReady } from './app.ts';
import { startRedisProcess, type RedisProcess } from './redis-process.ts';
import { uniquePrefix } from './redis.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** The connection settings of src/server.ts: fail fast while a region is away, reconnect quickly. */
function connect(url: string, queueWhileOffline = false): Redis {
  const client = new Redis(url, {
    enableOfflineQueue: queueWhileOffline,
    maxRetriesPerRequest: 1,
    commandTimeout: 3_000,
    retryStrategy: () => 50,
  });
  client.on('error', () => {});
  return client;
}

export interface RegionBroker {
  app: FastifyInstance;
  connections: Redis[];
}

export interface Deployment {
  redis: Map<string, RedisProcess>;
  brokers: Map<string, RegionBroker>;
  prefix: string;
  /** A JSON request through one region's endpoint. */
  api: (region: string, method: string, url: string, body?: unknown) => Promise<{ status: number; body: any }>;
  /** Waits until the region's endpoint reports itself ready (its Redis reachable and synced). */
  waitReady: (region: string) => Promise<void>;
}

export async function startRegions(
  t: Teardown,
  names: string[],
  options: { pullWaitMs?: number } = {},
): Promise<Deployment> {
  const prefix = uniquePrefix('regions');
  const redis = new Map<string, RedisProcess>();
  for (const name of names) redis.set(name, await startRedisProcess(t, `redis-${name}`));
  const brokers = new Map<string, RegionBroker>();
  for (const local of names) {
    const connections: Redis[] = [];
    const region = (name: string) => {
      const url = redis.get(name)!.url;
      const pair = { name, redis: connect(url), subscriber: connect(url, true) };
      connections.push(pair.redis, pair.subscriber);
      return pair;
    };
    const own = region(local);
    const app = await buildApp({
      redis: own.redis,
      subscriber: own.subscriber,
      keyPrefix: prefix,
      pullWaitMs: options.pullWaitMs ?? 300,
      regions: { local, others: names.filter((name) => name !== local).map(region) },
    });
    brokers.set(local, { app, connections });
    t.teardown(async () => {
      await app.close();
      for (const connection of connections) connection.disconnect();
    });
  }
  const api = async (region: string, method: string, url: string, body?: unknown) =>
    jsonApi(brokers.get(region)!.app, { orText: true })(method, url, body);
  const waitReady = (region: string) => waitAppReady(brokers.get(region)!.app, `region ${region} not ready after 15 s`);
  for (const name of names) await waitReady(name);
  return { redis, brokers, prefix, api, waitReady };
}
