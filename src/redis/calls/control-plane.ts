import type { Keys, TopicKeys } from '../keys.ts';
import type { ScriptName, Scripts } from '../scripts.ts';
import {
  REPLY_OK,
  REPLY_PROJECT_FULL,
  REPLY_REFUSED,
  REPLY_TOPIC_DELETED,
  REPLY_TOPIC_FULL,
  type ScriptTime,
  unexpectedReply,
} from './codes.ts';

// The scripts of the control plane (records, their indexes and clean-up marks) and of the
// data-plane changes it makes: attaching and dropping subscriptions, closing topic data.

export interface PutStateCall {
  /** 'cas': only if the state there is `expected`; 'newer': only if this one is newer (see may_put). */
  mode: 'cas' | 'newer';
  /** 'cas': the state the caller read ('' = none); ignored on 'newer'. */
  expected: string;
  /** The full name. */
  name: string;
  /** The new state: a record or a tombstone, as JSON. */
  json: string;
  version: number;
  tombstone: boolean;
  /**
   * The limits a create is held to, in the same step as its compare-and-set: at most
   * `perProject` names of the kind start with `projectPrefix`, and (subscriptions) at most
   * `perTopic` are attached to the topic. Updates, deletes and copies are never held to them.
   */
  limits?: CreateLimits;
}

export interface CreateLimits {
  projectPrefix: string;
  perProject: number;
  perTopic?: number;
}

/**
 * 'written': `previous` is the state it replaced ('' = none); 'refused': `current` is the state
 * there, kept; 'full': a create refused, the project's or the topic's limit reached.
 */
export type PutStateResult =
  | { kind: 'written'; previous: string }
  | { kind: 'refused'; current: string }
  | { kind: 'full'; scope: 'project' | 'topic' };

/** The arguments both put scripts open with (ARGV[1..6]). */
function stateArgs(put: PutStateCall): (string | number)[] {
  return [put.mode, put.expected, put.name, put.json, put.version, put.tombstone ? '1' : '0'];
}

function putResult(script: ScriptName, reply: [number, string]): PutStateResult {
  if (reply[0] === REPLY_OK) return { kind: 'written', previous: reply[1] };
  if (reply[0] === REPLY_REFUSED) return { kind: 'refused', current: reply[1] };
  if (reply[0] === REPLY_PROJECT_FULL) return { kind: 'full', scope: 'project' };
  if (reply[0] === REPLY_TOPIC_FULL) return { kind: 'full', scope: 'topic' };
  throw unexpectedReply(script, reply);
}

/**
 * Writes a topic's state; `topicUid` is the state's incarnation (its subscription and snapshot
 * names go with a tombstone); `retentionUs`, its messageRetentionDuration (none for a tombstone).
 */
export async function putTopic(
  scripts: Scripts,
  keys: Keys,
  topicUid: string,
  put: PutStateCall & { time: ScriptTime; retentionUs: number | undefined },
): Promise<PutStateResult> {
  const reply = await scripts.run(
    'put-topic',
    [
      keys.topics,
      keys.topicIndex,
      keys.topicTombstones,
      keys.topicSubscriptions(topicUid),
      keys.topicSnapshots(topicUid),
      keys.logRetention,
      keys.logExpiries,
      keys.controlChanges,
    ],
    [
      ...stateArgs(put),
      put.limits?.projectPrefix ?? '',
      put.limits?.perProject ?? '',
      put.retentionUs === undefined ? '' : String(put.retentionUs),
      put.time,
    ],
  );
  return putResult('put-topic', reply as [number, string]);
}

/** What owns data in a topic incarnation, and has its records written by put-data-owner. */
export type DataOwnerKind = 'subscription' | 'snapshot';

/** The records of a kind (HASH full name -> JSON) and its expiry index (ZSET full name -> µs). */
function recordsAndExpiries(keys: Keys, kind: DataOwnerKind): [string, string] {
  return kind === 'subscription'
    ? [keys.subscriptions, keys.subscriptionExpiries]
    : [keys.snapshots, keys.snapshotExpiries];
}

/**
 * Writes a subscription's or a snapshot's state; `topicUid` is the incarnation of the topic it
 * belongs to, `expiresAfterUs` how long after now it may expire at the earliest (undefined: never).
 */
export async function putDataOwner(
  scripts: Scripts,
  keys: Keys,
  kind: DataOwnerKind,
  topicUid: string,
  put: PutStateCall & { time: ScriptTime; expiresAfterUs: number | undefined },
): Promise<PutStateResult> {
  const [records, expiries] = recordsAndExpiries(keys, kind);
  const recordKeys =
    kind === 'subscription'
      ? [records, keys.subscriptionIndex, keys.subscriptionTombstones, keys.topicSubscriptions(topicUid)]
      : [records, keys.snapshotIndex, keys.snapshotTombstones, keys.topicSnapshots(topicUid)];
  const reply = await scripts.run(
    'put-data-owner',
    [
      ...recordKeys,
      keys.pendingCleanups,
      keys.ownerChanges,
      expiries,
      keys.logRetention,
      keys.logExpiries,
      keys.controlChanges,
    ],
    [
      ...stateArgs(put),
      put.time,
      put.limits?.projectPrefix ?? '',
      put.limits?.perProject ?? '',
      put.limits?.perTopic ?? '',
      put.expiresAfterUs === undefined ? '' : Math.max(0, Math.round(put.expiresAfterUs)),
      kind,
    ],
  );
  return putResult('put-data-owner', reply as [number, string]);
}

/** Writes a project's IAM policy (`put.tombstone` is ignored: a policy is never deleted). */
export async function putProjectPolicy(scripts: Scripts, keys: Keys, put: PutStateCall): Promise<PutStateResult> {
  const reply = await scripts.run(
    'put-project-policy',
    [keys.projectPolicies, keys.controlChanges],
    [put.mode, put.expected, put.name, put.json, put.version],
  );
  return putResult('put-project-policy', reply as [number, string]);
}

export interface RescheduleExpiryCall {
  name: string;
  /** The record as the expiration pass read it ('' for none). */
  judged: string;
  /** When it may expire at the earliest (µs); undefined: never (its entry is removed). */
  dueUs: number | undefined;
}

/** Moves a record's entry in the expiry index, unless the record changed since it was judged. */
export async function rescheduleExpiry(
  scripts: Scripts,
  keys: Keys,
  kind: DataOwnerKind,
  call: RescheduleExpiryCall,
): Promise<'moved' | 'changed'> {
  const reply = await scripts.run('reschedule-expiry', recordsAndExpiries(keys, kind), [
    call.name,
    call.judged,
    call.dueUs === undefined ? '' : Math.round(call.dueUs),
  ]);
  if (reply === REPLY_OK) return 'moved';
  if (reply === REPLY_REFUSED) return 'changed';
  throw unexpectedReply('reschedule-expiry', reply);
}

export interface AttachCall {
  time: ScriptTime;
  subscriptionUid: string;
  ordered: boolean;
  /** Its filter expression, if it has one (publish evaluates it: publish.ts). */
  filter?: string;
  /** The version of the subscription record the settings come from. */
  version: number;
  /** The settings, as config hash field/value pairs. */
  config: readonly string[];
}

/** Attaches a subscription to the topic incarnation's future publishes, with its settings. */
export async function attachSubscription(
  scripts: Scripts,
  data: TopicKeys,
  call: AttachCall,
): Promise<'attached' | 'topic-deleted'> {
  const reply = await scripts.run(
    'attach-subscription',
    [data.state, data.attached, data.subscription(call.subscriptionUid).config, data.retainers],
    [call.time, call.subscriptionUid, `${call.ordered ? '1' : '0'}${call.filter ?? ''}`, call.version, ...call.config],
  );
  if (reply === REPLY_OK) return 'attached';
  if (reply === REPLY_TOPIC_DELETED) return 'topic-deleted';
  throw unexpectedReply('attach-subscription', reply);
}

/**
 * Detaches a subscription and releases up to `batch` of the entries it holds from each of its
 * structures. Returns how many entries it still holds (0: fully dropped).
 */
export async function dropSubscription(
  scripts: Scripts,
  data: TopicKeys,
  call: { subscriptionUid: string; batch: number },
): Promise<number> {
  const sub = data.subscription(call.subscriptionUid);
  const reply = await scripts.run(
    'drop-subscription',
    [
      data.state,
      data.attached,
      sub.config,
      sub.ready,
      sub.leased,
      data.bodies,
      data.refs,
      sub.keyed,
      sub.keyedDeliveries,
      sub.keyStates,
      sub.delayed,
      sub.forwarding,
      data.retainers,
      sub.selections,
      sub.holds,
      sub.holdBlocks,
    ],
    [call.subscriptionUid, call.batch],
  );
  if (typeof reply !== 'number') throw unexpectedReply('drop-subscription', reply);
  return reply;
}

/** Closes a topic incarnation to publishing and attaching. */
export async function deleteTopicData(scripts: Scripts, data: TopicKeys): Promise<void> {
  await scripts.run('delete-topic-data', [data.state, data.forwarded, data.idempotencyKeys, data.idempotencyTimes], []);
}

/** Marks subscription data ("topicUid/subscriptionUid/name") for clean-up. */
export async function markCleanup(
  scripts: Scripts,
  keys: Keys,
  call: { time: ScriptTime; ref: string },
): Promise<void> {
  await scripts.run('mark-cleanup', [keys.pendingCleanups], [call.time, call.ref]);
}

/** Forgets a clean-up mark once its data has been dropped. */
export async function finishCleanup(scripts: Scripts, keys: Keys, call: { ref: string }): Promise<void> {
  await scripts.run('finish-cleanup', [keys.pendingCleanups], [call.ref]);
}
