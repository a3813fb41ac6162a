import type { RedisClient } from '../redis/client.ts';
import { PublishBatches } from '../redis/calls/publish-batch.ts';
import { Keys } from '../redis/keys.ts';
import { Scripts } from '../redis/scripts.ts';
import { ackIdCodecLoader } from './ack-id.ts';
import { type AuthorizationSettings, Authorizer } from './authorization.ts';
import { BacklogService } from './backlog.ts';
import type { CallContext } from './call-context.ts';
import { type Clock, nowUs as clockNowUs, PublishClock, redisClock, redisTimeUs } from './clock.ts';
import type { BrokerContext } from './context.ts';
import { ControlPlane, loadAckSecret } from './control-plane.ts';
import { DeliveryService } from './delivery.ts';
import { type BrokerLimits, DEFAULT_LIMITS, longPollPlaces, RequestRateLimiter, ResourceLimits } from './limits.ts';
import { BrokerMetrics } from './metrics.ts';
import { ReplayService } from './replay.ts';
import { PushService } from './push.ts';
import type { PushHosts } from './push-config.ts';
import { Region, Regions } from './regions.ts';
import { SnapshotService } from './snapshots.ts';
import { guardStorageFormat } from './storage-guard.ts';
import { StreamRegistry } from './streams.ts';
import { SubscriptionRecords } from './subscription-records.ts';
import { SubscriptionService } from './subscriptions.ts';
import { TopicService } from './topics.ts';
import { Wakeups } from './wakeups.ts';

/** What a broker is made of: its Redis connections and settings. No front end is involved. */
export interface BrokerConfig {
  /** Commands go here. The broker never closes it: whoever made it owns it. */
  redis: RedisClient;
  /** A second connection for wake-up notifications; made with `redis.duplicate()` if absent. */
  subscriber?: RedisClient;
  keyPrefix?: string;
  clock?: Clock;
  /** Upper bound of a long-polling pull (`returnImmediately: false`), in milliseconds. */
  pullWaitMs?: number;
  /** How long a single-region broker reuses a topic record for publishing, in milliseconds (default 1 s). */
  rememberTopicMs?: number;
  /**
   * How long a single-region broker reuses a subscription record for unary pulls
   * (`returnImmediately`), acknowledgements and deadline changes, in milliseconds (default 1 s).
   */
  rememberSubscriptionMs?: number;
  /**
   * Publishes whose stored bodies reach this many bytes stage them in a hash before the publish
   * script runs, instead of passing them to it (default 16 KiB; see publish.lua).
   */
  stageBodiesFromBytes?: number;
  /**
   * Hears that a region's store is laid out by another version of the broker (storage-format.ts);
   * that region is not used. Default: an error in the log (src/server.ts exits when it is the
   * local region's).
   */
  onStorageProblem?: (problem: string, region: Region) => void;
  /** How long createBroker waits for Redis to connect and its store to be checked (default 5 s; the check goes on after). */
  firstConnectWaitMs?: number;
  /** Heartbeat period of streaming pulls, in milliseconds (default 15 s). */
  streamHeartbeatMs?: number;
  /**
   * How often the broker drops data left by interrupted creates and deletes and deletes expired
   * subscriptions, in milliseconds. Off when absent (tests run the passes themselves).
   */
  janitorIntervalMs?: number;
  /**
   * A deployment with regions: this endpoint's region name (its Redis is `redis`) and every other
   * region's Redis. Without it there is one region and nothing is synced.
   */
  regions?: { local: string; others: RegionConnection[] };
  /** Where the broker reports what an operator should know. Default: nowhere. */
  log?: BrokerLog;
  /** Who may do what (authorization.ts). Default: every call is allowed (no one is authenticated). */
  authorization?: AuthorizationSettings;
  /** The limits that protect it (limits.ts); each one absent keeps its default. */
  limits?: Partial<BrokerLimits>;
  /** Push delivery (push.ts). */
  push?: {
    /** The hosts push endpoints may name: '*' (the default) for any. */
    hosts?: PushHosts;
    /** How long close() lets push requests under way finish, in milliseconds (default 5 s). */
    closeWaitMs?: number;
    /** How often the push subscriptions are listed again without an announcement (default 30 s). */
    relistIntervalMs?: number;
  };
}

export interface RegionConnection {
  name: string;
  /** The caller owns it, as it owns `redis`. */
  redis: RedisClient;
  /** Made with `redis.duplicate()` if absent. */
  subscriber?: RedisClient;
}

export interface BrokerLog {
  warn(message: string): void;
  error(message: string): void;
}

/** The broker without any front end: every front end (REST, WebSocket, gRPC) is an adapter over it. */
export interface Broker {
  /** This endpoint's region. */
  ctx: BrokerContext;
  regions: Regions;
  controlPlane: ControlPlane;
  topics: TopicService;
  subscriptions: SubscriptionService;
  delivery: DeliveryService;
  streams: StreamRegistry;
  push: PushService;
  snapshots: SnapshotService;
  replay: ReplayService;
  backlog: BacklogService;
  /** Permission checks, and the IAM methods (getIamPolicy, setIamPolicy, testIamPermissions). */
  iam: Authorizer;
  /** The Prometheus metrics (metrics.ts). */
  metrics: BrokerMetrics;
  /** The limits in force (limits.ts). */
  limits: BrokerLimits;
  /**
   * Counts one call of the caller against the request rate limit, if there is one: throws
   * RESOURCE_EXHAUSTED past it. Every front end calls it once per call, before the call runs.
   */
  admit(caller: CallContext): void;
  /**
   * One pass of the janitor: interrupted creates and deletes cleaned up, idle subscriptions and
   * snapshots past their expireTime deleted, retained logs expired.
   */
  collectGarbage(): Promise<void>;
  /**
   * Ends long polls and streams (clients reconnect elsewhere), stops the background jobs and
   * closes the connections the broker made. The connections it was given stay open.
   */
  close(): Promise<void>;
}

/** How long createBroker waits by default for each region's store to be checked (storage-guard.ts). */
const FIRST_CONNECT_WAIT_MS = 5_000;
/** Data marked for clean-up is dropped once it is this old: an attach or delete under way is never raced. */
const CLEANUP_GRACE_US = 60_000_000;

const silentLog: BrokerLog = { warn: () => {}, error: () => {} };

/** Builds the broker: its regions, services and background jobs. It serves nothing by itself. */
export async function createBroker(config: BrokerConfig): Promise<Broker> {
  const log = config.log ?? silentLog;
  const keys = new Keys(config.keyPrefix ?? 'ps');
  const clock = config.clock ?? redisClock;
  const multiRegion = config.regions !== undefined;
  /** Subscriber connections this broker made, and so closes. */
  const ownSubscribers: RedisClient[] = [];
  const makeRegion = (name: string, redis: RedisClient, subscriber: RedisClient | undefined) => {
    if (!subscriber) ownSubscribers.push((subscriber = redis.duplicate()));
    const publishClock = new PublishClock(clock, () => redisTimeUs(redis));
    const scripts = new Scripts(redis);
    const publishBatches = new PublishBatches(scripts);
    const ctx: BrokerContext = { redis, keys, scripts, clock, publishClock, publishBatches };
    return new Region(name, ctx, new Wakeups(subscriber), multiRegion);
  };
  const regions = new Regions(
    makeRegion(config.regions?.local ?? '', config.redis, config.subscriber),
    (config.regions?.others ?? []).map((other) => makeRegion(other.name, other.redis, other.subscriber)),
  );
  const controlPlane = new ControlPlane(regions, (message) => log.warn(message));
  const limits: BrokerLimits = { ...DEFAULT_LIMITS, ...config.limits };
  const resourceLimits = new ResourceLimits(limits);
  const rateLimiter =
    limits.requestsPerSecond === undefined ? undefined : new RequestRateLimiter(limits.requestsPerSecond);
  const iam = new Authorizer(
    regions,
    controlPlane,
    config.authorization ?? { enforce: false, configured: () => new Map() },
  );
  const topics = new TopicService(regions, controlPlane, iam, resourceLimits);
  const subscriptionRecords = new SubscriptionRecords();
  const subscriptions = new SubscriptionService(
    regions,
    controlPlane,
    topics,
    iam,
    subscriptionRecords,
    config.push?.hosts,
    resourceLimits,
  );
  const metrics = new BrokerMetrics(regions, subscriptionRecords);
  const delivery = new DeliveryService(regions, topics, subscriptions, {
    metrics,
    authorizer: iam,
    ackIds: ackIdCodecLoader(() => loadAckSecret(regions)),
    pullWaitMs: config.pullWaitMs ?? 20_000,
    rememberTopicMs: config.rememberTopicMs ?? 1000,
    rememberSubscriptionMs: config.rememberSubscriptionMs ?? 1000,
    stageBodiesFromBytes: config.stageBodiesFromBytes ?? 16 * 1024,
    longPolls: longPollPlaces(limits.longPolls),
  });
  const streams = new StreamRegistry(delivery, subscriptions, config.streamHeartbeatMs ?? 15_000, {
    streams: limits.streams,
    perSubscription: limits.streamsPerSubscription,
  });
  const snapshots = new SnapshotService(regions, controlPlane, topics, subscriptions, iam, resourceLimits);
  const replay = new ReplayService(regions, topics, subscriptions, snapshots, iam);
  const backlog = new BacklogService(regions, subscriptions, topics, iam);
  // No region serves until its store is known to be in this broker's storage format.
  const stopGuards = await Promise.all(
    regions.all.map((region) =>
      guardStorageFormat(region, {
        refuse: config.onStorageProblem ?? ((problem) => log.error(problem)),
        // With regions, a store found fit takes part in the control plane from now on.
        checked: multiRegion ? () => void controlPlane.requestSync() : undefined,
        log: (message) => log.warn(message),
        firstWaitMs: config.firstConnectWaitMs ?? FIRST_CONNECT_WAIT_MS,
      }),
    ),
  );
  controlPlane.start();
  const push = new PushService(regions, delivery, subscriptionRecords, {
    hosts: config.push?.hosts ?? '*',
    closeWaitMs: config.push?.closeWaitMs ?? 5_000,
    relistIntervalMs: config.push?.relistIntervalMs ?? 30_000,
    log: (message) => log.warn(message),
  });
  push.start();

  const collectGarbage = async () => {
    const nowUs = await clockNowUs(regions.local.ctx.clock, regions.local.ctx.redis);
    await controlPlane.collectGarbage(nowUs - CLEANUP_GRACE_US);
    await subscriptions.expireIdle(nowUs);
    await snapshots.expire(nowUs);
    await replay.expireLogs();
  };
  const janitor =
    config.janitorIntervalMs === undefined
      ? undefined
      : setInterval(() => {
          collectGarbage().catch((error: Error) => log.warn(`clean-up pass failed: ${error.message}`));
        }, config.janitorIntervalMs);
  janitor?.unref();

  let closing: Promise<void> | undefined;
  const close = async () => {
    clearInterval(janitor);
    // Pushing stops while Redis is still there to take its acks and give back what it holds.
    await push.close();
    // Long polls and streams end first, so that closing does not wait for them.
    await streams.close();
    delivery.close();
    await Promise.all(regions.all.map((region) => region.wakeups.close()));
    await controlPlane.stop();
    for (const stop of stopGuards) stop();
    for (const subscriber of ownSubscribers) subscriber.disconnect();
  };
  return {
    ctx: regions.local.ctx,
    regions,
    controlPlane,
    topics,
    subscriptions,
    delivery,
    streams,
    push,
    snapshots,
    replay,
    backlog,
    iam,
    metrics,
    limits,
    admit: (caller) => rateLimiter?.admit(caller),
    collectGarbage,
    close: () => (closing ??= close()),
  };
}
