// Connection helpers for tests that need Redis.
//
// The servers are started once per `tap` run by test/setup/start-redis.ts
// (tap's `before` program), so tests just connect. tap runs test files in
// parallel against the same servers: isolate with uniquePrefix(), never with
// FLUSHALL/FLUSHDB.
//
// Typical use, running the same test against both deployments:
//
//   for (const target of redisTargets()) {
//     t.test(target.name, async (t) => {
//       const redis = target.connect();
//       t.teardown(() => redis.quit());
//       const prefix = uniquePrefix('topics');
//       ...
//     });
//   }

import { randomBytes } from 'node:crypto';
import { Cluster, Redis } from 'ioredis';
import { SEQS_PER_BLOCK, type TopicKeys } from '../../src/redis/keys.ts';
import { masterNodes, scanKeys as scanAllKeys } from '../../src/redis/nodes.ts';
import { REDIS_HOST, clusterPorts, skipCluster, standalonePort } from '../setup/redis-config.ts';

import type { RedisClient } from '../../src/redis/client.ts';

export type { RedisClient };

/** The connections to every master (the broker's own helper). */
export { masterNodes };

export interface RedisTarget {
  name: 'standalone' | 'cluster';
  /** Creates a new client; the caller owns it and must quit() it. */
  connect: () => RedisClient;
}

/** URL of the standalone test server, redis://127.0.0.1:6391 unless TEST_REDIS_PORT is set. */
export function testRedisUrl(): string {
  return `redis://${REDIS_HOST}:${standalonePort()}`;
}

/** Seed nodes of the test cluster (7391-7393 unless TEST_CLUSTER_PORTS is set). */
export function testClusterNodes(): { host: string; port: number }[] {
  return clusterPorts().map((port) => ({ host: REDIS_HOST, port }));
}

/**
 * A key namespace unique to this call, e.g. "t-acks-3f9a1c2b7d4e".
 *
 * `name` is reduced to [A-Za-z0-9_.-] so it can never smuggle in "{...}": a
 * hash tag in the prefix would pin every key to one cluster slot and hide
 * exactly the cross-slot bugs the cluster target exists to catch.
 */
export function uniquePrefix(name: string): string {
  const safe = name.replace(/[^A-Za-z0-9_.-]+/g, '_').slice(0, 40) || 'x';
  return `t-${safe}-${randomBytes(6).toString('hex')}`;
}

/**
 * The Redis deployments every Redis-touching test should run against.
 * maxRetriesPerRequest: 1 makes a dead server fail a test quickly instead of
 * hanging it until tap's timeout. TEST_SKIP_CLUSTER=1 leaves only standalone.
 */
export function redisTargets(): RedisTarget[] {
  const targets: RedisTarget[] = [
    {
      name: 'standalone',
      connect: () => new Redis(testRedisUrl(), { maxRetriesPerRequest: 1 }),
    },
  ];
  if (!skipCluster()) {
    targets.push({
      name: 'cluster',
      connect: () => new Cluster(testClusterNodes(), { redisOptions: { maxRetriesPerRequest: 1 } }),
    });
  }
  return targets;
}

/** Every key of a Redis deployment matching a pattern (each master of a cluster), sorted. */
export async function scanKeys(redis: RedisClient, pattern: string): Promise<string[]> {
  return (await scanAllKeys(redis, pattern)).sort();
}

/**
 * The message bodies a topic incarnation stores, seq -> body: every body block (keys.ts). On a
 * cluster they are all on the topic's slot, so the client reads each block where it lives.
 */
export async function storedBodies(redis: RedisClient, data: TopicKeys): Promise<Map<string, Buffer>> {
  const bodies = new Map<string, Buffer>();
  for (const key of await scanKeys(redis, `${data.bodies}*`)) {
    const block = Number(key.slice(data.bodies.length));
    const fields = await redis.hgetallBuffer(key);
    for (const [field, body] of Object.entries(fields))
      bodies.set(String(block * SEQS_PER_BLOCK + Number(field)), body);
  }
  return bodies;
}
