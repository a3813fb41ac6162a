import { ApiError, notFound } from '../errors.ts';
import { pull } from '../redis/calls/delivery.ts';
import { withTimeout } from '../timeout.ts';
import type { AckIdCodec, Delivery } from './ack-id.ts';
import { readBodies } from './bodies.ts';
import { formatTimestampUs } from './durations.ts';
import { unpackMessage } from './message-codec.ts';
import { messageId } from './message-ids.ts';
import { resourceId } from './names.ts';
import { OutdatedRecord, type SubscriptionRecord, type TopicRecord } from './records.ts';
import type { Region, Regions } from './regions.ts';
import type { DeadLetters } from './dead-letters.ts';
import type { BrokerMetrics } from './metrics.ts';
import { TOPIC_REMEMBERED_MS, RememberedRecords } from './remembered-records.ts';
import { topicRetentionUs } from './topic-fields.ts';
import type { TopicService } from './topics.ts';
import type { Settlement } from './settlement.ts';
import type { Waiter } from './wakeups.ts';

export const MAX_PULL_MESSAGES = 1000;

/**
 * Message bytes one pull returns at most (at least one message always goes): 1000 messages of
 * 10 MB would not fit in Redis's Lua memory, nor in one JSON string.
 */
export const MAX_PULL_BYTES = 10_000_000;
/**
 * A remote region that answers slower than this is skipped by a pull: a sick region must not
 * stall pulls through the healthy ones. Whatever its script leased meanwhile is given back when
 * the answer comes (nobody saw it, so exactly-once still holds), or else delivered again when the
 * lease runs out.
 */
const REMOTE_PULL_TIMEOUT_MS = 2_000;
/**
 * Leased bodies of at most this many bytes in all come back with the pull script's reply; larger
 * ones are read after it (see pull.lua). A few small messages then cost one round trip, where
 * reading them after the script would make two.
 */
const INLINE_BODY_BYTES = 16 * 1024;

export interface PullOptions {
  /** Overrides the subscription's ack deadline (streams lease with their streamAckDeadlineSeconds). */
  deadlineSeconds?: number;
  /** No further message once the leased bodies reach this many bytes (default MAX_PULL_BYTES). */
  maxBytes?: number;
  /**
   * The record was remembered, not read for the pull (delivery.ts, withRecord): the script checks
   * its version, and a pull that finds it may be outdated fails with OutdatedRecord.
   */
  remembered?: boolean;
}

export interface ReceivedMessage {
  ackId: string;
  /** On subscriptions with a dead-letter policy: 1 + the message's failed deliveries. */
  deliveryAttempt?: number;
  message: {
    /** Raw bytes; base64 on the wire (see received-json.ts). */
    data?: Buffer;
    attributes?: Record<string, string>;
    messageId: string;
    publishTime: string;
    orderingKey?: string;
  };
}

/**
 * A message a pull leased, with the delivery it is (streams track ordering keys by region and
 * sequence). Its ack ID is sealed when first asked for, as the answer is written: made for the
 * whole batch up front, the ack ID strings outlived young-generation collections (as base64
 * data did, see received-json.ts).
 */
export class LeasedMessage implements ReceivedMessage {
  // Truly private (#): the codec holds the ack ID secret, and must not show in logs or JSON.
  readonly #codec: AckIdCodec;
  #sealed?: string;

  constructor(
    codec: AckIdCodec,
    readonly delivery: Delivery,
    readonly message: ReceivedMessage['message'],
    readonly deliveryAttempt?: number,
  ) {
    this.#codec = codec;
  }

  get ackId(): string {
    this.#sealed ??= this.#codec.encode(this.delivery);
    return this.#sealed;
  }

  toJSON(): ReceivedMessage {
    const json: ReceivedMessage = { ackId: this.ackId, message: this.message };
    if (this.deliveryAttempt !== undefined) json.deliveryAttempt = this.deliveryAttempt;
    return json;
  }
}

/**
 * Pulls: leases of available messages from every usable region (this one first), for a unary
 * pull, or a leaser's next batch for the streams and long polls of a subscription (leaser.ts).
 */
export class Puller {
  /** Counts pulls, so that every few a remote region is looked at first (see pullOrder). */
  private pulls = 0;

  constructor(
    private readonly regions: Regions,
    private readonly settlement: Settlement,
    private readonly deadLetters: DeadLetters,
    /** The ack ID codec; its secret lives in Redis, so it is loaded on first use. */
    private readonly ackIds: () => Promise<AckIdCodec>,
    private readonly topics: TopicService,
    private readonly metrics: BrokerMetrics,
  ) {}

  /** Subscriptions' topics read in the last second (for their retention), and those found missing. */
  private readonly topicsSeen = new RememberedRecords<TopicRecord>(true, TOPIC_REMEMBERED_MS);

  /**
   * Leases up to `max` available messages once, without waiting, from every usable region
   * (see pullOrder). A remote region that fails is skipped: its messages wait for it; this
   * region's failure fails the pull. `full`: the pull stopped at `max` or at the byte budget, so
   * more messages may be available.
   */
  async pullOnce(record: SubscriptionRecord, max: number, options: PullOptions = {}) {
    const received: LeasedMessage[] = [];
    let nextDueUs: number | undefined;
    let bytesLeft = options.maxBytes ?? MAX_PULL_BYTES;
    for (const region of this.pullOrder()) {
      if (received.length >= max || bytesLeft <= 0) break;
      const pulling = this.pullFrom(region, record, max - received.length, bytesLeft, options);
      try {
        const part = region === this.regions.local ? await pulling : await withTimeout(pulling, REMOTE_PULL_TIMEOUT_MS);
        received.push(...part.received);
        bytesLeft -= part.bytes;
        if (part.nextDueUs !== undefined) nextDueUs = Math.min(nextDueUs ?? Infinity, part.nextDueUs);
      } catch (error) {
        if (region === this.regions.local || error instanceof ApiError) throw error;
        this.releaseLate(record, pulling);
      }
    }
    return { received, nextDueUs, full: received.length >= max || bytesLeft <= 0 };
  }

  /**
   * A remote pull given up on may still lease messages when its answer comes: nobody got them,
   * so they are given back at once instead of waiting for their leases to run out.
   */
  private releaseLate(record: SubscriptionRecord, pulling: Promise<{ received: LeasedMessage[] }>): void {
    pulling
      .then(({ received }) =>
        received.length > 0
          ? this.settlement.releaseLeased(
              record,
              received.map((m) => m.delivery),
            )
          : undefined,
      )
      .catch(() => {}); // Unanswered or failed: the leases run out by themselves.
  }

  /**
   * Arms a wake-up on the subscription's topic in every usable region: it fires on a publish or
   * nack anywhere, or on a change of one of the topic's subscriptions. Each subscription has one
   * waiter in this process: its leaser (leaser.ts), or its pusher (push.ts). Fails if this
   * region's channel cannot be armed; other regions' failures only cost their wake-ups.
   */
  async armWaiter(record: SubscriptionRecord): Promise<Waiter> {
    const armed = await Promise.allSettled(
      this.regions.localFirst().map((region) => region.wakeups.arm(region.ctx.keys.wakeChannel(record.topicUid))),
    );
    const waiters = armed.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
    const local = armed[0];
    if (local?.status === 'rejected') {
      for (const waiter of waiters) waiter.cancel();
      throw local.reason;
    }
    if (waiters.length === 1) return waiters[0];
    return {
      woken: Promise.race(waiters.map((waiter) => waiter.woken)),
      cancel: () => {
        for (const waiter of waiters) waiter.cancel();
      },
    };
  }

  /**
   * The regions a pull looks in: usable ones, this region first. Every fourth pull starts with
   * a remote region in turn, so that a busy local backlog never starves the others.
   */
  private pullOrder(): Region[] {
    const order = this.regions.localFirst();
    if (order.length < 2 || ++this.pulls % 4 !== 0) return order;
    const remote = order.slice(1);
    const first = remote[(this.pulls / 4) % remote.length];
    return [first, ...order.filter((region) => region !== first)];
  }

  private async pullFrom(
    region: Region,
    record: SubscriptionRecord,
    max: number,
    maxBytes: number,
    { deadlineSeconds, remembered }: PullOptions,
  ) {
    const { ctx } = region;
    const data = ctx.keys.topicData(record.topicUid);
    const sub = data.subscription(record.uid);
    // A topic's own retention keeps its messages in its subscriptions for at least that long.
    const topic = await this.topicsSeen.lookup(record.topic, (name) => this.topics.find(name));
    const leased = await pull(ctx.scripts, data, sub, {
      time: ctx.clock.scriptTime(),
      topicRetentionUs: topic?.uid === record.topicUid ? topicRetentionUs(topic) : undefined,
      max,
      leaseUs: deadlineSeconds === undefined ? undefined : deadlineSeconds * 1_000_000,
      wakeChannel: ctx.keys.wakeChannel(record.topicUid),
      maxBytes,
      mayForward: record.deadLetterPolicy !== undefined && (await this.deadLetters.mayForward(record)),
      recordVersion: remembered ? record.version : undefined,
      inlineBytes: INLINE_BODY_BYTES,
    });
    // Not attached in this region: its topic was deleted there before the subscription came.
    if (leased.kind === 'no-subscription') {
      if (remembered) throw new OutdatedRecord();
      if (region === this.regions.local || !this.regions.multiRegion) throw notFound(resourceId(record.name));
      return { received: [], bytes: 0, nextDueUs: undefined };
    }
    const { nextDueUs, oldestKeptUs, seqs, generations, attempts, forwards } = leased;
    this.metrics.deadlinesExpired(record, leased.expired);
    if (seqs.length === 0 && forwards.length === 0) return { received: [], bytes: 0, nextDueUs };
    // Larger bodies are read outside the script: Redis copies a body straight into the reply from here.
    const bodies =
      leased.bodies ?? (await readBodies(ctx.redis, data, [...seqs, ...forwards.map((forward) => forward.seq)]));
    if (forwards.length > 0) {
      // A step that fails is finished by a later pull (dead-letters.ts): this pull still answers.
      await this.deadLetters
        .forward(region, record, forwards, bodies.slice(seqs.length), oldestKeptUs)
        .catch(() => undefined);
    }
    const codec = await this.ackIds();
    const received: LeasedMessage[] = [];
    const expired: string[] = [];
    let bytes = 0;
    for (let j = 0; j < seqs.length; j++) {
      const seq = seqs[j];
      const generation = generations[j];
      const body = bodies[j];
      if (!body) continue; // gone (its subscription or topic was deleted meanwhile)
      const stored = unpackMessage(body);
      // Older than the subscription's retention: dropped, never delivered (see pull.lua).
      if (stored.publishTimeUs < oldestKeptUs) {
        expired.push(`${seq}:${generation}`);
        continue;
      }
      bytes += body.length;
      const message: ReceivedMessage['message'] = {
        messageId: messageId(region.name, seq),
        publishTime: publishTimes.format(stored.publishTimeUs),
      };
      if (stored.data.length > 0) message.data = stored.data;
      if (stored.attributes) message.attributes = stored.attributes;
      if (stored.orderingKey) message.orderingKey = stored.orderingKey;
      received.push(
        new LeasedMessage(
          codec,
          { region: region.name, subscriptionUid: record.uid, seq, generation },
          message,
          attempts?.[j],
        ),
      );
    }
    if (expired.length > 0) await this.settlement.acknowledgeMembers(region, record, expired);
    this.metrics.leased(record, received.length);
    return { received, bytes, nextDueUs };
  }
}

/** Messages of one publish share a publish time: format it once, not once per message. */
const publishTimes = {
  lastUs: -1,
  lastText: '',
  format(microseconds: number): string {
    if (microseconds !== this.lastUs) {
      this.lastUs = microseconds;
      this.lastText = formatTimestampUs(microseconds);
    }
    return this.lastText;
  },
};
