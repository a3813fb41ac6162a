import { invalidArgument, notFound } from '../errors.ts';
import { touchSubscription } from '../redis/calls/delivery.ts';
import { notImplemented, parseBody } from '../schemas/common.ts';
import {
  subscriptionBodySchema,
  updateSubscriptionBodySchema,
  type SubscriptionBody,
} from '../schemas/subscriptions.ts';
import type { ControlPlane } from './control-plane.ts';
import { newUid, type SubscriptionRecord, type Tombstone, type TopicRecord, versionOf } from './records.ts';
import { checkDuration, parseDurationSeconds } from './durations.ts';
import { DELETED_TOPIC, parseResourceName, type ResourceName } from './names.ts';
import { readNamePage, type PageRequest } from './pagination.ts';
import { checkBodyName, type TopicService } from './topics.ts';
import type { Regions } from './regions.ts';
import { parseUpdateMask } from './update-mask.ts';

export interface Subscription {
  name: string;
  topic: string;
  pushConfig: Record<string, never>;
  ackDeadlineSeconds: number;
  retainAckedMessages?: boolean;
  messageRetentionDuration: string;
  labels?: Record<string, string>;
  enableMessageOrdering?: boolean;
  expirationPolicy: { ttl?: string };
  enableExactlyOnceDelivery?: boolean;
  topicMessageRetentionDuration?: string;
  state: 'ACTIVE';
}

const DEFAULT_ACK_DEADLINE_SECONDS = 10;
const DEFAULT_EXACTLY_ONCE_ACK_DEADLINE_SECONDS = 60;
const DEFAULT_RETENTION = '604800s';
const DEFAULT_EXPIRATION_TTL = '2678400s';
const RETENTION_MIN_SECONDS = 600;
const RETENTION_MAX_SECONDS = 31 * 24 * 3600;
const EXPIRATION_MIN_SECONDS = 24 * 3600;
const EXPIRATION_MAX_SECONDS = 365 * 24 * 3600;

const MUTABLE_FIELDS = [
  'ackDeadlineSeconds',
  'retainAckedMessages',
  'messageRetentionDuration',
  'labels',
  'expirationPolicy',
  'enableExactlyOnceDelivery',
  'pushConfig',
] as const;
const IMMUTABLE_FIELDS = ['name', 'topic', 'enableMessageOrdering', 'filter'];
const UNSUPPORTED_FIELDS = [
  'deadLetterPolicy',
  'retryPolicy',
  'bigqueryConfig',
  'cloudStorageConfig',
  'bigtableConfig',
  'messageTransforms',
  'tags',
  'detached',
] as const;

export function renderSubscription(record: SubscriptionRecord, liveTopic: TopicRecord | undefined): Subscription {
  const topicAlive = liveTopic?.uid === record.topicUid;
  const subscription: Subscription = {
    name: record.name,
    topic: topicAlive ? record.topic : DELETED_TOPIC,
    pushConfig: {},
    ackDeadlineSeconds: record.ackDeadlineSeconds,
    messageRetentionDuration: record.messageRetentionDuration,
    expirationPolicy: record.expirationPolicy,
    state: 'ACTIVE',
  };
  if (record.retainAckedMessages) subscription.retainAckedMessages = true;
  if (record.labels && Object.keys(record.labels).length > 0) subscription.labels = record.labels;
  if (record.enableMessageOrdering) subscription.enableMessageOrdering = true;
  if (record.enableExactlyOnceDelivery) subscription.enableExactlyOnceDelivery = true;
  if (topicAlive && liveTopic?.messageRetentionDuration) {
    subscription.topicMessageRetentionDuration = liveTopic.messageRetentionDuration;
  }
  return subscription;
}

export class SubscriptionService {
  constructor(
    private readonly regions: Regions,
    private readonly controlPlane: ControlPlane,
    private readonly topics: TopicService,
  ) {}

  async create(name: ResourceName, rawBody: unknown): Promise<Subscription> {
    const body = parseBody(subscriptionBodySchema, rawBody, 'subscription');
    checkBodyName(body.name, name);
    if (!body.topic) throw invalidArgument('The subscription needs a topic (field "topic").');
    const topicName = parseResourceName('topics', body.topic);
    refuseUnsupported(body);
    const exactlyOnce = body.enableExactlyOnceDelivery === true;
    const settings = {
      ackDeadlineSeconds: checkAckDeadline(body.ackDeadlineSeconds, exactlyOnce),
      messageRetentionDuration: checkRetention(body.messageRetentionDuration),
      expirationPolicy: checkExpiration(body.expirationPolicy),
      ...(body.retainAckedMessages ? { retainAckedMessages: true } : {}),
      ...(body.labels && Object.keys(body.labels).length > 0 ? { labels: body.labels } : {}),
      ...(body.enableMessageOrdering ? { enableMessageOrdering: true } : {}),
      ...(exactlyOnce ? { enableExactlyOnceDelivery: true } : {}),
    };
    this.regions.requireLocal();
    let topic: TopicRecord | undefined;
    const record = await this.controlPlane.create<SubscriptionRecord>('subscription', name, async (version) => {
      topic ??= await this.topics.read(topicName);
      return { name: name.full, topic: topicName.full, topicUid: topic.uid, uid: newUid(), version, ...settings };
    });
    return renderSubscription(record, topic);
  }

  async read(name: ResourceName): Promise<SubscriptionRecord> {
    const { ctx } = this.regions.requireLocal();
    const json = await ctx.redis.hget(ctx.keys.subscriptions, name.full);
    if (json === null) throw notFound(name.id);
    return JSON.parse(json) as SubscriptionRecord;
  }

  async get(name: ResourceName): Promise<Subscription> {
    const record = await this.read(name);
    return renderSubscription(record, await this.liveTopic(record.topic));
  }

  async update(name: ResourceName, rawBody: unknown): Promise<Subscription> {
    const request = parseBody(updateSubscriptionBodySchema, rawBody, 'request');
    const body = request.subscription;
    checkBodyName(body.name, name);
    const paths = parseUpdateMask(request.updateMask, 'UpdateSubscriptionRequest');
    for (const path of paths) {
      if (IMMUTABLE_FIELDS.includes(path)) {
        throw invalidArgument(
          `Invalid update_mask provided in the UpdateSubscriptionRequest: the '${path}' field in the Subscription is not mutable.`,
        );
      }
      if ((UNSUPPORTED_FIELDS as readonly string[]).includes(path)) throw notImplemented(path);
      if (!(MUTABLE_FIELDS as readonly string[]).includes(path)) {
        throw invalidArgument(
          `Invalid update_mask provided in the UpdateSubscriptionRequest: unknown field name "${path}".`,
        );
      }
    }
    if (paths.includes('pushConfig')) refusePushEndpoint(body.pushConfig);
    this.regions.requireLocal();
    const updated = await this.controlPlane.replace('subscription', name, (record: SubscriptionRecord, version) => {
      const next: SubscriptionRecord = { ...record, version };
      const has = (field: string) => paths.includes(field);
      if (has('enableExactlyOnceDelivery')) setFlag(next, 'enableExactlyOnceDelivery', body.enableExactlyOnceDelivery);
      if (has('retainAckedMessages')) setFlag(next, 'retainAckedMessages', body.retainAckedMessages);
      if (has('ackDeadlineSeconds')) {
        next.ackDeadlineSeconds = checkAckDeadline(body.ackDeadlineSeconds, next.enableExactlyOnceDelivery === true);
      }
      if (has('messageRetentionDuration'))
        next.messageRetentionDuration = checkRetention(body.messageRetentionDuration);
      if (has('expirationPolicy')) next.expirationPolicy = checkExpiration(body.expirationPolicy);
      if (has('labels')) {
        if (body.labels && Object.keys(body.labels).length > 0) next.labels = body.labels;
        else delete next.labels;
      }
      return next;
    });
    return renderSubscription(updated, await this.liveTopic(updated.topic));
  }

  async delete(name: ResourceName): Promise<void> {
    this.regions.requireLocal();
    await this.controlPlane.replace('subscription', name, (record: SubscriptionRecord, version) =>
      tombstoneOf(record, version),
    );
  }

  /** Records that a stream is using the subscription (its expiration counts from the last use). */
  async touch(record: SubscriptionRecord): Promise<void> {
    await Promise.all(
      this.regions.localFirst().map(({ ctx }) => {
        const sub = ctx.keys.topicData(record.topicUid).subscription(record.uid);
        return touchSubscription(ctx.scripts, sub, { time: ctx.clock.scriptTime() });
      }),
    );
  }

  /**
   * Deletes subscriptions whose expirationPolicy.ttl has passed since they were last used (any
   * pull, stream, ack, deadline change, create or update, in any region). Returns how many it deleted.
   */
  async expireIdle(nowUs: number): Promise<number> {
    const { redis, keys } = this.regions.requireLocal().ctx;
    let expired = 0;
    let cursor = '0';
    do {
      const [next, entries] = await redis.hscan(keys.subscriptions, cursor, 'COUNT', 200);
      cursor = next;
      for (let i = 0; i < entries.length; i += 2) {
        const record = JSON.parse(entries[i + 1]) as SubscriptionRecord;
        if (!record.expirationPolicy.ttl) continue;
        const ttlUs = parseDurationSeconds(record.expirationPolicy.ttl, 'expirationPolicy.ttl') * 1_000_000;
        const activeAt = await this.lastActiveUs(record);
        if (activeAt === undefined || activeAt + ttlUs > nowUs) continue;
        // Deleted only if nobody changed it meanwhile (a change counts as use).
        const arbiter = this.regions.arbiter();
        const json = await this.controlPlane.readState(arbiter, 'subscription', record.name);
        if (json !== entries[i + 1]) continue;
        if (
          (await this.controlPlane.write('subscription', arbiter, json, tombstoneOf(record, versionOf(json) + 1))) ===
          'written'
        )
          expired++;
      }
    } while (cursor !== '0');
    return expired;
  }

  async list(project: string, page: PageRequest): Promise<{ subscriptions?: Subscription[]; nextPageToken?: string }> {
    const { keys, redis } = this.regions.requireLocal().ctx;
    const { names, nextPageToken } = await readNamePage(
      (min, max, count) => redis.zrangebylex(keys.subscriptionIndex, min, max, 'LIMIT', 0, count),
      `projects/${project}/subscriptions/`,
      page,
    );
    const records = (names.length ? await redis.hmget(keys.subscriptions, ...names) : [])
      .filter((json): json is string => json !== null)
      .map((json) => JSON.parse(json) as SubscriptionRecord);
    const topicNames = [...new Set(records.map((record) => record.topic))];
    const topicJson = topicNames.length ? await redis.hmget(keys.topics, ...topicNames) : [];
    const liveTopics = new Map(
      topicNames.map((topic, i) => [topic, topicJson[i] ? (JSON.parse(topicJson[i]!) as TopicRecord) : undefined]),
    );
    const subscriptions = records.map((record) => renderSubscription(record, liveTopics.get(record.topic)));
    return { ...(subscriptions.length ? { subscriptions } : {}), ...(nextPageToken ? { nextPageToken } : {}) };
  }

  /**
   * Drops data marked for clean-up longer than `olderThanUs` ago in every usable region: deleted
   * subscriptions whose drop was interrupted, and attaches whose record never got written.
   * Returns how many it dropped.
   */
  async collectGarbage(olderThanUs: number): Promise<number> {
    let dropped = 0;
    for (const region of this.regions.localFirst()) {
      const { redis, keys } = region.ctx;
      const refs = await redis.zrangebyscore(keys.pendingCleanups, '-inf', olderThanUs, 'LIMIT', 0, 100);
      for (const ref of refs) {
        const [topicUid, subscriptionUid] = ref.split('/', 2);
        const name = ref.slice(topicUid.length + subscriptionUid.length + 2);
        // A record of that very incarnation came (back) meanwhile: its data is live, keep it.
        const live = name ? await redis.hget(keys.subscriptions, name) : null;
        if (!live || (JSON.parse(live) as SubscriptionRecord).uid !== subscriptionUid) {
          await this.controlPlane.dropData(region, topicUid, subscriptionUid);
          dropped++;
        }
        await this.controlPlane.finishCleanup(region, ref);
      }
    }
    return dropped;
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

  private async liveTopic(topic: string): Promise<TopicRecord | undefined> {
    const { ctx } = this.regions.requireLocal();
    const json = await ctx.redis.hget(ctx.keys.topics, topic);
    return json ? (JSON.parse(json) as TopicRecord) : undefined;
  }
}

function setFlag(
  record: SubscriptionRecord,
  field: 'enableExactlyOnceDelivery' | 'retainAckedMessages',
  value?: boolean,
) {
  if (value) record[field] = true;
  else delete record[field];
}

function checkAckDeadline(seconds: number | undefined, exactlyOnce: boolean): number {
  if (seconds === undefined || seconds === 0) {
    return exactlyOnce ? DEFAULT_EXACTLY_ONCE_ACK_DEADLINE_SECONDS : DEFAULT_ACK_DEADLINE_SECONDS;
  }
  if (seconds < 10 || seconds > 600) {
    throw invalidArgument(`Invalid ackDeadlineSeconds: ${seconds}. It must be between 10 and 600 seconds.`);
  }
  return seconds;
}

function checkRetention(value: string | undefined): string {
  if (!value) return DEFAULT_RETENTION;
  return checkDuration(value, 'messageRetentionDuration', RETENTION_MIN_SECONDS, RETENTION_MAX_SECONDS);
}

function checkExpiration(policy: { ttl?: string } | undefined): { ttl?: string } {
  if (!policy) return { ttl: DEFAULT_EXPIRATION_TTL };
  if (!policy.ttl) return {};
  return { ttl: checkDuration(policy.ttl, 'expirationPolicy.ttl', EXPIRATION_MIN_SECONDS, EXPIRATION_MAX_SECONDS) };
}

function refusePushEndpoint(pushConfig: Record<string, unknown> | undefined): void {
  if (pushConfig && Object.keys(pushConfig).length > 0) throw notImplemented('pushConfig');
}

function refuseUnsupported(body: SubscriptionBody): void {
  refusePushEndpoint(body.pushConfig);
  if (body.filter) throw notImplemented('filter');
  for (const field of UNSUPPORTED_FIELDS) {
    const value = body[field];
    const empty =
      value === undefined ||
      value === false ||
      (typeof value === 'object' && value !== null && Object.keys(value).length === 0);
    if (!empty) throw notImplemented(field);
  }
}

/** The tombstone that deletes a subscription: it names the incarnation whose data is dropped. */
function tombstoneOf(record: SubscriptionRecord, version: number): Tombstone {
  return { name: record.name, version, deleted: true, uid: record.uid, topicUid: record.topicUid };
}
