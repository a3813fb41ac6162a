import { holdingKeys, type Keys, type SnapshotKeys, type TopicKeys } from '../keys.ts';
import type { Scripts } from '../scripts.ts';
import {
  REPLY_NO_SNAPSHOT,
  REPLY_NO_SUBSCRIPTION,
  REPLY_OK,
  REPLY_REFUSED,
  type ScriptTime,
  unexpectedReply,
} from './codes.ts';

// The scripts of replay: seek, expire-log (the retained log's bounded clean-up) with its index
// (settle-log, mark-log), and the snapshots' create-snapshot and drop-snapshot.

export interface SeekCall {
  time: ScriptTime;
  /**
   * A seek to a time: messages published at or after this (µs) are unacknowledged after the
   * seek, the others acknowledged; or a seek to a snapshot: its keys in this region.
   */
  target: { timeUs: number } | { snapshot: SnapshotKeys };
  /** The topic's messageRetentionDuration (µs), when it has one. */
  topicRetentionUs?: number;
  /** The subscription has a filter (its selections say which of the log's messages it took). */
  filtered: boolean;
  /**
   * Where the broker wrote the filter's flags of the log's messages from before the
   * subscription was created (TopicKeys.earlierSelections; the script deletes it).
   */
  earlierSelections: string;
  wakeChannel: string;
}

/**
 * Seeks a subscription to a publish time or a snapshot; 'no-subscription' when it is not
 * attached here, 'no-snapshot' when the snapshot is not recorded here (nothing changed).
 */
export async function seek(
  scripts: Scripts,
  data: TopicKeys,
  subscriptionUid: string,
  call: SeekCall,
): Promise<{ unacked: number } | 'no-subscription' | 'no-snapshot'> {
  const sub = data.subscription(subscriptionUid);
  const snapshot = 'snapshot' in call.target ? call.target.snapshot : undefined;
  const reply = (await scripts.run(
    'seek',
    [
      ...holdingKeys(sub),
      sub.keyedDeliveries,
      sub.keyStates,
      sub.selections,
      data.bodies,
      data.refs,
      data.log,
      data.logStart,
      call.earlierSelections,
      data.scheduled,
      sub.holds,
      sub.holdBlocks,
      ...(snapshot ? [snapshot.held, snapshot.info] : []),
    ],
    [
      call.time,
      'timeUs' in call.target ? String(call.target.timeUs) : '',
      call.topicRetentionUs ? String(call.topicRetentionUs) : '',
      call.filtered ? '1' : '',
      call.wakeChannel,
    ],
  )) as [number, number?];
  if (reply[0] === REPLY_NO_SUBSCRIPTION) return 'no-subscription';
  if (reply[0] === REPLY_NO_SNAPSHOT) return 'no-snapshot';
  if (reply[0] !== REPLY_OK) throw unexpectedReply('seek', reply);
  return { unacked: reply[1] ?? 0 };
}

export interface ExpireLogCall {
  time: ScriptTime;
  /** The topic's messageRetentionDuration (µs), when it has one and is not deleted. */
  topicRetentionUs?: number;
  /** The uids of the topic's attached subscriptions (their selections of released blocks go too). */
  subscriptionUids: readonly string[];
  batch: number;
}

/**
 * Releases up to `batch` blocks of the retained log that are due; `more`: others are due too;
 * `retains`: the log still holds blocks, or the topic retains; `nextUs`: the earliest a block may
 * be due at this retention.
 */
export async function expireLog(
  scripts: Scripts,
  data: TopicKeys,
  call: ExpireLogCall,
): Promise<{ released: number; more: boolean; retains: boolean; nextUs: number }> {
  const reply = (await scripts.run(
    'expire-log',
    [
      data.state,
      data.log,
      data.bodies,
      data.refs,
      data.logStart,
      ...call.subscriptionUids.map((uid) => data.subscription(uid).selections),
    ],
    [call.time, call.topicRetentionUs ? String(call.topicRetentionUs) : '', call.batch],
  )) as [number, number, number, number, string];
  if (reply[0] !== REPLY_OK) throw unexpectedReply('expire-log', reply);
  return { released: reply[1], more: reply[2] === 1, retains: reply[3] === 1, nextUs: Number(reply[4]) };
}

export interface SettleLogCall {
  topicUid: string;
  /** The incarnation's entry in `log-expiries` as the pass read it (µs). */
  judgedUs: number;
  /** When to look again (expire-log's nextUs). */
  nextUs: number;
  /** expire-log found the log holding blocks, or the topic retaining. */
  retains: boolean;
}

/**
 * Moves the incarnation's entry in `log-expiries` to `nextUs`, or removes it when nothing retains
 * it and its log is empty; 'changed' (kept) when the entry moved since the pass read it.
 */
export async function settleLog(scripts: Scripts, keys: Keys, call: SettleLogCall): Promise<'settled' | 'changed'> {
  const reply = await scripts.run(
    'settle-log',
    [keys.logExpiries, keys.logRetention],
    [call.topicUid, String(call.judgedUs), String(call.nextUs), call.retains ? '1' : ''],
  );
  if (reply === REPLY_OK) return 'settled';
  if (reply === REPLY_REFUSED) return 'changed';
  throw unexpectedReply('settle-log', reply);
}

/** Has the janitor look at a topic incarnation's log at its next pass (a retainer was let go). */
export async function markLog(
  scripts: Scripts,
  keys: Keys,
  call: { time: ScriptTime; topicUid: string },
): Promise<void> {
  const reply = await scripts.run('mark-log', [keys.logExpiries], [call.time, call.topicUid]);
  if (reply !== REPLY_OK) throw unexpectedReply('mark-log', reply);
}

export interface CreateSnapshotCall {
  time: ScriptTime;
  subscriptionUid: string;
  snapshot: SnapshotKeys;
  /** The longest a snapshot lives (µs): the log keeps what is published after it that long at most. */
  maxLifeUs: number;
}

/**
 * Records the subscription's acknowledgement state as the snapshot's in this region (a repeat
 * answers as the first call did). `oldestUs`: the publish time of the oldest message it holds
 * (undefined: none); `atUs`: when it was made.
 */
export async function createSnapshot(
  scripts: Scripts,
  data: TopicKeys,
  call: CreateSnapshotCall,
): Promise<{ held: number; oldestUs?: number; atUs: number }> {
  const sub = data.subscription(call.subscriptionUid);
  const reply = (await scripts.run(
    'create-snapshot',
    [
      data.state,
      data.retainers,
      sub.ready,
      sub.delayed,
      sub.leased,
      sub.forwarding,
      sub.keyed,
      data.bodies,
      data.refs,
      call.snapshot.held,
      call.snapshot.info,
    ],
    [call.time, call.snapshot.retainer, String(call.maxLifeUs)],
  )) as [number, number, string, string];
  if (reply[0] !== REPLY_OK) throw unexpectedReply('create-snapshot', reply);
  return { held: reply[1], atUs: Number(reply[3]), ...(reply[2] ? { oldestUs: Number(reply[2]) } : {}) };
}

/** Releases up to `batch` blocks of a snapshot's held messages; returns how many blocks it still holds. */
export async function dropSnapshot(
  scripts: Scripts,
  data: TopicKeys,
  call: { snapshot: SnapshotKeys; batch: number },
): Promise<number> {
  const reply = await scripts.run(
    'drop-snapshot',
    [data.state, data.retainers, data.bodies, data.refs, call.snapshot.held, call.snapshot.info],
    [call.snapshot.retainer, call.batch],
  );
  if (typeof reply !== 'number') throw unexpectedReply('drop-snapshot', reply);
  return reply;
}
