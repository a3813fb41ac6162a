/**
 * The only place where Redis key strings are made. SCHEMA.md beside this file
 * documents every key: its type, members, scores, and which scripts write it.
 *
 * Two kinds of hash tag keep every script on one Redis Cluster slot:
 *   {meta}     the control plane: topic and subscription records and their indexes;
 *   {t<uid>}   one topic incarnation: its message bodies and all of its subscriptions'
 *              delivery state, so that publish-with-fan-out is one atomic script.
 * A topic deleted and created again gets a new uid, so the old incarnation's
 * subscriptions keep their messages and the new topic shares nothing with them.
 */
export class Keys {
  constructor(readonly prefix: string) {}

  // ---- control plane ({meta}) ----
  private meta(name: string): string {
    return `${this.prefix}:{meta}:${name}`;
  }
  get ackSecret(): string {
    return this.meta('ack-secret');
  }
  /** The layout of the data plane this store holds (storage-format.ts). */
  get storageFormat(): string {
    return this.meta('storage-format');
  }
  /** A SCAN pattern for one data key of every topic incarnation, e.g. `messages`. */
  everyTopicData(name: string): string {
    return `${this.prefix.replace(/[*?[\]\\]/g, '\\$&')}:{t*}:${name}`;
  }
  get topics(): string {
    return this.meta('topics');
  }
  get topicIndex(): string {
    return this.meta('topic-index');
  }
  /** Deleted topic names -> tombstone JSON (its version), so that a delete wins over older copies. */
  get topicTombstones(): string {
    return this.meta('topic-tombstones');
  }
  get subscriptions(): string {
    return this.meta('subscriptions');
  }
  get subscriptionIndex(): string {
    return this.meta('subscription-index');
  }
  get subscriptionTombstones(): string {
    return this.meta('subscription-tombstones');
  }
  /** How many times a subscription or snapshot state was put: unchanged, so are the records. */
  get ownerChanges(): string {
    return this.meta('owner-changes');
  }
  /**
   * How many control-plane states (of every kind) were put in this store: the periodic sync
   * compares the regions' records only when some region's count moved (control-plane.ts).
   */
  get controlChanges(): string {
    return this.meta('control-changes');
  }
  /** A random id of this store, made by the sync when absent: a store that lost its data has none, or another. */
  get storeId(): string {
    return this.meta('store-id');
  }
  /** Subscriptions that may expire -> the earliest time each may (µs): the expiration pass reads the due ones. */
  get subscriptionExpiries(): string {
    return this.meta('subscription-expiries');
  }
  /** Snapshots -> the earliest time each may expire (µs). */
  get snapshotExpiries(): string {
    return this.meta('snapshot-expiries');
  }
  /** Subscription data waiting to be dropped: after a delete, or an attach not yet recorded. */
  get pendingCleanups(): string {
    return this.meta('pending-cleanups');
  }
  /**
   * Topic incarnations whose log may hold messages or that retain -> when the janitor next looks
   * at the log (ZSET uid -> µs): a pass reads only the due ones (src/broker/replay.ts).
   */
  get logExpiries(): string {
    return this.meta('log-expiries');
  }
  /**
   * What makes each topic incarnation retain (HASH): `<uid>` -> how many live records do (its
   * topic's with a messageRetentionDuration, its subscriptions that retain acked messages, its
   * snapshots), `<uid>:topic` -> its topic's messageRetentionDuration (µs).
   */
  get logRetention(): string {
    return this.meta('log-retention');
  }
  /** Storage format 7's list of the incarnations whose logs the janitor expired (SET of uids): a claim replaces it. */
  get format7RetainingTopics(): string {
    return this.meta('retaining-topics');
  }
  topicSubscriptions(topicUid: string): string {
    return this.meta(`topic-subscriptions:${topicUid}`);
  }
  get snapshots(): string {
    return this.meta('snapshots');
  }
  get snapshotIndex(): string {
    return this.meta('snapshot-index');
  }
  get snapshotTombstones(): string {
    return this.meta('snapshot-tombstones');
  }
  /** Project IAM policies: `projects/<id>` -> JSON {name, version, bindings, etag} (authorization.ts). */
  get projectPolicies(): string {
    return this.meta('project-policies');
  }
  /** The names of the snapshots of one topic incarnation (ListTopicSnapshots). */
  topicSnapshots(topicUid: string): string {
    return this.meta(`topic-snapshots:${topicUid}`);
  }

  // ---- data plane ({t<uid>}) ----
  topicData(topicUid: string): TopicKeys {
    return new TopicKeys(`${this.prefix}:{t${topicUid}}`);
  }

  /** Pub/Sub channel told of every change of a subscription record (push delivery re-reads the push subscriptions). */
  get subscriptionsChannel(): string {
    return `${this.prefix}:wake:subscriptions`;
  }

  /** Pub/Sub channel that wakes long-polling pulls of a topic's subscriptions. */
  wakeChannel(topicUid: string): string {
    return `${this.prefix}:wake:t${topicUid}`;
  }
}

/**
 * Sequence numbers come in blocks: block b holds seqs b*1000 .. b*1000 + 999, and their bodies
 * are the hash `<bodies>b`, field the seq's last three digits (`000` … `999`). So a seq's decimal
 * digits name its body: the block is all but the last three (blocks start at 1: every seq has
 * four digits or more). A publish carries at most 1000 messages: a large one takes a block of its
 * own, so its bodies are one hash that the publish script takes over whole (RENAME) without
 * reading them; small ones share the latest block (see publish.lua). body_location in
 * prelude.lua reads seqs the same way.
 */
export const BLOCK_FIELD_DIGITS = 3;
export const SEQS_PER_BLOCK = 10 ** BLOCK_FIELD_DIGITS;

export class TopicKeys {
  constructor(private readonly base: string) {}

  get state(): string {
    return `${this.base}:state`;
  }
  get attached(): string {
    return `${this.base}:attached`;
  }
  /** The prefix of the body block keys (HASH field -> body): block b is `<bodies>b`. */
  get bodies(): string {
    return `${this.base}:b:`;
  }
  /** The hash of the bodies of block `block` (a decimal string or number). */
  bodyBlock(block: number | string): string {
    return `${this.bodies}${block}`;
  }
  /** Where a large publish stages its bodies (HASH field -> body) for the publish script to take over. */
  staging(id: string): string {
    return `${this.base}:staging:${id}`;
  }
  get refs(): string {
    return `${this.base}:refs`;
  }
  /** Forward IDs of the messages dead-lettered into this topic (ZSET ID -> when stored, µs). */
  get forwarded(): string {
    return `${this.base}:forwarded`;
  }
  /**
   * Idempotency keys of messages published within the topic's deduplication window (HASH key ->
   * the seq stored under it); idempotencyTimes says when each was stored.
   */
  get idempotencyKeys(): string {
    return `${this.base}:idempotency-keys`;
  }
  /** When each remembered idempotency key was stored (ZSET key -> µs): the oldest are forgotten first. */
  get idempotencyTimes(): string {
    return `${this.base}:idempotency-times`;
  }
  /**
   * Messages published for a later delivery time (ZSET seq -> delivery time, µs), while that time
   * is ahead: a seek that makes one unacknowledged before its time leaves it waiting (seek.lua).
   */
  get scheduled(): string {
    return `${this.base}:scheduled`;
  }
  /**
   * The retained log: body blocks whose every message holds one reference for retention (ZSET
   * block -> the latest publish time in it, µs).
   */
  get log(): string {
    return `${this.base}:log`;
  }
  /** The log's blocks -> the earliest publish time in each (ZSET, µs): what a seek may skip reading. */
  get logStart(): string {
    return `${this.base}:log-start`;
  }
  /**
   * Who makes the topic retain acknowledged messages (HASH subscription uid, or
   * `snapshot:<uid>` for a snapshot -> retention, µs).
   */
  get retainers(): string {
    return `${this.base}:retainers`;
  }
  /**
   * One seek's flags of the log's messages published before its filtered subscription was
   * created (HASH block -> 1000 flags): written by the broker, read and deleted by seek.lua.
   */
  earlierSelections(id: string): string {
    return `${this.base}:earlier-selections:${id}`;
  }
  snapshot(snapshotUid: string): SnapshotKeys {
    const base = `${this.base}:snap:${snapshotUid}`;
    return { held: `${base}:held`, info: `${base}:info`, retainer: `snapshot:${snapshotUid}` };
  }
  /** What every key of one subscription starts with: its keys are this prefix and a name (SUBSCRIPTION_KEY_NAMES). */
  subscriptionPrefix(subscriptionUid: string): string {
    return `${this.base}:s:${subscriptionUid}:`;
  }
  subscription(subscriptionUid: string): SubscriptionKeys {
    const prefix = this.subscriptionPrefix(subscriptionUid);
    return {
      config: `${prefix}config`,
      ready: `${prefix}ready`,
      leased: `${prefix}leased`,
      delayed: `${prefix}delayed`,
      forwarding: `${prefix}forwarding`,
      keyed: `${prefix}keyed`,
      keyedDeliveries: `${prefix}keyed-deliveries`,
      keyStates: `${prefix}key-states`,
      selections: `${prefix}selections`,
      holds: `${prefix}holds`,
      holdBlocks: `${prefix}hold-blocks`,
    };
  }
}

/**
 * The keys count-backlog.lua reads of each subscription, in its order, as names after the
 * subscription's prefix: it is passed each subscription's prefix and these names, and builds the
 * keys itself (read off one subscription's keys, so that the names are written only above).
 */
export const COUNTED_KEY_NAMES: readonly string[] = (() => {
  const data = new TopicKeys('');
  const prefix = data.subscriptionPrefix('');
  const sub = data.subscription('');
  return [...holdingKeys(sub), sub.keyStates, sub.holds, sub.holdBlocks].map((key) => key.slice(prefix.length));
})();

/**
 * The keys of every structure that holds a subscription's messages (SCHEMA.md, invariant 1),
 * after its config, in the order the scripts that read them all take them as their first KEYS
 * (seek, read-backlog, count-backlog, index-holds).
 */
export function holdingKeys(sub: SubscriptionKeys): string[] {
  return [sub.config, sub.ready, sub.leased, sub.delayed, sub.forwarding, sub.keyed];
}

/** One snapshot's data in one region (create-snapshot.lua). */
export interface SnapshotKeys {
  /** The messages it holds: block -> 1000 characters, '1' at each seq it holds. */
  held: string;
  /** `cut` (the first seq published after it), `held` (how many it holds), `oldest` (µs, or ''). */
  info: string;
  /** Its field in the topic's retainers (not a key). */
  retainer: string;
}

export interface SubscriptionKeys {
  config: string;
  ready: string;
  leased: string;
  /**
   * Work waiting out a retry backoff, and messages published for a later delivery time: ready-list
   * entries -> when they become available (µs).
   */
  delayed: string;
  /** Messages handed over to forward to the dead-letter topic: "seq:gen" -> until when the forwarder's claim holds. */
  forwarding: string;
  /** Ordered subscriptions only: un-acked keyed messages, sorted by key then sequence. */
  keyed: string;
  /** Ordered subscriptions only: seq -> "gen|o|key" (outstanding) or "gen|w|key" (waiting again); see SCHEMA.md. */
  keyedDeliveries: string;
  /** Ordered subscriptions only: key -> "q" or "q<seq>" (queued in the ready list) or outstanding count; see SCHEMA.md. */
  keyStates: string;
  /**
   * Filtered subscriptions of a retaining topic only: block -> one character per message of the
   * block, '0' where the filter refused it (absent: it took all of the block's messages).
   */
  selections: string;
  /** block -> one character per message of the block, '1' at each one held un-acked (SCHEMA.md). */
  holds: string;
  /** The blocks with a held message in `holds`, scored by block number: the oldest first. */
  holdBlocks: string;
}
