import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { buildApp } from './app.ts';
import { loadConfig, ConfigError, type Config } from './config.ts';
import { ManagedRedis, ManagedRedisError } from './redis/managed.ts';
import type { RedisClient } from './redis/scripts.ts';

/**
 * The only file that listens. Starts (or re-adopts) the managed Redis when no REDIS_URL or
 * REDIS_CLUSTER_NODES is given, serves the app, and shuts down gracefully on SIGTERM/SIGINT:
 * stop accepting, release long polls, finish in-flight requests, quit Redis.
 */
const JANITOR_INTERVAL_MS = 60_000;
const CLEANUP_GRACE_US = 60_000_000;

/**
 * Fail fast while Redis is away (the client answers UNAVAILABLE and retries) instead of
 * queueing commands; reconnect on our own with a capped backoff.
 */
const connectionOptions: RedisOptions = {
  enableOfflineQueue: false,
  maxRetriesPerRequest: 1,
  commandTimeout: 10_000,
  retryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
};

/** `queueWhileOffline`: the wake-up subscriber may queue SUBSCRIBEs until it is connected. */
function connect(config: Config, managedUrl: string | undefined, queueWhileOffline = false): RedisClient {
  const options = { ...connectionOptions, enableOfflineQueue: queueWhileOffline };
  if (config.REDIS_CLUSTER_NODES) {
    return new Cluster(config.REDIS_CLUSTER_NODES, {
      enableOfflineQueue: queueWhileOffline,
      redisOptions: options,
      clusterRetryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
    });
  }
  return new Redis(config.REDIS_URL ?? managedUrl!, options);
}

async function main(): Promise<void> {
  const config = loadConfig();
  const log = (message: string) => {
    if (config.LOG_LEVEL !== 'silent') process.stderr.write(`[broker] ${message}\n`);
  };
  const managed =
    config.REDIS_URL || config.REDIS_CLUSTER_NODES
      ? undefined
      : await ManagedRedis.start({
          binary: config.REDIS_SERVER_BIN,
          port: config.REDIS_PORT,
          dataDir: config.DATA_DIR,
          appendfsync: config.REDIS_APPENDFSYNC,
          log,
        });
  const redis = connect(config, managed?.url);
  const subscriber = connect(config, managed?.url, true);
  // Both reconnect by themselves; requests meanwhile answer UNAVAILABLE.
  redis.on('error', () => {});
  subscriber.on('error', () => {});
  const app = await buildApp({
    redis,
    subscriber,
    keyPrefix: config.KEY_PREFIX,
    pullWaitMs: config.PULL_WAIT_SECONDS * 1000,
    logger: { level: config.LOG_LEVEL },
    logRequests: config.LOG_LEVEL === 'debug' || config.LOG_LEVEL === 'trace',
  });

  const janitor = setInterval(() => {
    collectGarbage().catch((error: Error) => log(`clean-up pass failed: ${error.message}`));
  }, JANITOR_INTERVAL_MS);
  janitor.unref();
  /** Drops data left by interrupted creates and deletes, and deletes expired subscriptions. */
  async function collectGarbage() {
    const [seconds, micros] = await redis.time();
    const nowUs = Number(seconds) * 1_000_000 + Number(micros);
    await app.broker.subscriptions.collectGarbage(nowUs - CLEANUP_GRACE_US);
    await app.broker.subscriptions.expireIdle(nowUs);
  }

  let shuttingDown = false;
  const shutdown = async (signal: string) => {
    if (shuttingDown) return;
    shuttingDown = true;
    log(`${signal} received, shutting down`);
    clearInterval(janitor);
    await app.close();
    redis.disconnect();
    subscriber.disconnect();
    await managed?.stop();
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));

  const address = await app.listen({ port: config.PORT, host: config.HOST });
  const redisDescription = managed ? `managed redis-server on ${managed.url} (data in ${config.DATA_DIR})` : 'external Redis';
  log(`listening on ${address}, using ${redisDescription}`);
}

main().catch((error: unknown) => {
  if (error instanceof ConfigError || error instanceof ManagedRedisError) {
    process.stderr.write(`${error.message}\n`);
  } else {
    process.stderr.write(`broker failed to start: ${(error as Error).stack ?? error}\n`);
  }
  process.exit(1);
});
