import { ApiError } from '../errors.ts';
import type { CreateLimits } from '../redis/calls/control-plane.ts';
import type { CallContext } from './call-context.ts';
import type { ResourceName } from './names.ts';

/**
 * The limits that protect the broker (README, _Limits_). Each is refused with RESOURCE_EXHAUSTED
 * and a message that names it and its setting (src/config.ts), whichever front end the call
 * came through: the checks live here and in the services that call them.
 */
export interface BrokerLimits {
  /** Topics in one project (Pub/Sub: 10,000). */
  topicsPerProject: number;
  /** Subscriptions in one project (Pub/Sub: 10,000). */
  subscriptionsPerProject: number;
  /** Subscriptions attached to one topic (Pub/Sub: 10,000). */
  subscriptionsPerTopic: number;
  /** Snapshots in one project (Pub/Sub: 5,000). */
  snapshotsPerProject: number;
  /** Streaming pulls of one subscription open on this node. */
  streamsPerSubscription: number;
  /** Streaming pulls open on this node. */
  streams: number;
  /** Pulls waiting for messages (`returnImmediately: false`) on this node. */
  longPolls: number;
  /** Requests per second of one principal (see RequestRateLimiter); undefined: no limit. */
  requestsPerSecond?: number;
}

export const DEFAULT_LIMITS: BrokerLimits = {
  topicsPerProject: 10_000,
  subscriptionsPerProject: 10_000,
  subscriptionsPerTopic: 10_000,
  snapshotsPerProject: 5_000,
  streamsPerSubscription: 1_000,
  streams: 10_000,
  longPolls: 10_000,
};

export const resourceExhausted = (message: string) => new ApiError('RESOURCE_EXHAUSTED', message);

/**
 * A limit the control plane holds a create to (ControlPlane.create), in the script of its
 * compare-and-set at the arbiter: `counts` for the script, `refusal` for the caller.
 */
export interface CreateLimit {
  counts: CreateLimits;
  refusal(scope: 'project' | 'topic'): ApiError;
}

const projectFull = (project: string, limit: number, plural: string, setting: string) =>
  resourceExhausted(
    `Project ${project} has reached its limit of ${limit} ${plural} (${setting}): delete some before creating more.`,
  );

/** The create limits of each kind of resource, for the services that create them. */
export class ResourceLimits {
  constructor(private readonly limits: BrokerLimits) {}

  topic(name: ResourceName): CreateLimit {
    const { topicsPerProject } = this.limits;
    return {
      counts: { projectPrefix: `projects/${name.project}/topics/`, perProject: topicsPerProject },
      refusal: () => projectFull(name.project, topicsPerProject, 'topics', 'MAX_TOPICS_PER_PROJECT'),
    };
  }

  subscription(name: ResourceName, topic: string): CreateLimit {
    const { subscriptionsPerProject, subscriptionsPerTopic } = this.limits;
    return {
      counts: {
        projectPrefix: `projects/${name.project}/subscriptions/`,
        perProject: subscriptionsPerProject,
        perTopic: subscriptionsPerTopic,
      },
      refusal: (scope) =>
        scope === 'project'
          ? projectFull(name.project, subscriptionsPerProject, 'subscriptions', 'MAX_SUBSCRIPTIONS_PER_PROJECT')
          : resourceExhausted(
              `Topic ${topic} has reached its limit of ${subscriptionsPerTopic} subscriptions ` +
                '(MAX_SUBSCRIPTIONS_PER_TOPIC): delete or detach some before creating more.',
            ),
    };
  }

  snapshot(name: ResourceName): CreateLimit {
    const { snapshotsPerProject } = this.limits;
    return {
      counts: { projectPrefix: `projects/${name.project}/snapshots/`, perProject: snapshotsPerProject },
      refusal: () => projectFull(name.project, snapshotsPerProject, 'snapshots', 'MAX_SNAPSHOTS_PER_PROJECT'),
    };
  }
}

/**
 * A count of things under way on this node (long polls, bytes of request bodies), held under a
 * limit: `enter` takes `size` places or refuses with `refusal`, and returns what gives them back
 * (once, however often it is called).
 */
export class Places {
  private taken = 0;

  constructor(
    private readonly limit: number,
    private readonly refusal: () => ApiError,
  ) {}

  enter(size = 1): () => void {
    if (this.taken + size > this.limit) throw this.refusal();
    this.taken += size;
    let left = false;
    return () => {
      if (left) return;
      left = true;
      this.taken -= size;
    };
  }

  get inUse(): number {
    return this.taken;
  }
}

export const longPollPlaces = (limit: number) =>
  new Places(limit, () =>
    resourceExhausted(
      `This server already holds ${limit} pulls waiting for messages (MAX_LONG_POLLS): retry later, ` +
        'pull with returnImmediately, or use a streaming pull.',
    ),
  );

/** How many callers the rate limiter remembers at most (about 100 bytes each). */
export const MAX_TRACKED_CALLERS = 10_000;

interface Bucket {
  tokens: number;
  /** When `tokens` was counted, in ms. */
  at: number;
}

/**
 * The per-principal request rate limit (RATE_LIMIT_PER_SECOND), shared by every front end: each
 * call (a REST request, a WebSocket upgrade, a gRPC call or the opening of a gRPC stream) takes
 * one token from its caller's bucket, which refills at `perSecond` and holds at most one
 * second's worth (at least 1): a burst of a second's requests passes, a steady excess is refused.
 *
 * The caller is its principal; without authentication, the address it connects from (so that one
 * busy client does not starve the others). The buckets of at most MAX_TRACKED_CALLERS callers
 * are kept, the least recently seen dropped first: memory stays bounded however many principals
 * or addresses call, and a dropped caller comes back with a full bucket, as it would after a
 * second of quiet.
 */
export class RequestRateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly capacity: number;

  constructor(
    private readonly perSecond: number,
    private readonly now: () => number = () => performance.now(),
    private readonly maxTracked = MAX_TRACKED_CALLERS,
  ) {
    this.capacity = Math.max(1, perSecond);
  }

  /** Takes a token for the caller, or refuses with RESOURCE_EXHAUSTED. */
  admit(caller: CallContext): void {
    const key = callerKey(caller);
    const now = this.now();
    const bucket = this.buckets.get(key);
    const tokens = bucket
      ? Math.min(this.capacity, bucket.tokens + ((now - bucket.at) / 1000) * this.perSecond)
      : this.capacity;
    // Seen now: moved to the end of the map's order, the last to be dropped.
    if (bucket) this.buckets.delete(key);
    else if (this.buckets.size >= this.maxTracked) this.buckets.delete(this.buckets.keys().next().value!);
    const admitted = tokens >= 1;
    this.buckets.set(key, { tokens: admitted ? tokens - 1 : tokens, at: now });
    if (!admitted) {
      throw resourceExhausted(
        `Too many requests from ${caller.principal ?? 'this address'}: at most ${this.perSecond} per second ` +
          '(RATE_LIMIT_PER_SECOND). Retry with backoff.',
      );
    }
  }

  /** How many callers it remembers. */
  get tracked(): number {
    return this.buckets.size;
  }
}

function callerKey(caller: CallContext): string {
  if (caller.principal !== undefined) return `principal:${caller.principal}`;
  return `address:${caller.address ?? ''}`;
}
