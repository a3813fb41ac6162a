import { randomUUID } from 'node:crypto';
import { ApiError, invalidArgument, notFound, unavailable } from '../errors.ts';
import type { PublishCall, PublishResult } from '../redis/calls/publish.ts';
import type { ClockReading } from './clock.ts';
import type { BrokerMetrics } from './metrics.ts';
import { parseFilter, type SubscriptionFilter } from './filter.ts';
import { stampMessages } from './message-codec.ts';
import { type DeliverySchedule, deliveryDueUs } from './message-extensions.ts';
import { messageId } from './message-ids.ts';
import type { ResourceName } from './names.ts';
import {
  type CheckedPublish,
  checkPublishRequest,
  type PackedPublish,
  type PubsubMessage,
  packChecked,
} from './publish-request.ts';
import type { TopicRecord } from './records.ts';
import { deduplicationWindowUs, topicRetentionUs } from './topic-fields.ts';
import type { Region, Regions } from './regions.ts';
import { RememberedRecords } from './remembered-records.ts';
import { storageRegion } from './storage-region.ts';
import type { TopicService } from './topics.ts';

interface Attachment {
  uid: string;
  /** It orders by key. */
  ordered: boolean;
  /** Only the messages whose attributes match are its. */
  filter?: SubscriptionFilter;
}

/**
 * The messages of one publish as stored, and per message its idempotency key ('' for none) and
 * when it is to be delivered (undefined: at once).
 */
interface PublishedMessages {
  messages: PubsubMessage[];
  orderingKey: string;
  idempotencyKeys: string[];
  deliveries: (DeliverySchedule | undefined)[];
}

/** Publishes stored: the message IDs of each. */
export interface Stored {
  kind: 'stored';
  messageIds: string[][];
}

/**
 * How publishes reach Redis (Publisher.storeTogether): a script that answers each publish's
 * result in order (when one refuses, nothing is stored), or something of its own instead, which
 * ends the call. `sentAlike` is the same object for every call made against the same attached
 * subscriptions of the incarnation: calls with the same KEYS (PublishBatches).
 */
export type StorePublishes<Other extends object> = (
  calls: PublishCall[],
  sentAlike: object,
) => Promise<PublishResult[] | Other>;

interface Attachments {
  version: string;
  subscriptions: Attachment[];
}

/**
 * Publish stamps in a row the script may refuse before the publish fails. A second stamp comes
 * from the time the refusing script returned, so only a clock stepped again meanwhile, or a call
 * that waited over 10 s on its way to Redis, is refused twice.
 */
const MAX_REFUSED_STAMPS = 3;

/**
 * Publishing: a publish is checked and packed (publish-request.ts), then stored by one
 * publish.lua call in one region (this endpoint's, unless the topic's storage policy says
 * otherwise: storage-region.ts), which appends it to every attached subscription.
 */
export class Publisher {
  /** Per region and topic incarnation: the attached subscriptions this node last read (checked by publish). */
  private readonly attachments = new Map<string, Attachments>();
  /** Per region and topic incarnation: the reading of its attached subscriptions under way. */
  private readonly attachmentReads = new Map<string, Promise<Attachments>>();
  /**
   * Topic records a single-region broker reuses for the publishes of the next `rememberTopicMs`,
   * so that a publish need not read one. The record gives publish nothing but the incarnation
   * (uid), and the publish script refuses a deleted one, so a remembered record cannot take a
   * message the topic would not; the time bounds how long a Redis that lost its data (say,
   * restarted without its append-only file) still sees publishes to topics it no longer has.
   */
  private readonly rememberedTopics: RememberedRecords<TopicRecord>;

  constructor(
    private readonly regions: Regions,
    private readonly topics: TopicService,
    /** How long a topic record is reused for publishing, in milliseconds (remembered-records.ts). */
    rememberTopicMs: number,
    /** Publishes whose packed bodies reach this many bytes stage them outside the script. */
    private readonly stageBodiesFromBytes: number,
    private readonly metrics: BrokerMetrics,
  ) {
    this.rememberedTopics = new RememberedRecords<TopicRecord>(!regions.multiRegion, rememberTopicMs);
  }

  /** A publish request: counted in the metrics, whatever its answer. */
  async publish(topicName: ResourceName, requested: PubsubMessage[]): Promise<{ messageIds: string[] }> {
    try {
      const published = await this.publishChecked(topicName, this.check(requested));
      this.metrics.publishRequest(topicName.full, 'OK');
      return published;
    } catch (error) {
      this.metrics.publishRequest(topicName.full, error instanceof ApiError ? error.status : 'INTERNAL');
      throw error;
    }
  }

  /** Checks a publish request and packs its bodies (INVALID_ARGUMENT and the like for a bad one). */
  check(requested: PubsubMessage[]): CheckedPublish {
    return checkPublishRequest(requested, this.stageBodiesFromBytes);
  }

  /** Stores a publish that `check` made. */
  async publishChecked(topicName: ResourceName, checked: CheckedPublish): Promise<{ messageIds: string[] }> {
    const { messages, idempotencyKeys, deliveries } = checked;
    const orderingKey = messages[0].orderingKey ?? '';
    for (;;) {
      const remembered = this.rememberedTopics.recall(topicName.full)?.record;
      const record = remembered ?? (await this.topics.read(topicName));
      const stored = await this.publishTo(
        record,
        checked,
        { messages, orderingKey, idempotencyKeys, deliveries },
        storageRegion(this.regions, record, orderingKey),
      );
      if (stored.kind === 'stored') {
        if (!remembered) this.rememberedTopics.remember(record.name, record);
        return { messageIds: stored.messageIds };
      }
      // That incarnation was deleted: the name is gone, or now names a new incarnation.
      this.rememberedTopics.forget(topicName.full);
      if (!remembered) throw notFound(topicName.id);
    }
  }

  /**
   * Stores a message forwarded from a subscription's dead-letter policy in the topic incarnation,
   * in `region`, once: a forward ID that was stored before stores nothing (dead-letters.ts).
   * False when the incarnation was deleted.
   */
  async forward(record: TopicRecord, region: Region, message: PubsubMessage, forwardId: string): Promise<boolean> {
    const packed = packChecked([message], this.stageBodiesFromBytes);
    const stored = await this.publishTo(
      record,
      packed,
      { messages: [message], orderingKey: message.orderingKey ?? '', idempotencyKeys: [''], deliveries: [undefined] },
      region,
      forwardId,
    );
    return stored.kind !== 'topic-deleted';
  }

  /**
   * Stores publishes to one topic incarnation together, in `region`, by `store`: a script that
   * runs publish.lua as a step (ack-and-publish.ts). Their bodies go in the call, even those a
   * publish alone would stage.
   */
  storeTogether<Other extends object>(
    record: TopicRecord,
    region: Region,
    publishes: readonly CheckedPublish[],
    store: StorePublishes<Other>,
  ): Promise<Stored | { kind: 'topic-deleted' | 'forwarded-before' } | Other> {
    const groups = publishes.map((checked) => ({
      packed: checked.staged ? packChecked(checked.messages, Number.POSITIVE_INFINITY) : checked,
      published: { ...checked, orderingKey: checked.messages[0].orderingKey ?? '' },
    }));
    return this.storeGroups(record, region, groups, store);
  }

  /** Stores a publish in the topic incarnation, in `region`. */
  private async publishTo(
    record: TopicRecord,
    packed: PackedPublish,
    published: PublishedMessages,
    region: Region,
    forwardId?: string,
  ): Promise<{ kind: 'stored'; messageIds: string[] } | { kind: 'topic-deleted' | 'forwarded-before' }> {
    const { ctx } = region;
    const data = ctx.keys.topicData(record.uid);
    const stored = await this.storeGroups<never>(
      record,
      region,
      [{ packed, published }],
      async ([call], sentAlike) => [await ctx.publishBatches.publish(data, call, sentAlike)],
      forwardId,
    );
    return stored.kind === 'stored' ? { kind: 'stored', messageIds: stored.messageIds[0] } : stored;
  }

  /**
   * Stores publishes to the topic incarnation, in `region`, by `store`: stamped with one publish
   * time, against the attached subscriptions this node read. A refusal stores nothing: after a
   * change of attachments or a refused stamp, all are stored again.
   */
  private async storeGroups<Other extends object>(
    record: TopicRecord,
    region: Region,
    groups: readonly { packed: PackedPublish; published: PublishedMessages }[],
    store: StorePublishes<Other>,
    forwardId?: string,
  ): Promise<Stored | { kind: 'topic-deleted' | 'forwarded-before' } | Other> {
    const { ctx } = region;
    const data = ctx.keys.topicData(record.uid);
    const wakeChannel = ctx.keys.wakeChannel(record.uid);
    const cacheKey = `${region.name}/${record.uid}`;
    // A publish whose bodies are in the call names a staging key all the same, which it never touches.
    const stagingKeys = groups.map(({ packed }) => data.staging(packed.staged ? randomUUID() : 'unused'));
    let refusal: ClockReading | undefined;
    for (let refusedStamps = 0; ; ) {
      const attachments = this.attachments.get(cacheKey) ?? (await this.readAttachments(region, record.uid));
      const publishTimeUs = refusal ? ctx.publishClock.stampFrom(refusal) : await ctx.publishClock.stampUs();
      const calls = groups.map(({ packed: { bodies, staged }, published }, group): PublishCall => {
        stampMessages(bodies, publishTimeUs);
        return {
          time: ctx.clock.scriptTime(),
          publishTimeUs,
          attachVersion: attachments.version,
          wakeChannel,
          orderingKey: published.orderingKey,
          subscriptions: attachments.subscriptions.map((attachment) => selection(attachment, published.messages)),
          bodies,
          staged,
          stagingKey: stagingKeys[group],
          forwardId,
          topicRetentionUs: topicRetentionUs(record),
          idempotencyKeys: published.idempotencyKeys,
          deduplicationWindowUs: deduplicationWindowUs(record),
          scheduled: scheduledMessages(published.deliveries, publishTimeUs),
        };
      });
      const results = await store(calls, attachments);
      if (!Array.isArray(results)) return results;
      const result = results.find((each) => each.kind !== 'published') ?? results[0];
      if (result.kind === 'topic-deleted' || result.kind === 'forwarded-before') return { kind: result.kind };
      if (result.kind === 'attachments-changed') {
        this.attachments.delete(cacheKey);
        continue;
      }
      if (result.kind === 'stamp-refused') {
        // Stamped from a reading the script's clock disagrees with (Redis's clock was set, or
        // another shard's clock read it): stamp again from the time this script returned.
        refusal = ctx.publishClock.observe(result.redisTimeUs);
        if (++refusedStamps < MAX_REFUSED_STAMPS) continue;
        throw unavailable('The publish time could not be agreed with the Redis clock; retry the publish.');
      }
      if (result.kind === 'scheduled-past-retention') {
        throw invalidArgument(
          `Message ${result.index}: the delivery time is more than ${result.retentionUs / 1_000_000}s after the publish time, the retention of a subscription that takes it; it would expire before its delivery.`,
        );
      }
      if (result.kind === 'staged-bodies-missing')
        throw unavailable('The publish could not be stored this time; retry it.');
      ctx.publishClock.observe(result.redisTimeUs);
      for (const { published } of groups) this.metrics.published(record.name, published.messages.map(messageSize));
      return {
        kind: 'stored',
        messageIds: results.map((stored, group) => {
          const { firstSeq, duplicates } = stored as Extract<PublishResult, { kind: 'published' }>;
          return Array.from({ length: groups[group].packed.bodies.count }, (_, i) =>
            messageId(region.name, duplicates.get(i) ?? firstSeq + i),
          );
        }),
      };
    }
  }

  /**
   * The attached subscriptions of the incarnation, read for the publishes that do not have them:
   * those that come while a reading is under way share it, so that they read them once and, with
   * the same Attachments object, go to Redis in one batch (PublishBatches). A publish refused
   * for changed attachments may share a reading begun before the change: refused again, it
   * reads them anew.
   */
  private readAttachments(region: Region, topicUid: string): Promise<Attachments> {
    const cacheKey = `${region.name}/${topicUid}`;
    const underWay = this.attachmentReads.get(cacheKey);
    if (underWay) return underWay;
    const reading = this.readAttachmentsNow(region, topicUid).finally(() => this.attachmentReads.delete(cacheKey));
    this.attachmentReads.set(cacheKey, reading);
    return reading;
  }

  private async readAttachmentsNow(region: Region, topicUid: string): Promise<Attachments> {
    const { redis, keys } = region.ctx;
    const data = keys.topicData(topicUid);
    const [version, attached] = await Promise.all([
      redis.hget(data.state, 'attachVersion'),
      redis.hgetall(data.attached),
    ]);
    // Sent in this order on one connection, the set read is at least as new as the version: if
    // it is newer, publish fails its version check and this is read again, so a stale pair is
    // never used to publish.
    const attachments: Attachments = {
      version: version ?? '0',
      subscriptions: Object.entries(attached).map(([uid, value]) => attachment(uid, value)),
    };
    this.attachments.set(`${region.name}/${topicUid}`, attachments);
    return attachments;
  }
}

/** The messages of a publish stamped at publishTimeUs that are due later: their indexes and due times. */
function scheduledMessages(deliveries: (DeliverySchedule | undefined)[], publishTimeUs: number) {
  const scheduled: { index: number; dueUs: number }[] = [];
  deliveries.forEach((delivery, index) => {
    const dueUs = deliveryDueUs(delivery, publishTimeUs, index);
    if (dueUs > 0) scheduled.push({ index, dueUs });
  });
  return scheduled;
}

/** An attached subscription as the topic's attachment hash holds it (attach-subscription.lua). */
function attachment(uid: string, value: string): Attachment {
  const filter = value.length > 1 ? parseFilter(value.slice(1)) : undefined;
  return { uid, ordered: value[0] === '1', ...(filter ? { filter } : {}) };
}

/** Which of the messages a subscription takes: all, unless its filter refuses some. */
function selection(attachment: Attachment, messages: PubsubMessage[]) {
  const { uid, ordered, filter } = attachment;
  if (!filter) return attachment;
  let takes = '';
  for (const message of messages) takes += filter.matches(message.attributes) ? '1' : '0';
  return takes.includes('0') ? { uid, ordered, takes } : attachment;
}

/** A message's size as Pub/Sub's message_sizes counts it: data, attributes and ordering key. */
function messageSize(message: PubsubMessage): number {
  let size = message.data.length + Buffer.byteLength(message.orderingKey ?? '');
  for (const [key, value] of Object.entries(message.attributes ?? {}))
    size += Buffer.byteLength(key) + Buffer.byteLength(value);
  return size;
}
