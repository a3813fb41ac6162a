import { createHash } from 'node:crypto';
import { ApiError, exactlyOnceAckFailure } from '../errors.ts';
import { acknowledgeAndPublish } from '../redis/calls/ack-and-publish.ts';
import type { SettleResult } from '../redis/calls/delivery.ts';
import { messageId } from './message-ids.ts';
import { IDEMPOTENCY_KEY_ATTRIBUTE } from './message-extensions.ts';
import type { ResourceName } from './names.ts';
import type { Publisher } from './publish.ts';
import type { CheckedPublish, PubsubMessage } from './publish-request.ts';
import type { SubscriptionRecord, TopicRecord } from './records.ts';
import type { Region, Regions } from './regions.ts';
import type { DecodedAckIds, SettleOutcome, Settlement } from './settlement.ts';
import { storageRegion } from './storage-region.ts';
import type { TopicService } from './topics.ts';

/** An acknowledgeAndPublish request: ack IDs of one subscription, and messages for topics. */
export interface AckAndPublishRequest {
  ackIds: string[];
  publish: { topic: ResourceName; messages: PubsubMessage[] }[];
}

/** A publish of the call, checked and packed, and the topic incarnation it goes to. */
interface CallPublish {
  topic: ResourceName;
  record: TopicRecord;
  checked: CheckedPublish;
}

/**
 * Acknowledge and publish in one step (the outbox step of a queue: "ack on receipt and enqueue a
 * follow-up"): the acks take effect and the messages are published, or, when an ack ID is no
 * longer current, nothing is published and the answer says which failed. On every subscription,
 * as strictly as on exactly-once ones. Each message is published with an idempotency key
 * derived from the subscription, the messages acknowledged and its place in the request (unless
 * it has its own: a digest of the first two, then publish group and index), so that the same
 * call again, or again after a redelivery of the same messages, stores nothing twice within the
 * topic's deduplicationWindow.
 *
 * When every key of the call shares one hash tag (every ack ID names a delivery in one region,
 * and every publish goes to the subscription's own topic incarnation, stored in that region),
 * the call is one script, all or nothing (acknowledge-and-publish.lua). Otherwise the
 * subscription and the topics may lie on different Redis Cluster shards (and regions), so it is
 * three steps, each one script, made exactly-once by idempotency:
 *   1. hold: the leases are extended to the subscription's ack deadline from now (far longer than
 *      a publish takes), all or nothing per region; an ack ID that is not current refuses the
 *      call, with nothing published;
 *   2. publish, with the idempotency keys;
 *   3. acknowledge.
 * A broker stopped after 1 leaves the messages leased until the hold ends, then delivered again;
 * stopped after 2, the same, and processing them again publishes nothing new.
 */
export class AckAndPublish {
  constructor(
    private readonly regions: Regions,
    private readonly settlement: Settlement,
    private readonly publisher: Publisher,
    private readonly topics: TopicService,
    /** Tells streams what settled (DeliveryService.announce). */
    private readonly announce: (record: SubscriptionRecord, outcome: SettleOutcome, deadlineSeconds?: number) => void,
  ) {}

  async run(record: SubscriptionRecord, request: AckAndPublishRequest): Promise<{ messageIds: string[][] }> {
    const deliveries = await this.settlement.deliveriesOf(record, request.ackIds);
    // The idempotency keys come from the messages acknowledged (an ack ID that names none fails
    // the lease check, before anything is published).
    const processed = [...deliveries.values()].flatMap((d) => (d ? [messageId(d.region, d.seq)] : []));
    const callKey = processingKey(record.name, [...new Set(processed)].sort());
    // Everything that can be refused is refused before anything changes: each publish is
    // checked and packed once, here.
    const publishes: CallPublish[] = [];
    for (const [group, { topic, messages }] of request.publish.entries()) {
      try {
        const keyed = messages.map((message, index) =>
          message.idempotencyKey !== undefined || message.attributes?.[IDEMPOTENCY_KEY_ATTRIBUTE] !== undefined
            ? message
            : { ...message, idempotencyKey: `${callKey}/${group}/${index}` },
        );
        const checked = this.publisher.check(keyed);
        publishes.push({ topic, checked, record: await this.topics.read(topic) });
      } catch (error) {
        throw error instanceof ApiError ? new ApiError(error.status, `publish[${group}]: ${error.message}`) : error;
      }
    }
    const region = this.oneScriptRegion(record, deliveries, publishes);
    return (
      (region && (await this.inOneScript(region, record, deliveries, publishes))) ??
      this.inThreeSteps(record, deliveries, publishes)
    );
  }

  /**
   * Where the call is one script: the region of every delivery its ack IDs name, when it
   * publishes, each publish to the subscription's own topic incarnation (whose hash tag the
   * subscription's keys share), stored in that region, and only the first schedules messages (a
   * later one could be refused alone, after the earlier ones stored).
   */
  private oneScriptRegion(
    record: SubscriptionRecord,
    deliveries: DecodedAckIds,
    publishes: CallPublish[],
  ): Region | undefined {
    const region = this.settlement.oneRegionOf(deliveries);
    const together =
      publishes.length > 0 &&
      publishes.every(
        ({ record: topic, checked }, group) =>
          topic.uid === record.topicUid &&
          storageRegion(this.regions, topic, checked.messages[0].orderingKey ?? '') === region &&
          (group === 0 || checked.deliveries.every((delivery) => delivery === undefined)),
      );
    return together ? region : undefined;
  }

  /**
   * The call as one script: the lease check, the publishes and the acknowledgement, all or
   * nothing. A refused publish is retried as a publish is (Publisher.storeTogether). Undefined
   * when the topic incarnation was deleted first (nothing changed): the three steps then find
   * out what the topic's name names now.
   */
  private async inOneScript(
    region: Region,
    record: SubscriptionRecord,
    deliveries: DecodedAckIds,
    publishes: CallPublish[],
  ): Promise<{ messageIds: string[][] } | undefined> {
    const { ctx } = region;
    const data = ctx.keys.topicData(record.topicUid);
    const sub = data.subscription(record.uid);
    const settling = this.settlement.strictlyIn(region, record, deliveries);
    let acknowledged: SettleResult = { kind: 'settled', outcomes: [] };
    const stored = await this.publisher.storeTogether(
      publishes[0].record,
      region,
      publishes.map(({ checked }) => checked),
      async (calls) => {
        const result = await acknowledgeAndPublish(ctx.scripts, data, sub, {
          time: ctx.clock.scriptTime(),
          members: settling.members,
          refuse: settling.someInvalid,
          ordered: record.enableMessageOrdering === true,
          wakeChannel: ctx.keys.wakeChannel(record.topicUid),
          publishes: calls,
        });
        switch (result.kind) {
          case 'done':
            acknowledged = result.acknowledged;
            return result.published;
          case 'publish-refused':
            return [result.refusal];
          case 'leases-refused':
            return { kind: 'leases-refused', settled: { kind: 'settled', outcomes: result.outcomes } } as const;
          case 'no-subscription':
            return { kind: 'leases-refused', settled: result } as const;
        }
      },
    );
    if (stored.kind === 'leases-refused') throw exactlyOnceAckFailure(settling.outcome(stored.settled).failures);
    if (stored.kind !== 'stored') return undefined;
    return this.acknowledged(record, settling.outcome(acknowledged), stored.messageIds);
  }

  private async inThreeSteps(
    record: SubscriptionRecord,
    deliveries: DecodedAckIds,
    publishes: CallPublish[],
  ): Promise<{ messageIds: string[][] }> {
    const holdSeconds = record.ackDeadlineSeconds;
    const held = await this.settlement.holdDeliveries(record, deliveries, holdSeconds);
    if (held.failures.size > 0) throw exactlyOnceAckFailure(held.failures);
    this.announce(record, held, holdSeconds);

    const messageIds: string[][] = [];
    for (const { topic, checked } of publishes) {
      messageIds.push((await this.publisher.publishChecked(topic, checked)).messageIds);
    }
    return this.acknowledged(record, await this.settlement.acknowledgeStrictly(record, deliveries), messageIds);
  }

  /** The answer once the messages are published and `acked` says what the acknowledgement did. */
  private acknowledged(
    record: SubscriptionRecord,
    acked: SettleOutcome,
    messageIds: string[][],
  ): { messageIds: string[][] } {
    this.announce(record, acked);
    if (acked.failures.size > 0) {
      throw new ApiError(
        'ABORTED',
        `The messages were published, but ${acked.failures.size} of the acknowledgements no longer took effect (a seek, or a hold that ran out). Call again: what was published is not published again within the topics' deduplication window.`,
      );
    }
    return { messageIds };
  }
}

/**
 * What the idempotency keys of a call's messages start with: a digest of the subscription and
 * the messages it acknowledges (their IDs, sorted), the same whenever they are processed again.
 */
function processingKey(subscription: string, processed: string[]): string {
  const digest = createHash('sha256')
    .update(JSON.stringify([subscription, processed]))
    .digest();
  return `ack-and-publish/${digest.toString('base64url')}`;
}
