import { TOPIC_REMEMBERED_MS, RememberedRecords } from './remembered-records.ts';
import { cancelForwarding, type Forward, finishForwarding } from '../redis/calls/delivery.ts';
import { GEN_EPOCH } from '../redis/calls/codes.ts';
import { formatTimestampUs } from './durations.ts';
import { unpackMessage } from './message-codec.ts';
import { parseResourceName, type ResourceName } from './names.ts';
import type { Publisher } from './publish.ts';
import type { BrokerMetrics } from './metrics.ts';
import type { PubsubMessage } from './publish-request.ts';
import type { SubscriptionRecord, TopicRecord } from './records.ts';
import type { Region, Regions } from './regions.ts';
import { deadLetterRegion } from './storage-region.ts';
import type { TopicService } from './topics.ts';

/** How long this node goes by what it last read of a dead-letter topic (that it exists, or not). */

/**
 * Forwarding to dead-letter topics (README.md, "Dead-letter topics"). A message whose delivery
 * failed maxDeliveryAttempts times is forwarded instead of being delivered again. The source
 * subscription and the dead-letter topic are different topic incarnations, under different hash
 * tags (on Redis Cluster, maybe on different shards), so no one script can move the message;
 * each of the three steps is one script, made so that repeating it does no harm:
 *   1. pull.lua (source) hands the message over: it leaves delivery for the subscription's
 *      forwarding set, claimed by this forwarder for 30 s (FORWARD_CLAIM_US in pull.lua);
 *   2. publish.lua (dead-letter topic) stores it there under its forward ID (subscription uid,
 *      region, seq), which it records: storing the same ID again stores nothing;
 *   3. finish-forwarding.lua (source) takes it out of the forwarding set, as an ack would.
 * A forwarder that stops between two steps leaves the message in the forwarding set; once its
 * claim has run out, the next pull of the subscription (any transport, any node) hands it over
 * again, and its forwarder goes through steps 2 and 3: a message is neither lost nor stored
 * twice. When the subscription has no dead-letter policy any more, or its topic does not exist
 * (deleted meanwhile), cancel-forwarding.lua gives the message back to delivery instead, and
 * pulls deliver such messages until the topic exists again.
 */
export class DeadLetters {
  /** Dead-letter topics read in the last TOPIC_REMEMBERED_MS, and those found missing. */
  private readonly topicsSeen = new RememberedRecords<TopicRecord>(true, TOPIC_REMEMBERED_MS);

  constructor(
    private readonly regions: Regions,
    private readonly topics: TopicService,
    private readonly publisher: Publisher,
    private readonly metrics: BrokerMetrics,
  ) {}

  /** Whether a pull may hand over the subscription's messages to forward: its dead-letter topic exists. */
  async mayForward(record: SubscriptionRecord): Promise<boolean> {
    return (await this.deadLetterTopic(record)) !== undefined;
  }

  /**
   * Steps 2 and 3 for what one pull handed over in `region` (`bodies` in the same order, null
   * where gone). A step that fails is left to the next pull, once the claim has run out.
   */
  async forward(
    region: Region,
    record: SubscriptionRecord,
    forwards: Forward[],
    bodies: (Buffer | null)[],
    oldestKeptUs: number,
  ): Promise<void> {
    const { ctx } = region;
    const data = ctx.keys.topicData(record.topicUid);
    const sub = data.subscription(record.uid);
    const wakeChannel = ctx.keys.wakeChannel(record.topicUid);
    const topic = await this.deadLetterTopic(record);
    // One pull's forwards share its claim.
    const { claimUs } = forwards[0];
    if (!topic) {
      await cancelForwarding(ctx.scripts, sub, { wakeChannel, claimUs, members: forwards.map(member) });
      return;
    }
    const target = deadLetterRegion(this.regions, topic, region);
    const source = parseResourceName('subscriptions', record.name);
    const outcomes = await Promise.allSettled(
      forwards.map(async (forward, i): Promise<'done' | 'cancelled'> => {
        const stored = bodies[i] && unpackMessage(bodies[i]);
        // Gone (its subscription was deleted meanwhile) or past the retention: dropped, as a
        // pull drops what it finds too old.
        if (!stored || stored.publishTimeUs < oldestKeptUs) return 'done';
        const message: PubsubMessage = {
          data: stored.data,
          attributes: { ...stored.attributes, ...sourceAttributes(source, forward, stored.publishTimeUs) },
          orderingKey: stored.orderingKey,
        };
        // A seek may bring a forwarded message back (in a later generation epoch): forwarded
        // again, it is stored again.
        const epoch = Math.floor(forward.generation / GEN_EPOCH);
        const forwardId = `${record.uid}/${region.name}/${forward.seq}${epoch > 0 ? `/${epoch}` : ''}`;
        if (await this.publisher.forward(topic, target, message, forwardId)) return 'done';
        this.topicsSeen.forget(topic.name);
        return 'cancelled';
      }),
    );
    // A forward that failed stays claimed, for the next pull once the claim has run out.
    const members = (outcome: 'done' | 'cancelled') =>
      forwards.filter((_, i) => outcomes[i].status === 'fulfilled' && outcomes[i].value === outcome).map(member);
    const done = members('done');
    const cancelled = members('cancelled');
    if (done.length > 0) {
      await finishForwarding(ctx.scripts, data, sub, { wakeChannel, members: done });
      this.metrics.forwardedToDeadLetters(record, done.length);
    }
    if (cancelled.length > 0) await cancelForwarding(ctx.scripts, sub, { wakeChannel, claimUs, members: cancelled });
  }

  /** The subscription's dead-letter topic, undefined when it has none or it does not exist. */
  private async deadLetterTopic(record: SubscriptionRecord): Promise<TopicRecord | undefined> {
    const name = record.deadLetterPolicy?.deadLetterTopic;
    if (!name) return undefined;
    return this.topicsSeen.lookup(name, (fullName) => this.topics.find(fullName));
  }
}

const member = (forward: Forward) => `${forward.seq}:${forward.generation}`;

/** The attributes Pub/Sub adds to a dead-lettered message. */
function sourceAttributes({ project, id }: ResourceName, forward: Forward, publishTimeUs: number) {
  return {
    CloudPubSubDeadLetterSourceDeliveryCount: String(forward.deliveryAttempts),
    CloudPubSubDeadLetterSourceSubscription: id,
    CloudPubSubDeadLetterSourceSubscriptionProject: project,
    CloudPubSubDeadLetterSourceTopicPublishTime: formatTimestampUs(publishTimeUs),
  };
}
