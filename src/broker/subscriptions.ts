import { failedPrecondition, invalidArgument, notFound } from '../errors.ts';
import type { Authorizer } from './authorization.ts';
import type { CallContext } from './call-context.ts';
import { touchSubscription } from '../redis/calls/delivery.ts';
import { localNowUs } from './clock.ts';
import type { ControlPlane } from './control-plane.ts';
import { DEFAULT_LIMITS, ResourceLimits } from './limits.ts';
import { checkUpdateMask, refuseUnimplemented, settleAll, settleMasked, storedSettings } from './fields.ts';
import { DELETED_TOPIC, parseResourceName, type ResourceName } from './names.ts';
import { type PageRequest, readNamePage } from './pagination.ts';
import {
  dataOwnerTombstone,
  expirationTtlUs,
  findRecord,
  newUid,
  type SubscriptionRecord,
  type TopicRecord,
} from './records.ts';
import type { Regions } from './regions.ts';
import type { SubscriptionRecords } from './subscription-records.ts';
import { checkPushHost, type PushConfig, type PushConfigInput, type PushHosts } from './push-config.ts';
import {
  checkSubscriptionSettings,
  type DeadLetterPolicy,
  SUBSCRIPTION_FIELDS,
  type SubscriptionInput,
  type SubscriptionSettings,
  settleDeadLetterPolicy,
} from './subscription-fields.ts';
import { checkBodyName, type TopicService } from './topics.ts';

export interface Subscription extends Omit<SubscriptionSettings, 'pushConfig'> {
  name: string;
  topic: string;
  pushConfig: PushConfig | Record<string, never>;
  topicMessageRetentionDuration?: string;
  detached?: true;
  state: 'ACTIVE';
}

/** An UpdateSubscriptionRequest: the mask's paths are field names (lowerCamelCase). */
export interface UpdateSubscriptionRequest {
  subscription: SubscriptionInput;
  updateMask: string[];
}

/** A ModifyPushConfigRequest: `{}` makes the subscription a pull subscription. */
export interface ModifyPushConfigRequest {
  pushConfig?: PushConfigInput;
}

export function renderSubscription(record: SubscriptionRecord, liveTopic: TopicRecord | undefined): Subscription {
  const topicAlive = liveTopic?.uid === record.topicUid;
  const subscription: Subscription = {
    name: record.name,
    topic: topicAlive ? record.topic : DELETED_TOPIC,
    pushConfig: {},
    ...(storedSettings(SUBSCRIPTION_FIELDS, record) as SubscriptionSettings),
    ...(record.detached ? { detached: true } : {}),
    state: 'ACTIVE',
  };
  if (topicAlive && liveTopic?.messageRetentionDuration) {
    subscription.topicMessageRetentionDuration = liveTopic.messageRetentionDuration;
  }
  return subscription;
}

/**
 * A stream records its subscription's use this many times per expiration ttl at most (per
 * process): the ttl is a day at least, and an expiry a few hours late is no harm.
 */
const TOUCHES_PER_TTL = 8;

export class SubscriptionService {
  /** When this process last recorded a stream's use of a subscription (its clock, µs), by uid, and how long that holds. */
  private readonly touched = new Map<string, { atUs: number; intervalUs: number }>();

  constructor(
    private readonly regions: Regions,
    private readonly controlPlane: ControlPlane,
    private readonly topics: TopicService,
    private readonly authorizer: Authorizer,
    private readonly records: SubscriptionRecords,
    /** The hosts push endpoints may name (PUSH_ENDPOINT_HOSTS). */
    private readonly pushHosts: PushHosts = '*',
    private readonly limits = new ResourceLimits(DEFAULT_LIMITS),
  ) {}

  async create(caller: CallContext, name: ResourceName, subscription: SubscriptionInput): Promise<Subscription> {
    checkBodyName(subscription.name, name);
    if (!subscription.topic) throw invalidArgument('The subscription needs a topic (field "topic").');
    const topicName = parseResourceName('topics', subscription.topic);
    refuseUnimplemented(SUBSCRIPTION_FIELDS, subscription);
    const settings = settleAll(SUBSCRIPTION_FIELDS, subscription) as SubscriptionSettings;
    checkSubscriptionSettings(settings);
    checkPushHost(settings.pushConfig, this.pushHosts);
    // Pub/Sub's rule: creating a subscription needs a grant on the project and one on the topic.
    await this.authorizer.require(caller, 'pubsub.subscriptions.create', `projects/${name.project}`);
    await this.authorizer.require(caller, 'pubsub.topics.attachSubscription', topicName.full);
    this.regions.requireLocal();
    await this.requireDeadLetterTopic(settings.deadLetterPolicy);
    let topic: TopicRecord | undefined;
    const record = await this.controlPlane.create<SubscriptionRecord>(
      'subscription',
      name,
      async (version) => {
        topic ??= await this.topics.read(topicName);
        return { name: name.full, topic: topicName.full, topicUid: topic.uid, uid: newUid(), version, ...settings };
      },
      this.limits.subscription(name, topicName.full),
    );
    return renderSubscription(record, topic);
  }

  async read(name: ResourceName): Promise<SubscriptionRecord> {
    const record = await this.find(name);
    if (!record) throw notFound(name.id);
    return record;
  }

  /**
   * As read, from this process's copy of the records as read at most `withinMs` ago (one reading
   * shared by every caller meanwhile: SubscriptionRecords.readRecent).
   */
  private async readRecent(name: ResourceName, withinMs: number): Promise<SubscriptionRecord> {
    const { byName } = await this.records.readRecent(this.regions.requireLocal(), withinMs);
    const known = byName.get(name.full);
    if (!known) throw notFound(name.id);
    return known.record;
  }

  /** As read, but undefined when the subscription does not exist. */
  private find(name: ResourceName): Promise<SubscriptionRecord | undefined> {
    return findRecord(this.regions, 'subscriptions', name.full);
  }

  /** Every subscription record this endpoint's region knows (background passes). */
  async all(): Promise<SubscriptionRecord[]> {
    const { byName } = await this.records.read(this.regions.requireLocal());
    return [...byName.values()].map((known) => known.record);
  }

  /**
   * The record of a subscription that messages are pulled from or settled on: a detached one
   * refuses that with FAILED_PRECONDITION, as Pub/Sub's does. With `recentWithinMs`, from this
   * process's copy as read at most that long ago (see readRecent).
   */
  async readForDelivery(name: ResourceName, recentWithinMs?: number): Promise<SubscriptionRecord> {
    const record = recentWithinMs === undefined ? await this.read(name) : await this.readRecent(name, recentWithinMs);
    if (record.detached) {
      throw failedPrecondition(
        `The subscription ${record.name} is detached from its topic: it has no messages to pull or acknowledge.`,
      );
    }
    return record;
  }

  async get(caller: CallContext, name: ResourceName): Promise<Subscription> {
    await this.authorizer.require(caller, 'pubsub.subscriptions.get', name.full);
    const record = await this.read(name);
    return renderSubscription(record, await this.liveTopic(record.topic));
  }

  async update(caller: CallContext, name: ResourceName, request: UpdateSubscriptionRequest): Promise<Subscription> {
    checkBodyName(request.subscription.name, name);
    checkUpdateMask(SUBSCRIPTION_FIELDS, request.updateMask, 'UpdateSubscriptionRequest');
    await this.authorizer.require(caller, 'pubsub.subscriptions.update', name.full);
    const updated = await this.replaceMasked(name, request);
    return renderSubscription(updated, await this.liveTopic(updated.topic));
  }

  /** Writes the fields `updateMask` names (a mask already checked) and returns the new record. */
  private async replaceMasked(name: ResourceName, request: UpdateSubscriptionRequest): Promise<SubscriptionRecord> {
    const { subscription, updateMask } = request;
    this.regions.requireLocal();
    if (updateMask.includes('deadLetterPolicy')) {
      await this.requireDeadLetterTopic(settleDeadLetterPolicy(subscription.deadLetterPolicy));
    }
    return this.controlPlane.replace('subscription', name, (record: SubscriptionRecord, version) => {
      const next = settleMasked(SUBSCRIPTION_FIELDS, { ...record, version }, updateMask, subscription);
      checkSubscriptionSettings(next);
      // Only a new push config is held to PUSH_ENDPOINT_HOSTS: a record made before the setting
      // narrowed may still change its other fields (it is not pushed meanwhile, see push.ts).
      if (updateMask.includes('pushConfig')) checkPushHost(next.pushConfig, this.pushHosts);
      return next;
    });
  }

  /**
   * Detaches the subscription from its topic in every region: it stops receiving publishes, its
   * backlog is dropped (control-plane.ts), and pulls, streams and acks on it fail from then on.
   * The record stays, marked `detached`; detaching it again changes nothing.
   */
  async detach(caller: CallContext, name: ResourceName): Promise<void> {
    // Pub/Sub's rule: detaching is the topic's to allow (a subscription not found: the project's).
    const topic = (await this.find(name))?.topic ?? `projects/${name.project}`;
    await this.authorizer.require(caller, 'pubsub.topics.detachSubscription', topic);
    await this.controlPlane.replace('subscription', name, (record: SubscriptionRecord, version) =>
      record.detached ? undefined : { ...record, version, detached: true },
    );
  }

  /** ModifyPushConfig: an update of `pushConfig` alone (`{}` switches to pull). */
  async modifyPushConfig(caller: CallContext, name: ResourceName, request: ModifyPushConfigRequest): Promise<void> {
    if (!request.pushConfig) throw invalidArgument('The ModifyPushConfigRequest must set push_config.');
    await this.authorizer.require(caller, 'pubsub.subscriptions.update', name.full);
    await this.replaceMasked(name, { subscription: { pushConfig: request.pushConfig }, updateMask: ['pushConfig'] });
  }

  /** A dead-letter policy names a topic that exists (NOT_FOUND otherwise). */
  private async requireDeadLetterTopic(policy: DeadLetterPolicy | undefined): Promise<void> {
    if (policy) await this.topics.read(parseResourceName('topics', policy.deadLetterTopic));
  }

  async delete(caller: CallContext, name: ResourceName): Promise<void> {
    await this.authorizer.require(caller, 'pubsub.subscriptions.delete', name.full);
    this.regions.requireLocal();
    await this.controlPlane.replace('subscription', name, (record: SubscriptionRecord, version) =>
      dataOwnerTombstone(record, version),
    );
  }

  /**
   * Records that a stream is using the subscription (its expiration counts from the last use):
   * at most once per TOUCHES_PER_TTL-th of its ttl in this process, however many streams use it
   * and however often they call, and not at all without an expiration policy (nothing reads it).
   */
  async touch(record: SubscriptionRecord): Promise<void> {
    const ttlUs = expirationTtlUs(record);
    if (ttlUs === undefined) return;
    const nowUs = localNowUs(this.regions.local.ctx.clock);
    const last = this.touched.get(record.uid);
    if (last && nowUs - last.atUs < last.intervalUs) return;
    // Those whose interval has passed would be touched again at their next call anyway.
    for (const [uid, touch] of this.touched) if (nowUs - touch.atUs >= touch.intervalUs) this.touched.delete(uid);
    // Taken before the scripts run, so that the other streams of it that tick meanwhile skip it.
    const touch = { atUs: nowUs, intervalUs: ttlUs / TOUCHES_PER_TTL };
    this.touched.set(record.uid, touch);
    try {
      await Promise.all(
        this.regions.localFirst().map(({ ctx }) => {
          const sub = ctx.keys.topicData(record.topicUid).subscription(record.uid);
          return touchSubscription(ctx.scripts, sub, { time: ctx.clock.scriptTime() });
        }),
      );
    } catch (error) {
      if (this.touched.get(record.uid) === touch) this.touched.delete(record.uid);
      throw error;
    }
  }

  /**
   * Deletes subscriptions whose expirationPolicy.ttl has passed since they were last used (any
   * pull, stream, ack, deadline change, create or update, in any region). Returns how many it deleted.
   */
  async expireIdle(nowUs: number): Promise<number> {
    // Only those due in the expiry index are read; deleted only if nobody changed them meanwhile
    // (a change counts as use).
    return this.controlPlane.expireDue('subscription', nowUs, async (record: SubscriptionRecord) => {
      const ttlUs = expirationTtlUs(record);
      if (ttlUs === undefined) return undefined;
      // No use recorded in any usable region (its data out of reach): looked at again a ttl later.
      const activeAt = (await this.lastActiveUs(record)) ?? nowUs;
      return activeAt + ttlUs;
    });
  }

  async list(
    caller: CallContext,
    project: string,
    page: PageRequest,
  ): Promise<{ subscriptions?: Subscription[]; nextPageToken?: string }> {
    await this.authorizer.require(caller, 'pubsub.subscriptions.list', `projects/${project}`);
    const { keys, redis } = this.regions.requireLocal().ctx;
    const { names, nextPageToken } = await readNamePage(
      (min, max, count) => redis.zrangebylex(keys.subscriptionIndex, min, max, 'LIMIT', 0, count),
      `projects/${project}/subscriptions/`,
      page,
    );
    const records = (names.length ? await redis.hmget(keys.subscriptions, ...names) : [])
      .filter((json): json is string => json !== null)
      .map((json) => JSON.parse(json) as SubscriptionRecord);
    const liveTopics = await this.topics.findEach(records.map((record) => record.topic));
    const subscriptions = records.map((record) => renderSubscription(record, liveTopics.get(record.topic)));
    return { ...(subscriptions.length ? { subscriptions } : {}), ...(nextPageToken ? { nextPageToken } : {}) };
  }

  /** The latest use of the subscription in any usable region (undefined: none recorded). */
  private async lastActiveUs(record: SubscriptionRecord): Promise<number | undefined> {
    const times = await Promise.all(
      this.regions
        .localFirst()
        .map(({ ctx }) =>
          ctx.redis.hget(ctx.keys.topicData(record.topicUid).subscription(record.uid).config, 'activeAt'),
        ),
    );
    const known = times.filter((time): time is string => time !== null).map(Number);
    return known.length > 0 ? Math.max(...known) : undefined;
  }

  private liveTopic(topic: string): Promise<TopicRecord | undefined> {
    return this.topics.find(topic);
  }
}
