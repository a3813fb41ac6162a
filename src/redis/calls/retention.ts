import type { TopicKeys } from '../keys.ts';
import type { Scripts } from '../scripts.ts';
import { REPLY_NO_SUBSCRIPTION, REPLY_OK, type ScriptTime, unexpectedReply } from './codes.ts';

// The scripts of replay: seek, and expire-log (the retained log's bounded clean-up).

export interface SeekCall {
  time: ScriptTime;
  /** Messages published at or after this (µs) are unacknowledged after the seek, the others acknowledged. */
  targetUs: number;
  /** The topic's messageRetentionDuration (µs), when it has one. */
  topicRetentionUs?: number;
  /** The subscription has a filter (its selections say which of the log's messages it took). */
  filtered: boolean;
  wakeChannel: string;
}

/** Seeks a subscription to a publish time; undefined when it is not attached here. */
export async function seek(
  scripts: Scripts,
  data: TopicKeys,
  subscriptionUid: string,
  call: SeekCall,
): Promise<{ unacked: number } | undefined> {
  const sub = data.subscription(subscriptionUid);
  const reply = (await scripts.run(
    'seek',
    [
      sub.config,
      sub.ready,
      sub.leased,
      sub.delayed,
      sub.forwarding,
      sub.keyed,
      sub.keyedDeliveries,
      sub.keyStates,
      sub.selections,
      data.bodies,
      data.refs,
      data.log,
      data.logStart,
    ],
    [
      call.time,
      String(call.targetUs),
      call.topicRetentionUs ? String(call.topicRetentionUs) : '',
      call.filtered ? '1' : '',
      call.wakeChannel,
    ],
  )) as [number, number?];
  if (reply[0] === REPLY_NO_SUBSCRIPTION) return undefined;
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
 * `retains`: the log still holds blocks, or the topic retains.
 */
export async function expireLog(
  scripts: Scripts,
  data: TopicKeys,
  call: ExpireLogCall,
): Promise<{ released: number; more: boolean; retains: boolean }> {
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
  )) as [number, number, number, number];
  if (reply[0] !== REPLY_OK) throw unexpectedReply('expire-log', reply);
  return { released: reply[1], more: reply[2] === 1, retains: reply[3] === 1 };
}
