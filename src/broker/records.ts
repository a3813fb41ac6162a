import { randomBytes } from 'node:crypto';

/**
 * The control plane's records of topics and subscriptions, and the tombstones that delete them,
 * as stored (JSON) in every region's Redis (see control-plane.ts).
 */

/** A topic as kept in the control plane. `uid` names the incarnation whose data it owns. */
export interface TopicRecord {
  name: string;
  uid: string;
  /** Bumped by every change; the highest wins across regions (see control-plane.ts). Absent = 0. */
  version: number;
  labels?: Record<string, string>;
  messageRetentionDuration?: string;
  messageStoragePolicy?: { allowedPersistenceRegions?: string[]; enforceInTransit?: boolean };
}

/** A subscription as kept in the control plane. */
export interface SubscriptionRecord {
  name: string;
  topic: string;
  topicUid: string;
  uid: string;
  /** Bumped by every change; the highest wins across regions (see control-plane.ts). */
  version: number;
  ackDeadlineSeconds: number;
  messageRetentionDuration: string;
  expirationPolicy: { ttl?: string };
  retainAckedMessages?: boolean;
  labels?: Record<string, string>;
  enableMessageOrdering?: boolean;
  enableExactlyOnceDelivery?: boolean;
}

export interface Tombstone {
  name: string;
  version: number;
  deleted: true;
  /** The incarnation the delete ended. */
  uid: string;
  /** Subscriptions: the topic incarnation the deleted subscription was attached to. */
  topicUid?: string;
}

/** A name's state in one region: its record or its tombstone. */
export type State = TopicRecord | SubscriptionRecord | Tombstone;

export const isTombstone = (state: State): state is Tombstone => 'deleted' in state && state.deleted === true;
export const versionOf = (json: string): number =>
  json === '' ? 0 : ((JSON.parse(json) as { version?: number }).version ?? 0);
export const newUid = () => randomBytes(8).toString('hex');
