import { Cluster, Redis, type RedisOptions } from 'ioredis';
import { readFileSync } from 'node:fs';
import { buildApp } from './app.ts';
import { Authentication, AuthenticationSetupError } from './auth/authentication.ts';
import { createBroker } from './broker/broker.ts';
import type { Region } from './broker/regions.ts';
import { loadConfig, ConfigError, type RegionRedis } from './config.ts';
import { ManagedRedis, ManagedRedisError } from './redis/managed.ts';
import type { RedisClient } from './redis/client.ts';
import { coalesceWrites } from './redis/coalesced-writes.ts';

/**
 * The only file that listens. Starts (or re-adopts) the managed Redis when no REDIS_URL or
 * REDIS_CLUSTER_NODES is given, serves the app, and shuts down gracefully on SIGTERM/SIGINT:
 * stop accepting, release long polls, finish in-flight requests, quit Redis.
 */
const JANITOR_INTERVAL_MS = 60_000;

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
function connect(target: RegionRedis, queueWhileOffline = false): RedisClient {
  const options = { ...connectionOptions, enableOfflineQueue: queueWhileOffline };
  const client = target.clusterNodes
    ? new Cluster(target.clusterNodes, {
        enableOfflineQueue: queueWhileOffline,
        redisOptions: options,
        clusterRetryStrategy: (attempt) => Math.min(attempt * 100, 2_000),
      })
    : new Redis(target.url!, options);
  // It reconnects by itself; requests meanwhile answer UNAVAILABLE.
  client.on('error', () => {});
  coalesceWrites(client);
  return client;
}

/** A region's Redis: the command connection and the wake-up subscriber. */
function connectRegion(target: RegionRedis) {
  return { name: target.name, redis: connect(target), subscriber: connect(target, true) };
}

/** A PEM file a setting names; one that cannot be read stops the broker, naming the setting. */
function readPem(setting: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (error) {
    throw new ConfigError(`${setting} ${path}: ${(error as Error).message}`);
  }
}

async function main(): Promise<void> {
  const config = loadConfig();
  const log = (message: string) => {
    if (config.LOG_LEVEL !== 'silent') process.stderr.write(`[broker] ${message}\n`);
  };
  // Before anything starts: a credential file that cannot be read stops the broker here.
  const authentication = Authentication.fromConfig(config, { info: log, warn: log });
  const managed =
    config.REDIS_URL || config.REDIS_CLUSTER_NODES || config.REGIONS
      ? undefined
      : await ManagedRedis.start({
          binary: config.REDIS_SERVER_BIN,
          port: config.REDIS_PORT,
          dataDir: config.DATA_DIR,
          appendfsync: config.REDIS_APPENDFSYNC,
          log,
        });
  const local = connectRegion(
    config.REGIONS?.find((region) => region.name === config.REGION) ?? {
      name: '',
      url: config.REDIS_URL ?? managed?.url,
      clusterNodes: config.REDIS_CLUSTER_NODES,
    },
  );
  const others = (config.REGIONS ?? []).filter((region) => region.name !== config.REGION).map(connectRegion);
  const { redis, subscriber } = local;
  // A store laid out by another version of the broker is never served. The local region's: the
  // broker says why and exits (before it listens, when Redis answers at start); another region's
  // stays out of use, and the broker serves from the others.
  let refusal: string | undefined;
  let refuseStore = (problem: string) => void (refusal ??= problem);
  const refuseRegionStore = (problem: string, region: Region) => {
    if (region.name === (config.REGION ?? '')) refuseStore(problem);
    else log(`region ${region.name} is left out of use: ${problem}`);
  };
  const logger = { level: config.LOG_LEVEL };
  const tls = config.TLS_CERT_FILE
    ? { cert: readPem('TLS_CERT_FILE', config.TLS_CERT_FILE), key: readPem('TLS_KEY_FILE', config.TLS_KEY_FILE!) }
    : undefined;
  const app = await buildApp({
    authentication,
    corsOrigins: config.CORS_ORIGINS,
    tls,
    logger,
    logRequests: config.LOG_LEVEL === 'debug' || config.LOG_LEVEL === 'trace',
    maxConnections: config.MAX_CONNECTIONS,
    maxBodyBytesInFlight: config.MAX_BODY_MIB_IN_FLIGHT * 2 ** 20,
    broker: await createBroker({
      redis,
      subscriber,
      regions: config.REGION ? { local: config.REGION, others } : undefined,
      keyPrefix: config.KEY_PREFIX,
      pullWaitMs: config.PULL_WAIT_SECONDS * 1000,
      onStorageProblem: refuseRegionStore,
      janitorIntervalMs: JANITOR_INTERVAL_MS,
      push: { hosts: config.PUSH_ENDPOINT_HOSTS },
      limits: {
        topicsPerProject: config.MAX_TOPICS_PER_PROJECT,
        subscriptionsPerProject: config.MAX_SUBSCRIPTIONS_PER_PROJECT,
        subscriptionsPerTopic: config.MAX_SUBSCRIPTIONS_PER_TOPIC,
        snapshotsPerProject: config.MAX_SNAPSHOTS_PER_PROJECT,
        streamsPerSubscription: config.MAX_STREAMS_PER_SUBSCRIPTION,
        streams: config.MAX_STREAMS,
        longPolls: config.MAX_LONG_POLLS,
        requestsPerSecond: config.RATE_LIMIT_PER_SECOND,
      },
      log: { warn: log, error: log },
      authorization: authentication?.authorization(),
    }),
  });

  let shuttingDown = false;
  const shutdown = async (reason: string, exitCode = 0) => {
    if (shuttingDown) return;
    shuttingDown = true;
    log(`${reason}, shutting down`);
    // The broker ends long polls and streams while the server finishes its other requests.
    authentication?.close();
    await Promise.all([app.close(), app.broker.close()]);
    for (const region of [local, ...others]) {
      region.redis.disconnect();
      region.subscriber.disconnect();
    }
    await managed?.stop();
    process.exit(exitCode);
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM received'));
  process.on('SIGINT', () => void shutdown('SIGINT received'));
  // SIGHUP re-reads the credential files (they are also watched); without authentication it is ignored.
  process.on('SIGHUP', () => authentication?.reload());
  authentication?.watch();

  refuseStore = (problem) => {
    log(problem);
    void shutdown('refusing this store', 1);
  };
  if (refusal) return refuseStore(refusal);

  const address = await app.listen({ port: config.PORT, host: config.HOST });
  const redisDescription = managed
    ? `managed redis-server on ${managed.url} (data in ${config.DATA_DIR})`
    : config.REGION
      ? `region ${config.REGION} of ${config.REGIONS!.map((region) => region.name).join(', ')}`
      : 'external Redis';
  const callers = authentication ? 'callers authenticated' : 'no authentication';
  const transport = tls ? 'over TLS' : 'in clear text';
  log(`listening on ${address} (gRPC, REST and WebSocket ${transport}; ${callers}), using ${redisDescription}`);
}

main().catch((error: unknown) => {
  if (error instanceof ConfigError || error instanceof ManagedRedisError || error instanceof AuthenticationSetupError) {
    process.stderr.write(`${error.message}\n`);
  } else {
    process.stderr.write(`broker failed to start: ${(error as Error).stack ?? error}\n`);
  }
  process.exit(1);
});
