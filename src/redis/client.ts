import type { Cluster, Redis } from 'ioredis';

/** A connection to a standalone Redis or to a Redis Cluster: the broker works with either. */
export type RedisClient = Redis | Cluster;

/**
 * Another connection to the same Redis (or Cluster) for one call whose script may run longer than
 * the broker's command timeout allows (a seek over a large backlog): commands wait for it to
 * connect, and time out only after `timeoutMs`. The caller disconnects it.
 */
export function longCallConnection(redis: RedisClient, timeoutMs: number): RedisClient {
  // No ready check: it would fail while another script keeps Redis busy; the call itself then
  // fails with BUSY, which the caller answers as retryable.
  const options = { commandTimeout: timeoutMs, enableOfflineQueue: true, enableReadyCheck: false };
  const connection =
    'isCluster' in redis && redis.isCluster
      ? (redis as Cluster).duplicate(undefined, {
          redisOptions: { ...(redis as Cluster).options.redisOptions, ...options },
        })
      : (redis as Redis).duplicate(options);
  // Its errors reach the call that uses it; an 'error' event without a listener would end the process.
  connection.on('error', () => {});
  return connection;
}
