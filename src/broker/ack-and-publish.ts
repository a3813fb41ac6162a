import { createHash } from 'node:crypto';
import { ApiError, exactlyOnceAckFailure } from '../errors.ts';
import { messageId } from './message-ids.ts';
import { IDEMPOTENCY_KEY_ATTRIBUTE } from './message-extensions.ts';
import type { ResourceName } from './names.ts';
import type { Publisher } from './publish.ts';
import type { PubsubMessage } from './publish-request.ts';
import type { SubscriptionRecord } from './records.ts';
import type { SettleOutcome, Settlement } from './settlement.ts';
import type { TopicService } from './topics.ts';

/** An acknowledgeAndPublish request: ack IDs of one subscription, and messages for topics. */
export interface AckAndPublishRequest {
  ackIds: string[];
  publish: { topic: ResourceName; messages: PubsubMessage[] }[];
}

/**
 * Acknowledge and publish in one step (the outbox step of a queue: "ack on receipt and enqueue a
 * follow-up"): the acks take effect and the messages are published, or, when an ack ID is no
 * longer current, nothing is published and the answer says which failed. On every subscription,
 * as strictly as on exactly-once ones. The subscription and the topics may lie on different
 * Redis Cluster shards (and regions), so it is three steps, each one script, made exactly-once
 * by idempotency:
 *   1. hold: the leases are extended to the subscription's ack deadline from now (far longer than
 *      a publish takes), all or nothing per region; an ack ID that is not current refuses the
 *      call, with nothing published;
 *   2. publish: each message with an idempotency key derived from the subscription, the
 *      messages acknowledged and its place in the request (unless it has its own: a digest of
 *      the first two, then publish group and index), so that the
 *      same call again, or again after a redelivery of the same messages, stores nothing twice
 *      within the topic's deduplicationWindow;
 *   3. acknowledge.
 * A broker stopped after 1 leaves the messages leased until the hold ends, then delivered again;
 * stopped after 2, the same, and processing them again publishes nothing new.
 */
export class AckAndPublish {
  constructor(
    private readonly settlement: Settlement,
    private readonly publisher: Publisher,
    private readonly topics: TopicService,
    /** Tells streams what settled (DeliveryService.announce). */
    private readonly announce: (record: SubscriptionRecord, outcome: SettleOutcome, deadlineSeconds?: number) => void,
  ) {}

  async run(record: SubscriptionRecord, request: AckAndPublishRequest): Promise<{ messageIds: string[][] }> {
    const deliveries = await this.settlement.deliveriesOf(record, request.ackIds);
    // The idempotency keys come from the messages acknowledged (an ack ID that names none fails
    // the hold below, before anything is published).
    const processed = [...deliveries.values()].flatMap((d) => (d ? [messageId(d.region, d.seq)] : []));
    const callKey = processingKey(record.name, [...new Set(processed)].sort());
    // Everything that can be refused is refused before anything changes: each publish is
    // checked and packed once, here.
    const publishes = [];
    for (const [group, { topic, messages }] of request.publish.entries()) {
      try {
        const keyed = messages.map((message, index) =>
          message.idempotencyKey !== undefined || message.attributes?.[IDEMPOTENCY_KEY_ATTRIBUTE] !== undefined
            ? message
            : { ...message, idempotencyKey: `${callKey}/${group}/${index}` },
        );
        publishes.push({ topic, checked: this.publisher.check(keyed) });
        await this.topics.read(topic);
      } catch (error) {
        throw error instanceof ApiError ? new ApiError(error.status, `publish[${group}]: ${error.message}`) : error;
      }
    }
    const holdSeconds = record.ackDeadlineSeconds;
    const held = await this.settlement.holdDeliveries(record, deliveries, holdSeconds);
    if (held.failures.size > 0) throw exactlyOnceAckFailure(held.failures);
    this.announce(record, held, holdSeconds);

    const messageIds: string[][] = [];
    for (const { topic, checked } of publishes) {
      messageIds.push((await this.publisher.publishChecked(topic, checked)).messageIds);
    }

    const acked = await this.settlement.acknowledgeStrictly(record, deliveries);
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
