import type { BulkStrings } from '../binary-command.ts';
import type { TopicKeys } from '../keys.ts';
import type { Scripts } from '../scripts.ts';
import {
  REPLY_ATTACHMENTS_CHANGED,
  REPLY_FORWARDED_BEFORE,
  REPLY_OK,
  REPLY_PAST_RETENTION,
  REPLY_STAMP_REFUSED,
  REPLY_TOPIC_DELETED,
  type ScriptTime,
  unexpectedReply,
} from './codes.ts';

export interface PublishCall {
  time: ScriptTime;
  /** The publish time stamped into every body (µs). */
  publishTimeUs: number;
  /** The attachVersion read together with `subscriptions`. */
  attachVersion: string;
  wakeChannel: string;
  /** '' for none; one key per request. */
  orderingKey: string;
  /**
   * The attached subscriptions, as read; `takes`, for one whose filter refused some of the
   * messages: a character per message, '1' taken and '0' not.
   */
  subscriptions: readonly { uid: string; ordered: boolean; takes?: string }[];
  /** The packed bodies: block fields when staged, else the bodies alone (packMessages). */
  bodies: BulkStrings;
  staged: boolean;
  /** Where staged bodies go (TopicKeys.staging); a key of the call either way. */
  stagingKey: string;
  /** A message forwarded from a dead-letter policy: its forward ID, so that it is stored once. */
  forwardId?: string;
  /** The topic's messageRetentionDuration (µs), when it has one: its messages are kept that long. */
  topicRetentionUs?: number;
  /** Per message, its idempotency key ('' for none): a key seen within the window stores nothing. */
  idempotencyKeys?: readonly string[];
  /** How long an idempotency key is remembered (µs): the topic's deduplicationWindow. */
  deduplicationWindowUs?: number;
  /**
   * The messages to deliver later than their publish time, in message order: index (from 0) and
   * delivery time (µs).
   */
  scheduled?: readonly { index: number; dueUs: number }[];
}

/**
 * What publish.lua did; on every answer but 'published' nothing was stored.
 *   'published'              as seqs firstSeq .. firstSeq + n - 1, at the script's time redisTimeUs,
 *                            but for the duplicates, stored before under the same idempotency key;
 *   'topic-deleted'          the topic incarnation is deleted;
 *   'attachments-changed'    re-read the attached subscriptions and publish again;
 *   'stamp-refused'          the publish time is too far from the script's time redisTimeUs: stamp
 *                            again from it;
 *   'staged-bodies-missing'  the staged bodies were not all there when the script ran (ioredis
 *                            Cluster, retrying commands one by one after a failover, sent the
 *                            script before them): publishing again succeeds;
 *   'forwarded-before'       the forward ID was stored already;
 *   'scheduled-past-retention'  message `index` (from 0) is scheduled later after its publish time
 *                            than a subscription that takes it retains messages (retentionUs).
 */
export type PublishResult =
  | {
      kind: 'published';
      firstSeq: number;
      redisTimeUs: number;
      /** Message index → the seq it was stored as before (its idempotency key was remembered). */
      duplicates: Map<number, number>;
    }
  | { kind: 'topic-deleted' }
  | { kind: 'attachments-changed' }
  | { kind: 'stamp-refused'; redisTimeUs: number }
  | { kind: 'staged-bodies-missing' }
  | { kind: 'forwarded-before' }
  | { kind: 'scheduled-past-retention'; index: number; retentionUs: number };

/** The error publish.lua answers when the staged bodies are not all there. */
export const STAGED_BODIES_MISSING = 'the staged bodies are not all there';

/**
 * publish.lua's KEYS, and its ARGV up to the bodies (which follow them in the call, unless they
 * are staged): for this wrapper and for scripts that run publish.lua as a step.
 */
export function publishArguments(data: TopicKeys, call: PublishCall): { keys: string[]; args: string[] } {
  return { keys: publishKeys(data, call), args: publishArgumentsBeforeBodies(call) };
}

/** publish.lua's KEYS. */
export function publishKeys(data: TopicKeys, call: PublishCall): string[] {
  const keys = [
    data.state,
    data.bodies,
    data.refs,
    call.stagingKey,
    data.forwarded,
    data.log,
    data.logStart,
    data.idempotencyKeys,
    data.idempotencyTimes,
    data.scheduled,
  ];
  const scheduling = (call.scheduled?.length ?? 0) > 0;
  for (const { uid } of call.subscriptions) {
    const sub = data.subscription(uid);
    keys.push(sub.ready, sub.keyed, sub.keyStates, sub.selections, sub.holds, sub.holdBlocks, sub.keyedDeliveries);
    if (scheduling) keys.push(sub.config, sub.delayed);
  }
  return keys;
}

/** publish.lua's ARGV up to the bodies. */
export function publishArgumentsBeforeBodies(call: PublishCall): string[] {
  const scheduled = call.scheduled ?? [];
  let orderedFlags = '';
  let selections = '';
  for (const { ordered, takes } of call.subscriptions) {
    orderedFlags += ordered ? '1' : '0';
    selections += takes ?? '*';
  }
  const args = [
    call.time,
    String(call.publishTimeUs),
    call.attachVersion,
    call.wakeChannel,
    call.orderingKey,
    orderedFlags,
    call.forwardId ?? '',
    selections,
    call.topicRetentionUs ? String(call.topicRetentionUs) : '',
    String(call.bodies.count),
    String(call.deduplicationWindowUs ?? 0),
  ];
  const keyedMessages: string[] = [];
  call.idempotencyKeys?.forEach((key, index) => {
    if (key !== '') keyedMessages.push(String(index + 1), key);
  });
  // Consecutive messages of one time go as one run: first and last index (from 1), and the time.
  const runs: string[] = [];
  for (const [at, { index, dueUs }] of scheduled.entries()) {
    const previous = scheduled[at - 1];
    if (previous && previous.index === index - 1 && previous.dueUs === dueUs) runs[runs.length - 2] = String(index + 1);
    else runs.push(String(index + 1), String(index + 1), String(dueUs));
  }
  args.push(String(keyedMessages.length / 2), ...keyedMessages, String(runs.length / 3), ...runs);
  return args;
}

/**
 * Runs publish.lua. Large bodies are staged in a hash the script renames (Scripts.runStaged), so
 * that Redis never makes Lua strings of them; small ones go in the call (two commands fewer), and
 * share a block with other small publishes (Scripts.runEncoded). Either way they are encoded in
 * one pass: they are nearly all of what is sent (binary-command.ts).
 */
export async function publish(scripts: Scripts, data: TopicKeys, call: PublishCall): Promise<PublishResult> {
  const { bodies, stagingKey } = call;
  const { keys, args } = publishArguments(data, call);
  let reply: number[];
  try {
    reply = (await (call.staged
      ? scripts.runStaged('publish', keys, args, stagingKey, bodies)
      : scripts.runEncoded('publish', keys, args, bodies))) as typeof reply;
  } catch (error) {
    if (call.staged && error instanceof Error && error.message.includes(STAGED_BODIES_MISSING)) {
      return { kind: 'staged-bodies-missing' };
    }
    throw error;
  }
  return publishResult(reply);
}

/** What publish.lua's reply says. */
export function publishResult(reply: number[]): PublishResult {
  switch (reply[0]) {
    case REPLY_TOPIC_DELETED:
      return { kind: 'topic-deleted' };
    case REPLY_ATTACHMENTS_CHANGED:
      return { kind: 'attachments-changed' };
    case REPLY_STAMP_REFUSED:
      return { kind: 'stamp-refused', redisTimeUs: reply[1] };
    case REPLY_FORWARDED_BEFORE:
      return { kind: 'forwarded-before' };
    case REPLY_PAST_RETENTION:
      return { kind: 'scheduled-past-retention', index: reply[1] - 1, retentionUs: reply[2] };
    case REPLY_OK: {
      const duplicates = new Map<number, number>();
      for (let at = 3; at < reply.length; at += 2) duplicates.set(reply[at] - 1, Number(reply[at + 1]));
      return { kind: 'published', firstSeq: reply[1], redisTimeUs: reply[2], duplicates };
    }
    default:
      throw unexpectedReply('publish', reply);
  }
}
