import { randomBytes } from 'node:crypto';
import type { StoredPolicy } from './iam-policy.ts';
import type { Regions } from './regions.ts';
import { parseDurationSeconds, parseTimestampUs } from './durations.ts';
import type { SubscriptionSettings } from './subscription-fields.ts';
import type { TopicSettings } from './topic-fields.ts';

/**
 * The control plane's records of topics, subscriptions and snapshots, and the tombstones that delete them,
 * as stored (JSON) in every region's Redis (see control-plane.ts).
 */

/** A topic as kept in the control plane. `uid` names the incarnation whose data it owns. */
export interface TopicRecord extends TopicSettings {
  name: string;
  uid: string;
  /** Bumped by every change; the highest wins across regions (see control-plane.ts). Absent = 0. */
  version: number;
  iamPolicy?: StoredPolicy;
}

/** A subscription as kept in the control plane: attached to the topic incarnation `topicUid`. */
export interface SubscriptionRecord extends SubscriptionSettings {
  name: string;
  topic: string;
  topicUid: string;
  uid: string;
  /** Bumped by every change; the highest wins across regions (see control-plane.ts). */
  version: number;
  /**
   * Detached from its topic (DetachSubscription): it receives nothing, holds no backlog, and
   * cannot be attached again; only deleting it ends it.
   */
  detached?: true;
  iamPolicy?: StoredPolicy;
}

/**
 * A snapshot as kept in the control plane: the acknowledgement state of a subscription of the
 * topic incarnation `topicUid`, captured in every region under `uid` (create-snapshot.lua).
 */
export interface SnapshotRecord {
  name: string;
  topic: string;
  topicUid: string;
  uid: string;
  version: number;
  /** When it expires (RFC 3339): seven days after its oldest message was published. */
  expireTime: string;
  labels?: Record<string, string>;
  /** The filter of the subscription it was made from: seeks of filtered subscriptions need the same. */
  filter?: string;
  iamPolicy?: StoredPolicy;
}

/** A project's IAM policy as kept in the control plane (authorization.ts); `name` is `projects/<id>`. */
export interface ProjectPolicyRecord extends StoredPolicy {
  name: string;
  version: number;
}

export interface Tombstone {
  name: string;
  version: number;
  deleted: true;
  /** The incarnation the delete ended. */
  uid: string;
  /** Subscriptions and snapshots: the topic incarnation the deleted one belonged to. */
  topicUid?: string;
}

/**
 * A call made with a subscription record remembered from an earlier call (delivery.ts, withRecord)
 * found that the record may be outdated: the subscription's settings come from a newer record,
 * the subscription is not there, or an ack ID names another incarnation of it. Nothing changed;
 * the caller reads the record and runs the call again.
 */
export class OutdatedRecord extends Error {
  constructor() {
    super('the remembered subscription record may be outdated');
  }
}

/** A name's state in one region: its record or its tombstone. */
export type State = TopicRecord | SubscriptionRecord | SnapshotRecord | ProjectPolicyRecord | Tombstone;

/** The tombstone that deletes a subscription or snapshot: it names the incarnation whose data is dropped. */
export function dataOwnerTombstone(record: SubscriptionRecord | SnapshotRecord, version: number): Tombstone {
  return { name: record.name, version, deleted: true, uid: record.uid, topicUid: record.topicUid };
}

export const isTombstone = (state: State): state is Tombstone => 'deleted' in state && state.deleted === true;
export const versionOf = (json: string): number =>
  json === '' ? 0 : ((JSON.parse(json) as { version?: number }).version ?? 0);
export const newUid = () => randomBytes(8).toString('hex');

/**
 * How long after its last use a subscription expires (its `expirationPolicy.ttl`, µs); undefined
 * for never: no ttl, or detached (nothing uses a detached subscription any more).
 */
export function expirationTtlUs(record: SubscriptionRecord): number | undefined {
  if (record.detached || !record.expirationPolicy.ttl) return undefined;
  return parseDurationSeconds(record.expirationPolicy.ttl, 'expirationPolicy.ttl') * 1_000_000;
}

/** When a snapshot expires (µs since the epoch). */
export function snapshotExpiresAtUs(record: SnapshotRecord): number {
  return parseTimestampUs(record.expireTime, 'expireTime');
}

/** The control plane's hashes of live records (keys.ts), and the record each holds. */
interface RecordHashes {
  topics: TopicRecord;
  subscriptions: SubscriptionRecord;
  snapshots: SnapshotRecord;
  projectPolicies: ProjectPolicyRecord;
}

/** The live record of `fullName` in one of those hashes, as this endpoint's region knows it. */
export async function findRecord<H extends keyof RecordHashes>(
  regions: Regions,
  hash: H,
  fullName: string,
): Promise<RecordHashes[H] | undefined> {
  const { ctx } = regions.requireLocal();
  const json = await ctx.redis.hget(ctx.keys[hash], fullName);
  return json === null ? undefined : (JSON.parse(json) as RecordHashes[H]);
}
