import { randomBytes } from 'node:crypto';
import { alreadyExists, invalidArgument, notFound } from '../errors.ts';
import { notImplemented, parseBody } from '../schemas/common.ts';
import {
  subscriptionBodySchema,
  updateSubscriptionBodySchema,
  type SubscriptionBody,
} from '../schemas/subscriptions.ts';
import type { BrokerContext } from './context.ts';
import { checkDuration, parseDurationSeconds } from './durations.ts';
import { DELETED_TOPIC, parseResourceName, type ResourceName } from './names.ts';
import { readNamePage, type PageRequest } from './pagination.ts';
import { checkBodyName, type TopicRecord, type TopicService } from './topics.ts';
import { CONFIG_CHANGED } from './wakeups.ts';
import { parseUpdateMask } from './update-mask.ts';

/** A subscription as kept in the control plane. */
export interface SubscriptionRecord {
  name: string;
  topic: string;
  topicUid: string;
  uid: string;
  ackDeadlineSeconds: number;
  messageRetentionDuration: string;
  expirationPolicy: { ttl?: string };
  retainAckedMessages?: boolean;
  labels?: Record<string, string>;
  enableMessageOrdering?: boolean;
  enableExactlyOnceDelivery?: boolean;
}

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
/** How many held entries one drop-subscription call releases (bounds the script's run time). */
const DROP_BATCH = 1000;

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

/** The delivery settings a subscription's scripts read, as config hash field/value pairs. */
function deliveryConfig(record: SubscriptionRecord): string[] {
  return [
    'ackDeadlineUs',
    String(record.ackDeadlineSeconds * 1_000_000),
    'retentionUs',
    String(Math.round(parseDurationSeconds(record.messageRetentionDuration, 'messageRetentionDuration') * 1_000_000)),
    'exactlyOnce',
    record.enableExactlyOnceDelivery ? '1' : '0',
    'ordered',
    record.enableMessageOrdering ? '1' : '0',
  ];
}

export class SubscriptionService {
  constructor(
    private readonly ctx: BrokerContext,
    private readonly topics: TopicService,
  ) {}

  async create(name: ResourceName, rawBody: unknown): Promise<Subscription> {
    const body = parseBody(subscriptionBodySchema, rawBody, 'subscription');
    checkBodyName(body.name, name);
    if (!body.topic) throw invalidArgument('The subscription needs a topic (field "topic").');
    const topicName = parseResourceName('topics', body.topic);
    refuseUnsupported(body);
    const exactlyOnce = body.enableExactlyOnceDelivery === true;
    const record: SubscriptionRecord = {
      name: name.full,
      topic: topicName.full,
      topicUid: '',
      uid: randomBytes(8).toString('hex'),
      ackDeadlineSeconds: checkAckDeadline(body.ackDeadlineSeconds, exactlyOnce),
      messageRetentionDuration: checkRetention(body.messageRetentionDuration),
      expirationPolicy: checkExpiration(body.expirationPolicy),
      ...(body.retainAckedMessages ? { retainAckedMessages: true } : {}),
      ...(body.labels && Object.keys(body.labels).length > 0 ? { labels: body.labels } : {}),
      ...(body.enableMessageOrdering ? { enableMessageOrdering: true } : {}),
      ...(exactlyOnce ? { enableExactlyOnceDelivery: true } : {}),
    };

    if ((await this.ctx.redis.hexists(this.ctx.keys.subscriptions, name.full)) === 1) throw alreadyExists(name.id);
    const topic = await this.topics.read(topicName);
    record.topicUid = topic.record.uid;
    const dataRef = `${record.topicUid}/${record.uid}`;
    const { keys, scripts, clock } = this.ctx;
    const data = keys.topicData(record.topicUid);

    // Attach first, record second: until the record exists nobody can see the subscription,
    // and the clean-up mark makes sure a crash in between leaves no data behind for good.
    await scripts.run('mark-cleanup', [keys.pendingCleanups], [clock.scriptTime(), dataRef]);
    const attached = await scripts.run(
      'attach-subscription',
      [data.state, data.attached, data.subscription(record.uid).config],
      [clock.scriptTime(), record.uid, record.enableMessageOrdering ? '1' : '0', ...deliveryConfig(record)],
    );
    if (attached !== 1) {
      await this.finishCleanup(dataRef);
      throw notFound(topicName.id);
    }
    const created = await scripts.run(
      'create-subscription',
      [keys.subscriptions, keys.subscriptionIndex, keys.topics, keys.topicSubscriptions(record.topicUid), keys.pendingCleanups],
      [name.full, topicName.full, topic.json, JSON.stringify(record), dataRef],
    );
    if (created !== 1) {
      await this.dropData(record.topicUid, record.uid);
      await this.finishCleanup(dataRef);
      throw created === -1 ? alreadyExists(name.id) : notFound(topicName.id);
    }
    return renderSubscription(record, topic.record);
  }

  async read(name: ResourceName): Promise<{ record: SubscriptionRecord; json: string }> {
    const json = await this.ctx.redis.hget(this.ctx.keys.subscriptions, name.full);
    if (json === null) throw notFound(name.id);
    return { record: JSON.parse(json) as SubscriptionRecord, json };
  }

  async get(name: ResourceName): Promise<Subscription> {
    const { record } = await this.read(name);
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
        throw invalidArgument(`Invalid update_mask provided in the UpdateSubscriptionRequest: unknown field name "${path}".`);
      }
    }
    if (paths.includes('pushConfig')) refusePushEndpoint(body.pushConfig);

    for (;;) {
      const { record, json } = await this.read(name);
      const updated: SubscriptionRecord = { ...record };
      const has = (field: string) => paths.includes(field);
      if (has('enableExactlyOnceDelivery')) setFlag(updated, 'enableExactlyOnceDelivery', body.enableExactlyOnceDelivery);
      if (has('retainAckedMessages')) setFlag(updated, 'retainAckedMessages', body.retainAckedMessages);
      if (has('ackDeadlineSeconds')) {
        updated.ackDeadlineSeconds = checkAckDeadline(body.ackDeadlineSeconds, updated.enableExactlyOnceDelivery === true);
      }
      if (has('messageRetentionDuration')) updated.messageRetentionDuration = checkRetention(body.messageRetentionDuration);
      if (has('expirationPolicy')) updated.expirationPolicy = checkExpiration(body.expirationPolicy);
      if (has('labels')) {
        if (body.labels && Object.keys(body.labels).length > 0) updated.labels = body.labels;
        else delete updated.labels;
      }
      // Delivery settings first: a crash before the record is replaced leaves a state that the
      // client's retry of the same update completes.
      const data = this.ctx.keys.topicData(record.topicUid).subscription(record.uid);
      const configured = await this.ctx.scripts.run('configure-subscription', [data.config], [
        this.ctx.clock.scriptTime(),
        ...deliveryConfig(updated),
      ]);
      if (configured !== 1) throw notFound(name.id);
      const replaced = await this.ctx.scripts.run('replace-record', [this.ctx.keys.subscriptions], [
        name.full,
        json,
        JSON.stringify(updated),
      ]);
      if (replaced === 1) {
        await this.announceChange(record.topicUid);
        return renderSubscription(updated, await this.liveTopic(updated.topic));
      }
    }
  }

  async delete(name: ResourceName): Promise<void> {
    const { record, json } = await this.read(name);
    if (!(await this.deleteRecord(record, json))) throw notFound(name.id);
  }

  /** Deletes the subscription the caller read; false if it was deleted or replaced meanwhile. */
  private async deleteRecord(record: SubscriptionRecord, json: string): Promise<boolean> {
    const { keys, scripts, clock } = this.ctx;
    const dataRef = `${record.topicUid}/${record.uid}`;
    const deleted = await scripts.run(
      'delete-subscription',
      [keys.subscriptions, keys.subscriptionIndex, keys.topicSubscriptions(record.topicUid), keys.pendingCleanups],
      [clock.scriptTime(), record.name, json, dataRef],
    );
    if (deleted !== 1) return false;
    await this.dropData(record.topicUid, record.uid);
    await this.finishCleanup(dataRef);
    await this.announceChange(record.topicUid);
    return true;
  }

  /** Records that a stream is using the subscription (its expiration counts from the last use). */
  async touch(record: SubscriptionRecord): Promise<void> {
    const config = this.ctx.keys.topicData(record.topicUid).subscription(record.uid).config;
    await this.ctx.scripts.run('touch-subscription', [config], [this.ctx.clock.scriptTime()]);
  }

  /**
   * Deletes subscriptions whose expirationPolicy.ttl has passed since they were last used (any
   * pull, stream, ack, deadline change, create or update). Returns how many it deleted.
   */
  async expireIdle(nowUs: number): Promise<number> {
    const { redis, keys } = this.ctx;
    let expired = 0;
    let cursor = '0';
    do {
      const [next, entries] = await redis.hscan(keys.subscriptions, cursor, 'COUNT', 200);
      cursor = next;
      for (let i = 0; i < entries.length; i += 2) {
        const json = entries[i + 1];
        const record = JSON.parse(json) as SubscriptionRecord;
        if (!record.expirationPolicy.ttl) continue;
        const ttlUs = parseDurationSeconds(record.expirationPolicy.ttl, 'expirationPolicy.ttl') * 1_000_000;
        const config = keys.topicData(record.topicUid).subscription(record.uid).config;
        const activeAt = await redis.hget(config, 'activeAt');
        if (activeAt !== null && Number(activeAt) + ttlUs <= nowUs && (await this.deleteRecord(record, json))) expired++;
      }
    } while (cursor !== '0');
    return expired;
  }

  async list(project: string, page: PageRequest): Promise<{ subscriptions?: Subscription[]; nextPageToken?: string }> {
    const { keys, redis } = this.ctx;
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
    const liveTopics = new Map(topicNames.map((topic, i) => [topic, topicJson[i] ? (JSON.parse(topicJson[i]!) as TopicRecord) : undefined]));
    const subscriptions = records.map((record) => renderSubscription(record, liveTopics.get(record.topic)));
    return { ...(subscriptions.length ? { subscriptions } : {}), ...(nextPageToken ? { nextPageToken } : {}) };
  }

  /**
   * Drops data marked for clean-up longer than `graceSeconds` ago: deleted subscriptions whose
   * drop was interrupted, and attaches whose create never completed. Returns how many it dropped.
   */
  async collectGarbage(olderThanUs: number): Promise<number> {
    const refs = await this.ctx.redis.zrangebyscore(this.ctx.keys.pendingCleanups, '-inf', olderThanUs, 'LIMIT', 0, 100);
    for (const ref of refs) {
      const [topicUid, subscriptionUid] = ref.split('/');
      await this.dropData(topicUid, subscriptionUid);
      await this.finishCleanup(ref);
    }
    return refs.length;
  }

  /** Open streams of the topic's subscriptions re-read their settings (or learn of a delete). */
  private async announceChange(topicUid: string): Promise<void> {
    await this.ctx.redis.publish(this.ctx.keys.wakeChannel(topicUid), CONFIG_CHANGED);
  }

  private async liveTopic(topic: string): Promise<TopicRecord | undefined> {
    const json = await this.ctx.redis.hget(this.ctx.keys.topics, topic);
    return json ? (JSON.parse(json) as TopicRecord) : undefined;
  }

  private async dropData(topicUid: string, subscriptionUid: string): Promise<void> {
    const data = this.ctx.keys.topicData(topicUid);
    const sub = data.subscription(subscriptionUid);
    let remaining: unknown;
    do {
      remaining = await this.ctx.scripts.run(
        'drop-subscription',
        [data.state, data.attached, sub.config, sub.ready, sub.leased, data.messages, data.refs, sub.keyed, sub.keyedDeliveries, sub.keyStates],
        [subscriptionUid, DROP_BATCH],
      );
    } while (remaining !== 0);
  }

  private async finishCleanup(dataRef: string): Promise<void> {
    await this.ctx.scripts.run('finish-cleanup', [this.ctx.keys.pendingCleanups], [dataRef]);
  }
}

function setFlag(record: SubscriptionRecord, field: 'enableExactlyOnceDelivery' | 'retainAckedMessages', value?: boolean) {
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
