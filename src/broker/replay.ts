import { randomUUID } from 'node:crypto';
import { failedPrecondition, invalidArgument, notFound, unavailable } from '../errors.ts';
import { SEQS_PER_BLOCK, type SnapshotKeys } from '../redis/keys.ts';
import { expireLog, seek, settleLog } from '../redis/calls/retention.ts';
import { longCallConnection } from '../redis/client.ts';
import { Scripts } from '../redis/scripts.ts';
import type { Authorizer } from './authorization.ts';
import type { CallContext } from './call-context.ts';
import { nowUs as clockNowUs } from './clock.ts';
import { parseTimestampUs } from './durations.ts';
import { parseFilter } from './filter.ts';
import { unpackMessage } from './message-codec.ts';
import { parseResourceName, type ResourceName } from './names.ts';
import type { SnapshotRecord, SubscriptionRecord, TopicRecord } from './records.ts';
import type { Region, Regions } from './regions.ts';
import type { SnapshotService } from './snapshots.ts';
import type { SubscriptionService } from './subscriptions.ts';
import { topicRetentionUs } from './topic-fields.ts';
import type { TopicService } from './topics.ts';

/** A SeekRequest: exactly one of `time` (RFC 3339) and `snapshot` (a snapshot's full name). */
export interface SeekRequest {
  time?: string;
  snapshot?: string;
}

/** How long a seek's script may run (about 10 µs per message it changes, SCHEMA.md). */
const SEEK_TIMEOUT_MS = 300_000;
/** How long earlier selections outlive a seek whose script never ran. */
const EARLIER_SELECTIONS_TTL_MS = 600_000;
/** How many blocks of a log one expire-log call releases (each up to 1000 bodies). */
const EXPIRE_BATCH = 20;
/** The janitor's pass reads this many due entries of `log-expiries` at a time. */
const LOOK_BATCH = 100;

/**
 * Replay: Seek, and the retained log that it replays from. While a topic retains (its own
 * messageRetentionDuration, or a subscription's retainAckedMessages), publish keeps every
 * message's body for that long in the topic's log (publish.lua); seek.lua sets a
 * subscription's acknowledgement state from it; expire-log.lua, run by the janitor, lets go of
 * what is older than the retention.
 */
export class ReplayService {
  constructor(
    private readonly regions: Regions,
    private readonly topics: TopicService,
    private readonly subscriptions: SubscriptionService,
    private readonly snapshots: SnapshotService,
    private readonly authorizer: Authorizer,
  ) {}

  /**
   * Seeks a subscription in every region (its messages may be stored in any of them): to a time
   * (what was published at or after it is unacknowledged, the rest acknowledged), or to a
   * snapshot of its topic (what the snapshot holds, and everything published after it, is
   * unacknowledged).
   */
  async seek(caller: CallContext, name: ResourceName, request: SeekRequest): Promise<void> {
    const hasTime = request.time !== undefined && request.time !== '';
    const hasSnapshot = request.snapshot !== undefined && request.snapshot !== '';
    if (hasTime === hasSnapshot) {
      throw invalidArgument('A seek needs exactly one of "time" and "snapshot".');
    }
    const targetUs = hasTime ? parseTimestampUs(request.time as string, 'time') : undefined;
    const snapshotName = hasSnapshot ? parseResourceName('snapshots', request.snapshot as string) : undefined;
    // Pub/Sub's rule: consuming the subscription, and (to a snapshot) seeking with the snapshot.
    await this.authorizer.require(caller, 'pubsub.subscriptions.consume', name.full);
    if (snapshotName) await this.authorizer.require(caller, 'pubsub.snapshots.seek', snapshotName.full);
    const record = await this.subscriptions.readForDelivery(name);
    const snapshot = snapshotName && (await this.snapshotFor(record, snapshotName));
    const topic = await this.liveTopic(record);
    const unusable = this.regions.all.find((region) => !region.usable);
    if (unusable) throw unavailable(`The message store of region ${unusable.name} cannot be reached; retry the seek.`);
    const targets = this.regions.all.map((region) => {
      const data = region.ctx.keys.topicData(record.topicUid);
      return snapshot ? { snapshot: data.snapshot(snapshot.uid) } : { timeUs: targetUs as number };
    });
    if (snapshot && this.regions.multiRegion) {
      // Checked in every region first, so that a snapshot missing in one is refused before any
      // region seeks (with one region, the script's own check is that).
      for (const [i, region] of this.regions.all.entries()) {
        const { snapshot: keys } = targets[i] as { snapshot: SnapshotKeys };
        if (!(await region.ctx.redis.exists(keys.info))) throw notFound(snapshotName!.id);
      }
    }
    for (const [i, region] of this.regions.all.entries()) {
      if ((await this.seekIn(region, record, topic, targets[i])) === 'no-snapshot') throw notFound(snapshotName!.id);
    }
  }

  /** The snapshot a subscription may seek to: one of its own topic incarnation, and taken with its filter. */
  private async snapshotFor(record: SubscriptionRecord, snapshotName: ResourceName): Promise<SnapshotRecord> {
    const snapshot = await this.snapshots.read(snapshotName);
    if (snapshot.topicUid !== record.topicUid) {
      throw failedPrecondition(
        `The snapshot ${snapshot.name} is of another topic than the subscription ${record.name}: a subscription seeks only to snapshots of its own topic.`,
      );
    }
    // Which of the snapshot's messages a filter takes is known only for the filter it was made with.
    if (record.filter !== undefined && record.filter !== snapshot.filter) {
      throw failedPrecondition(
        `The subscription ${record.name} has a filter that the snapshot ${snapshot.name} was not made with: a filtered subscription seeks only to snapshots of subscriptions with the same filter.`,
      );
    }
    return snapshot;
  }

  private async seekIn(
    region: Region,
    record: SubscriptionRecord,
    topic: TopicRecord | undefined,
    target: { timeUs: number } | { snapshot: SnapshotKeys },
  ) {
    const { ctx } = region;
    const data = ctx.keys.topicData(record.topicUid);
    const topicRetention = topic && topicRetentionUs(topic);
    const earlierSelections = data.earlierSelections(randomUUID());
    // A filtered subscription reaches messages published before it was created through the
    // topic's retention, or a snapshot's cut: which of them its filter takes is decided here.
    if (record.filter !== undefined && ('snapshot' in target || topicRetention)) {
      await this.writeEarlierSelections(region, record, target, earlierSelections);
    }
    // One script, which over a large backlog runs for seconds (its cost grows with the messages
    // it changes: SCHEMA.md, Replay): on a connection of its own that waits for it.
    const connection = longCallConnection(ctx.redis, SEEK_TIMEOUT_MS);
    try {
      return await seek(new Scripts(connection), data, record.uid, {
        time: ctx.clock.scriptTime(),
        target,
        topicRetentionUs: topicRetention,
        filtered: record.filter !== undefined,
        earlierSelections,
        wakeChannel: ctx.keys.wakeChannel(record.topicUid),
      });
    } finally {
      connection.disconnect();
    }
  }

  /**
   * Writes the flags of the log's messages the seek may reach that were published before the
   * subscription was created: '1' where its filter takes the message. Those blocks no publish
   * changes any more (seqs only grow), so flags written before the script stay true for it; a
   * block the script reaches without flags gives it nothing from before its creation.
   */
  private async writeEarlierSelections(
    region: Region,
    record: SubscriptionRecord,
    target: { timeUs: number } | { snapshot: SnapshotKeys },
    key: string,
  ): Promise<void> {
    const { redis, keys } = region.ctx;
    const data = keys.topicData(record.topicUid);
    const filter = parseFilter(record.filter as string);
    const startSeq = Number((await redis.hget(data.subscription(record.uid).config, 'startSeq')) ?? 0);
    let blocks: string[];
    if ('snapshot' in target) {
      const cut = Number((await redis.hget(target.snapshot.info, 'cut')) ?? Number.POSITIVE_INFINITY);
      blocks = (await redis.zrange(data.log, 0, -1)).filter((block) => (Number(block) + 1) * SEQS_PER_BLOCK > cut);
    } else {
      blocks = await redis.zrangebyscore(data.log, target.timeUs, '+inf');
    }
    for (const block of blocks.filter((block) => Number(block) * SEQS_PER_BLOCK < startSeq)) {
      const bodies = await redis.hgetallBuffer(data.bodyBlock(block));
      const flags = Buffer.alloc(SEQS_PER_BLOCK, '0');
      for (const [field, body] of Object.entries(bodies)) {
        const position = Number(field);
        const before = Number(block) * SEQS_PER_BLOCK + position < startSeq;
        if (before && (!filter || filter.matches(unpackMessage(body).attributes))) flags[position] = 0x31;
      }
      await redis.hset(key, block, flags.toString('latin1'));
    }
    await redis.pexpire(key, EARLIER_SELECTIONS_TTL_MS);
  }

  /** The subscription's topic, unless it was deleted (a new topic of the name is another incarnation). */
  private async liveTopic(record: SubscriptionRecord): Promise<TopicRecord | undefined> {
    const topic = await this.topics.find(record.topic);
    return topic?.uid === record.topicUid ? topic : undefined;
  }

  /**
   * One pass over the logs that are due for a look, in every usable region: what is older than
   * the retention is let go, in bounded batches. Each region's `log-expiries` says when to look
   * at which topic incarnation's log: at its earliest due block, at the retention last judged,
   * and at once after a change of what retains it (a record put, a retainer let go: mark_log in
   * prelude.lua). A pass with nothing due is one read of that index per region, however many
   * topics, subscriptions and snapshots retain; an incarnation whose log is empty and that
   * nothing retains any more leaves the index.
   */
  async expireLogs(): Promise<void> {
    for (const region of this.regions.all) {
      if (!region.usable) continue;
      const { redis, keys, scripts, clock } = region.ctx;
      // The region's own clock: the one its scripts enter the entries by.
      const nowUs = await clockNowUs(clock, redis);
      const judged = new Set<string>();
      for (;;) {
        const entries = await redis.zrangebyscore(
          keys.logExpiries,
          '-inf',
          nowUs,
          'WITHSCORES',
          'LIMIT',
          0,
          LOOK_BATCH,
        );
        const due: [string, number][] = [];
        for (let i = 0; i < entries.length; i += 2) {
          if (!judged.has(entries[i])) due.push([entries[i], Number(entries[i + 1])]);
        }
        // Every entry looked at in this pass was moved past now or removed, unless a change marked it again.
        if (due.length === 0) break;
        for (const [topicUid, judgedUs] of due) {
          judged.add(topicUid);
          const topicRetention = await redis.hget(keys.logRetention, `${topicUid}:topic`);
          const { retains, nextUs } = await this.expireLogOf(
            region,
            topicUid,
            topicRetention === null ? undefined : Number(topicRetention),
          );
          await settleLog(scripts, keys, { topicUid, judgedUs, nextUs, retains });
        }
      }
    }
  }

  /**
   * Lets go of a topic incarnation's log as far as its retention allows (all of it when nothing
   * retains any more: a deleted topic's, say). Returns whether anything still retains, and the
   * earliest a block of it may be due at this retention.
   */
  private async expireLogOf(
    region: Region,
    topicUid: string,
    topicRetention: number | undefined,
  ): Promise<{ retains: boolean; nextUs: number }> {
    const { ctx } = region;
    const data = ctx.keys.topicData(topicUid);
    const subscriptionUids = await ctx.redis.hkeys(data.attached);
    for (;;) {
      const { more, retains, nextUs } = await expireLog(ctx.scripts, data, {
        time: ctx.clock.scriptTime(),
        topicRetentionUs: topicRetention,
        subscriptionUids,
        batch: EXPIRE_BATCH,
      });
      if (!more) return { retains, nextUs };
    }
  }
}
