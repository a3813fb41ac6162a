import { indexHolds } from './calls/backlog.ts';
import { SEQS_PER_BLOCK, type Keys } from './keys.ts';
import { scanKeys } from './nodes.ts';
import type { RedisClient } from './client.ts';
import type { Scripts } from './scripts.ts';
import { type TopicSettings, topicRetentionUs } from '../broker/topic-fields.ts';

/**
 * The layout of the data plane in Redis (SCHEMA.md), recorded in the store itself. A broker must
 * not serve a store laid out by another version: it would misread it, and a message whose body it
 * cannot find is dropped as gone. Format 9 keeps the state `q<seq>` of an ordering key while
 * its only message is leased, and marks that lease `s` in the key's keyed deliveries, so that
 * the acknowledge leaves the key idle without reading its state: a broker of format 8 would read
 * such a key as queued and leave a message published to it behind the lease undelivered. Format 8
 * indexes when the janitor next looks at each retained log (`log-expiries`) and counts what
 * makes each topic incarnation retain (`log-retention`),
 * both kept by the record puts, where format 7 listed the incarnations in `retaining-topics` and
 * its janitor read every record at each pass, and the count of every control-plane put
 * (`control-changes`), by which the periodic sync tells that nothing changed: a broker of format 7
 * would not keep them. Format 8 also adds two states of an ordering key (`key-states`):
 * `q<seq>`, a queued key whose only message is seq, and `-<n>`, a busy key whose n outstanding
 * messages are all it has; a broker of format 7 would leave them as they are when it publishes
 * to such a key, so that its new messages would never be delivered, and would read `-<n>` as
 * fewer than none outstanding. Format 7 adds the expiry indexes of subscriptions and
 * snapshots and the count of their puts (`owner-changes`), which a broker of format 6 would not
 * keep up to date: its puts would leave records out of the expiration pass and out of other
 * brokers' copies of the records. Format 6 adds each subscription's holds (the flags of the
 * messages it holds, for the oldest un-acked one), which a broker of format 5 would not keep up
 * to date. Format 5 adds messages scheduled for later: run entries
 * ("<first>-<last>") in a subscription's `delayed` set, which a broker of format 4 would misread
 * as one seq. Format 4 adds the retained log: a body of a logged block holds
 * one more reference, the log's, which a broker of format 3 would not give it when it publishes
 * into such a block (SCHEMA.md, `log`); format 3 adds to format 2 what retry and dead-letter policies
 * need (a subscription's `delayed` and `forwarding` sets, uncounted deliveries, backoff ends and
 * forwards in its keyed deliveries, a topic's `forwarded` marks);
 * format 2 keeps bodies in blocks of 1000 seqs (`b:<block>`, SCHEMA.md); before it (format 1,
 * never recorded) a topic incarnation kept every body in one `messages` hash, and its last seq in
 * `state.seq`.
 */
export const STORAGE_FORMAT = '9';
/**
 * Formats this broker reads as they are once every subscription's holds (before 6), the expiry
 * indexes (before 7) and the index of the retained logs (before 8) are written: claiming such a
 * store writes them, then records format 9 over it. The key states of format 7 (`q`, and counts
 * that may have messages behind them) and of format 8 (also `q<seq>` for a queued key and minus
 * a count), and format 8's keyed deliveries, are states format 9 has too, and are kept as they
 * are.
 */
const WITHOUT_HOLDS = new Set(['2', '3', '4', '5']);
const WITHOUT_EXPIRIES = new Set([...WITHOUT_HOLDS, '6']);
const WITHOUT_LOG_INDEX = new Set([...WITHOUT_EXPIRIES, '7']);
const SUPERSEDED_FORMATS = new Set([...WITHOUT_LOG_INDEX, '8']);

/**
 * Claims an unrecorded store for this format, or says why this broker must not serve the store:
 * undefined when it may. A store of format 2 to 8 holds nothing format 9 reads otherwise, but
 * before format 8 lacks the index of the retained logs, before format 7 the expiry indexes, and
 * before format 6 the holds: the holds are written for every subscription (index-holds.lua, one
 * script each), every subscription and snapshot is indexed as due at once (the next expiration
 * pass judges each one and moves it to when it may expire), every retaining topic incarnation is
 * counted and its log indexed as due at once (indexRetainedLogs), again from the start if the
 * broker stops before it records the format; then the store is claimed (and brokers of those
 * formats refuse it from then on). A store with no recorded format is new, or was written by
 * format 1:
 *   - with no topic or subscription records it holds nothing to deliver, and is claimed;
 *   - with format-1 bodies (`messages` hashes) it is refused: they must be delivered by the
 *     version that wrote them;
 *   - otherwise (records, but every backlog drained) it is claimed, and each topic incarnation's
 *     next publish goes on after the seqs format 1 handed out (its `state.seq`): message IDs and
 *     ack IDs are never used twice.
 * Brokers of the older version must be stopped first: one that stores messages after the claim
 * would have them misread.
 */
export async function claimStorageFormat(
  redis: RedisClient,
  keys: Keys,
  scripts: Scripts,
): Promise<string | undefined> {
  const recorded = await redis.get(keys.storageFormat);
  if (recorded === STORAGE_FORMAT) return undefined;
  if (recorded !== null && SUPERSEDED_FORMATS.has(recorded)) {
    if (WITHOUT_HOLDS.has(recorded)) {
      for (const json of await redis.hvals(keys.subscriptions)) {
        const record = JSON.parse(json) as { topicUid: string; uid: string };
        await indexHolds(scripts, keys.topicData(record.topicUid).subscription(record.uid));
      }
    }
    if (WITHOUT_EXPIRIES.has(recorded)) {
      await indexAllAsDue(redis, keys.subscriptions, keys.subscriptionExpiries);
      await indexAllAsDue(redis, keys.snapshots, keys.snapshotExpiries);
    }
    if (WITHOUT_LOG_INDEX.has(recorded)) await indexRetainedLogs(redis, keys);
    return recordFormat(redis, keys, 'XX');
  }
  if (recorded !== null) {
    return `This Redis holds broker data in storage format ${recorded} (key ${keys.storageFormat}); this broker reads format ${STORAGE_FORMAT}. Run the broker version that wrote it.`;
  }
  const [topics, subscriptions] = await Promise.all([redis.hlen(keys.topics), redis.hlen(keys.subscriptions)]);
  if (topics > 0 || subscriptions > 0) {
    const older = await scanKeys(redis, keys.everyTopicData('messages'), { first: true });
    if (older.length > 0) {
      return (
        `This Redis holds messages stored by an earlier version of the broker (${older[0]}), in a layout this version cannot read. ` +
        'Deliver them with that version first (until every subscription backlog is empty, then delete the keys ending in ":messages"), ' +
        'or start this version on an empty store (another DATA_DIR, Redis or KEY_PREFIX).'
      );
    }
    for (const state of await scanKeys(redis, keys.everyTopicData('state'))) {
      const [seq, block] = await redis.hmget(state, 'seq', 'block');
      // Format 2 numbers seqs in blocks of SEQS_PER_BLOCK: the next publish takes the block after this one.
      if (seq !== null && block === null)
        await redis.hsetnx(state, 'block', String(Math.floor(Number(seq) / SEQS_PER_BLOCK)));
    }
  }
  return recordFormat(redis, keys, 'NX');
}

/** Enters every record of `records` in the expiry index `expiries` as due now (score 0). */
async function indexAllAsDue(redis: RedisClient, records: string, expiries: string): Promise<void> {
  const names = await redis.hkeys(records);
  for (let at = 0; at < names.length; at += INDEX_BATCH) {
    await redis.zadd(expiries, ...names.slice(at, at + INDEX_BATCH).flatMap((name) => [0, name]));
  }
}

/**
 * Counts what makes each topic incarnation retain in `log-retention` (with its topic's retention),
 * and enters those incarnations and every one of format 7's `retaining-topics` in `log-expiries`
 * as due now (the next pass looks at each log and moves it on); format 7's list goes. Computed
 * afresh from the records and written in one transaction, which fails (and the claim is tried
 * again) if a record changed meanwhile: a claim begun again writes the same.
 */
async function indexRetainedLogs(redis: RedisClient, keys: Keys): Promise<void> {
  await redis.watch(keys.topics, keys.subscriptions, keys.snapshots);
  try {
    await writeRetainedLogs(redis, keys);
  } catch (error) {
    await redis.unwatch();
    throw error;
  }
}

async function writeRetainedLogs(redis: RedisClient, keys: Keys): Promise<void> {
  const retention = new Map<string, number>();
  const count = (topicUid: string) => retention.set(topicUid, (retention.get(topicUid) ?? 0) + 1);
  for (const json of await redis.hvals(keys.topics)) {
    const topic = JSON.parse(json) as TopicSettings & { uid: string };
    const retentionUs = topicRetentionUs(topic);
    if (retentionUs === undefined) continue;
    count(topic.uid);
    retention.set(`${topic.uid}:topic`, retentionUs);
  }
  for (const json of await redis.hvals(keys.subscriptions)) {
    const record = JSON.parse(json) as { topicUid: string; retainAckedMessages?: boolean; detached?: boolean };
    if (record.retainAckedMessages && !record.detached) count(record.topicUid);
  }
  for (const json of await redis.hvals(keys.snapshots)) count((JSON.parse(json) as { topicUid: string }).topicUid);
  const counted = [...retention.keys()].filter((field) => !field.endsWith(':topic'));
  const due = new Set([...counted, ...(await redis.smembers(keys.format7RetainingTopics))]);
  const transaction = redis.multi().del(keys.logRetention, keys.format7RetainingTopics);
  if (retention.size > 0) transaction.hset(keys.logRetention, Object.fromEntries(retention));
  if (due.size > 0) transaction.zadd(keys.logExpiries, ...[...due].flatMap((topicUid) => [0, topicUid]));
  if ((await transaction.exec()) === null) throw new Error('records changed while the retained logs were indexed');
}

/** Names entered in an expiry index per ZADD while a store is claimed. */
const INDEX_BATCH = 1000;

/** Records this format (NX: in an unrecorded store; XX: over an older one) and checks that it holds. */
async function recordFormat(redis: RedisClient, keys: Keys, mode: 'NX' | 'XX'): Promise<string | undefined> {
  // ioredis types SET's condition as a literal, not as a union of them.
  await (mode === 'NX'
    ? redis.set(keys.storageFormat, STORAGE_FORMAT, 'NX')
    : redis.set(keys.storageFormat, STORAGE_FORMAT, 'XX'));
  const claimed = await redis.get(keys.storageFormat);
  // Gone again (a failover lost the write): an error, so the check is tried again.
  if (claimed === null) throw new Error(`${keys.storageFormat} could not be recorded`);
  return claimed === STORAGE_FORMAT
    ? undefined
    : `Another broker recorded storage format ${claimed} at the same time; this broker reads format ${STORAGE_FORMAT}.`;
}
