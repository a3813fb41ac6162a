import { ApiError, failedPrecondition } from '../errors.ts';
import { AckAndPublish, type AckAndPublishRequest } from './ack-and-publish.ts';
import type { AckIdCodec, Delivery } from './ack-id.ts';
import { checkDeadlineChange } from './ack-deadline.ts';
import type { Authorizer } from './authorization.ts';
import type { CallContext } from './call-context.ts';
import type { Places } from './limits.ts';
import type { BrokerMetrics } from './metrics.ts';
import { DeadLetters } from './dead-letters.ts';
import type { ResourceName } from './names.ts';
import { Publisher } from './publish.ts';
import type { PubsubMessage } from './publish-request.ts';
import { Leasers } from './leaser.ts';
import { MAX_PULL_MESSAGES, Puller, type ReceivedMessage } from './pull.ts';
import { OutdatedRecord, type SubscriptionRecord } from './records.ts';
import { RememberedRecords } from './remembered-records.ts';
import type { Regions } from './regions.ts';
import { type IssuedAckIds, type SettleOutcome, Settlement, throwFailures } from './settlement.ts';
import { checkSubscribeRegion } from './storage-region.ts';
import type { SubscriptionService } from './subscriptions.ts';
import type { TopicService } from './topics.ts';

export interface DeliveryOptions {
  /** The ack ID codec; its secret lives in Redis, so it is loaded on first use. */
  ackIds: () => Promise<AckIdCodec>;
  /** Upper bound of a long-polling pull, in milliseconds. */
  pullWaitMs: number;
  /** How long a topic record is reused for publishing, in milliseconds (remembered-records.ts). */
  rememberTopicMs: number;
  /** How long unary delivery calls reuse a subscription record, in milliseconds (withRecord). */
  rememberSubscriptionMs: number;
  /** Publishes whose packed bodies reach this many bytes stage them outside the script (publish.ts). */
  stageBodiesFromBytes: number;
  metrics: BrokerMetrics;
  authorizer: Authorizer;
  /** The places of pulls that wait for messages on this node (MAX_LONG_POLLS). */
  longPolls: Places;
}

export interface PublishRequest {
  messages: PubsubMessage[];
}

export interface PullRequest {
  maxMessages: number;
  returnImmediately?: boolean;
}

export interface AcknowledgeRequest {
  ackIds: string[];
}

export interface ModifyAckDeadlineRequest {
  ackIds: string[];
  /** 0 gives the messages back at once (a nack). */
  ackDeadlineSeconds: number;
}

/** A settlement that was made: acknowledgements, or new deadlines (`deadlineSeconds`; 0 = nack). */
export interface Settled {
  record: SubscriptionRecord;
  outcome: SettleOutcome;
  deadlineSeconds?: number;
}

/**
 * Publishing and the pull/ack/modack cycle, each state change one script: publish.ts stores
 * messages, pull.ts leases them, settlement.ts acknowledges them and changes their deadlines.
 * The unary calls are here; streams (streaming.ts) use the parts they share with them, and
 * streams and waiting long polls of one subscription share its leaser (leaser.ts).
 */
export class DeliveryService {
  private readonly publisher: Publisher;
  private readonly puller: Puller;
  /** The leasers of this process's subscriptions: streams and waiting long polls are served by them. */
  readonly leasers: Leasers;
  private readonly settlement: Settlement;
  private readonly ackAndPublish: AckAndPublish;
  private readonly settledListeners: ((settled: Settled) => void)[] = [];
  private readonly authorizer: Authorizer;
  /** Subscription records the unary calls read, for the calls of the next rememberSubscriptionMs (withRecord). */
  private readonly subscriptionsSeen: RememberedRecords<SubscriptionRecord>;

  constructor(
    private readonly regions: Regions,
    private readonly topics: TopicService,
    private readonly subscriptions: SubscriptionService,
    private readonly options: DeliveryOptions,
  ) {
    const { metrics } = options;
    this.authorizer = options.authorizer;
    this.subscriptionsSeen = new RememberedRecords(!regions.multiRegion, options.rememberSubscriptionMs);
    this.publisher = new Publisher(regions, topics, options.rememberTopicMs, options.stageBodiesFromBytes, metrics);
    this.settlement = new Settlement(regions, options.ackIds, metrics);
    const deadLetters = new DeadLetters(regions, topics, this.publisher, metrics);
    this.puller = new Puller(regions, this.settlement, deadLetters, options.ackIds, topics, metrics);
    this.leasers = new Leasers(this, options.pullWaitMs);
    this.ackAndPublish = new AckAndPublish(
      regions,
      this.settlement,
      this.publisher,
      topics,
      (record, outcome, deadlineSeconds) =>
        this.announce({ record, outcome, ...(deadlineSeconds === undefined ? {} : { deadlineSeconds }) }),
    );
  }

  /** Stops long polls from waiting (graceful shutdown). */
  close(): void {
    this.leasers.close();
  }

  async publish(caller: CallContext, topic: ResourceName, request: PublishRequest): Promise<{ messageIds: string[] }> {
    await this.authorizer.require(caller, 'pubsub.topics.publish', topic.full);
    return this.publisher.publish(topic, request.messages);
  }

  /**
   * Pulling, streaming and settling need the right to consume the subscription. Ack IDs need
   * nothing more: they are bound to the subscription whose uid they carry (settlement.ts), so a
   * caller allowed on one subscription cannot settle another's messages through it.
   */
  requireConsume(caller: CallContext, name: ResourceName): Promise<void> {
    return this.authorizer.require(caller, 'pubsub.subscriptions.consume', name.full);
  }

  /** Leases messages for a unary pull; long-polls unless returnImmediately, until the caller's signal. */
  async pull(caller: CallContext, name: ResourceName, request: PullRequest): Promise<ReceivedMessage[]> {
    await this.requireConsume(caller, name);
    if (request.returnImmediately === true) {
      const max = Math.min(request.maxMessages, MAX_PULL_MESSAGES);
      return this.withRecord(name, pullRefusal, async (record, remembered) => {
        await this.checkSubscribeRegion(record);
        const { received } = await this.unlessDetached(name, this.puller.pullOnce(record, max, { remembered }));
        return received;
      });
    }
    // A long poll's record is read for it: it may wait, and its leaser serves it (leaser.ts).
    const record = await this.readPullable(name);
    await this.checkSubscribeRegion(record);
    const signal = caller.signal ?? new AbortController().signal;
    // A pull that may wait holds a place while it runs; none left: RESOURCE_EXHAUSTED.
    const leave = this.options.longPolls.enter();
    try {
      return await this.unlessDetached(name, this.leasers.longPoll(record, name, request.maxMessages, signal));
    } finally {
      leave();
    }
  }

  async acknowledge(caller: CallContext, name: ResourceName, request: AcknowledgeRequest): Promise<void> {
    throwFailures(await this.acknowledgeEach(caller, name, request));
  }

  /** acknowledge, with its per-ack-ID results, for a front end that reports failures its own way. */
  async acknowledgeEach(caller: CallContext, name: ResourceName, request: AcknowledgeRequest): Promise<SettleOutcome> {
    await this.requireConsume(caller, name);
    return this.withRecord(name, noRefusal, async (record, remembered) => {
      await this.checkSubscribeRegion(record);
      return this.unlessDetached(name, this.acknowledgeDeliveries(record, request.ackIds, remembered));
    });
  }

  /**
   * Acknowledges ack IDs of the subscription and publishes messages, in one step: both take
   * effect, or (an ack ID that is not current) nothing is published (ack-and-publish.ts).
   */
  async acknowledgeAndPublish(
    caller: CallContext,
    name: ResourceName,
    request: AckAndPublishRequest,
  ): Promise<{ messageIds: string[][] }> {
    await this.requireConsume(caller, name);
    for (const topic of new Set(request.publish.map((each) => each.topic.full))) {
      await this.authorizer.require(caller, 'pubsub.topics.publish', topic);
    }
    const record = await this.subscriptions.readForDelivery(name);
    await this.checkSubscribeRegion(record);
    return this.unlessDetached(name, this.ackAndPublish.run(record, request));
  }

  async modifyAckDeadline(caller: CallContext, name: ResourceName, request: ModifyAckDeadlineRequest): Promise<void> {
    throwFailures(await this.modifyAckDeadlineEach(caller, name, request));
  }

  /** modifyAckDeadline, with its per-ack-ID results (as acknowledgeEach). */
  async modifyAckDeadlineEach(
    caller: CallContext,
    name: ResourceName,
    request: ModifyAckDeadlineRequest,
  ): Promise<SettleOutcome> {
    checkDeadlineChange(request.ackDeadlineSeconds, 'ackDeadlineSeconds');
    await this.requireConsume(caller, name);
    return this.withRecord(name, noRefusal, async (record, remembered) => {
      await this.checkSubscribeRegion(record);
      return this.unlessDetached(
        name,
        this.modifyDeliveries(record, request.ackIds, request.ackDeadlineSeconds, remembered),
      );
    });
  }

  /**
   * Runs a unary call with the subscription's record as an earlier call read it, at most
   * rememberSubscriptionMs ago (single region only), so that the call reads nothing before its
   * script. The script checks the record's version, and whatever says the record may be
   * outdated (OutdatedRecord: newer settings, no subscription, an ack ID of another incarnation)
   * comes before any change: the call then reads the record and runs again with it. The call
   * refuses a record `refusal` answers an error for (as it refuses a detached one): a remembered
   * one is read again first, so that no refusal comes from a remembered record.
   */
  private async withRecord<T>(
    name: ResourceName,
    refusal: (record: SubscriptionRecord) => ApiError | undefined,
    call: (record: SubscriptionRecord, remembered: boolean) => Promise<T>,
  ): Promise<T> {
    const remembered = this.subscriptionsSeen.recall(name.full)?.record;
    if (remembered && !refusal(remembered)) {
      try {
        return await call(remembered, true);
      } catch (error) {
        if (!(error instanceof OutdatedRecord)) throw error;
      }
    }
    this.subscriptionsSeen.forget(name.full);
    const record = await this.subscriptions.readForDelivery(name);
    this.subscriptionsSeen.remember(name.full, record);
    const refused = refusal(record);
    if (refused) throw refused;
    return call(record, false);
  }

  /**
   * Acknowledges deliveries and reports, per ack ID, what happened (settlement.ts).
   * `remembered`: as in Settlement.acknowledgeDeliveries.
   */
  async acknowledgeDeliveries(
    record: SubscriptionRecord,
    ackIds: string[],
    remembered = false,
  ): Promise<SettleOutcome> {
    const outcome = await this.settlement.acknowledgeDeliveries(record, ackIds, remembered);
    this.announce({ record, outcome });
    return outcome;
  }

  /** Sets new deadlines (0 = nack) and reports, per ack ID, what happened (as acknowledgeDeliveries). */
  async modifyDeliveries(
    record: SubscriptionRecord,
    ackIds: string[],
    seconds: number,
    remembered = false,
  ): Promise<SettleOutcome> {
    const outcome = await this.settlement.modifyDeliveries(record, ackIds, seconds, remembered);
    this.announce({ record, outcome, deadlineSeconds: seconds });
    return outcome;
  }

  /**
   * Settles leases this process holds itself, by delivery (settlement.ts, acknowledgeLeased):
   * no client has their ack IDs, so no stream hears of it.
   */
  acknowledgeLeased(record: SubscriptionRecord, deliveries: readonly Delivery[]): Promise<void> {
    return this.settlement.acknowledgeLeased(record, deliveries);
  }

  modifyLeased(record: SubscriptionRecord, deliveries: readonly Delivery[], seconds: number): Promise<void> {
    return this.settlement.modifyLeased(record, deliveries, seconds);
  }

  /** Gives back leases that never reached a client: no delivery attempt counts. */
  releaseLeased(record: SubscriptionRecord, deliveries: readonly Delivery[]): Promise<void> {
    return this.settlement.releaseLeased(record, deliveries);
  }

  /**
   * Calls `listener` after every settlement made through this process, whether a unary call or a
   * stream made it: streams learn that what they delivered was acked or nacked elsewhere (the
   * official clients ack with unary calls) and free its flow-control room.
   */
  onSettled(listener: (settled: Settled) => void): void {
    this.settledListeners.push(listener);
  }

  /** Lets settlement find the deliveries behind ack IDs this process's streams issued (settlement.ts). */
  recognizeIssued(issued: IssuedAckIds): void {
    this.settlement.recognizeIssued(issued);
  }

  /**
   * A subscription detached while a call or stream on it ran (a long poll the detach woke, say)
   * has no data any more, which the scripts report as NOT_FOUND: the call then fails as any call
   * on it now does, with FAILED_PRECONDITION.
   */
  private async unlessDetached<T>(name: ResourceName, call: Promise<T>): Promise<T> {
    try {
      return await call;
    } catch (error) {
      throw await this.failureOf(name, error);
    }
  }

  /** The error a call or stream on the subscription fails with, given `error` (see unlessDetached). */
  async failureOf(name: ResourceName, error: unknown): Promise<unknown> {
    if (!(error instanceof ApiError && error.status === 'NOT_FOUND')) return error;
    try {
      await this.subscriptions.readForDelivery(name);
    } catch (current) {
      return current;
    }
    return error;
  }

  /**
   * The record of a subscription that may be pulled from: not detached, not pushing. With
   * `recentWithinMs`, from this process's copy as read at most that long ago (readForDelivery).
   */
  async readPullable(name: ResourceName, recentWithinMs?: number): Promise<SubscriptionRecord> {
    const record = await this.subscriptions.readForDelivery(name, recentWithinMs);
    const refused = pullRefusal(record);
    if (refused) throw refused;
    return record;
  }

  private announce(settled: Settled): void {
    for (const listener of this.settledListeners) listener(settled);
  }

  /** Leases up to `max` messages once, without waiting (pull.ts). */
  pullOnce(...args: Parameters<Puller['pullOnce']>): ReturnType<Puller['pullOnce']> {
    return this.puller.pullOnce(...args);
  }

  /** A wake-up on the subscription's topic in every usable region (pull.ts). */
  armWaiter(record: SubscriptionRecord): ReturnType<Puller['armWaiter']> {
    return this.puller.armWaiter(record);
  }

  /** Subscribing through this endpoint is allowed by the topic's storage policy (storage-region.ts). */
  checkSubscribeRegion(record: SubscriptionRecord): Promise<void> {
    return checkSubscribeRegion(this.regions, this.topics, record);
  }
}

/** Pub/Sub refuses Pull and StreamingPull on a subscription that pushes (push.ts delivers it). */
function pullRefusal(record: SubscriptionRecord): ApiError | undefined {
  return record.pushConfig ? failedPrecondition('This method is not supported for push subscriptions.') : undefined;
}

/** Acknowledging and changing deadlines take any subscription that is not detached. */
const noRefusal = (): undefined => undefined;
