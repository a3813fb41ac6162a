import { COUNTED_KEY_NAMES, holdingKeys, type SubscriptionKeys, type TopicKeys } from '../keys.ts';
import type { Scripts } from '../scripts.ts';
import { REPLY_NO_SUBSCRIPTION, REPLY_OK, unexpectedReply } from './codes.ts';

// The read-only scripts of the backlog views (src/broker/backlog.ts).

/**
 * The streams read-backlog.lua reads a subscription's messages in, in their order: r the ready
 * list, l the leases, d the delayed set, f the forwarding set, k the keyed set.
 */
export type BacklogStream = 'r' | 'l' | 'd' | 'f' | 'k';
export const BACKLOG_STREAMS: readonly BacklogStream[] = ['r', 'l', 'd', 'f', 'k'];

/** A place in the streams: the entry last read (a, b as read-backlog.lua's header says), or a stream's start. */
export interface BacklogPosition {
  stream: BacklogStream;
  a: string;
  b: string;
}

/** a available, l leased, s scheduled, b in backoff, f being forwarded to the dead-letter topic. */
export type StoredState = 'a' | 'l' | 's' | 'b' | 'f';

export interface BacklogEntry {
  /** Where to go on from to read what follows it. */
  position: BacklogPosition;
  seq: string;
  state: StoredState;
  /** Delivery attempts so far (a leased message's current delivery included). */
  attempts: number;
  /** The lease deadline, delivery time or backoff end (µs), as the state has one. */
  timeUs?: number;
}

export interface ReadBacklogCall {
  /** The streams to read, in BACKLOG_STREAMS order. */
  streams: BacklogStream[];
  /** Where to go on from; undefined for the start of the first stream. */
  after?: BacklogPosition;
  /** How many entries at most the script examines. */
  budget: number;
  /** Only this ordering key's messages of the keyed set ('' for all). */
  orderingKey: string;
}

export type ReadBacklogResult =
  | { kind: 'no-subscription' }
  | {
      kind: 'read';
      /** Entries Redis handed the script: the page's cost. */
      examined: number;
      entries: BacklogEntry[];
      /** Where to go on from; undefined when every stream was read to its end. */
      next?: BacklogPosition;
    };

const ITEM_FIELDS = 7;

export async function readBacklog(
  scripts: Scripts,
  sub: SubscriptionKeys,
  call: ReadBacklogCall,
): Promise<ReadBacklogResult> {
  const reply = (await scripts.run(
    'read-backlog',
    [...holdingKeys(sub), sub.keyedDeliveries],
    [
      call.streams.join(''),
      call.after?.stream ?? '',
      call.after?.a ?? '',
      call.after?.b ?? '',
      call.budget,
      call.orderingKey,
    ],
  )) as [number, ...(string | number)[]];
  if (reply[0] === REPLY_NO_SUBSCRIPTION && reply.length === 1) return { kind: 'no-subscription' };
  if (reply[0] !== REPLY_OK || (reply.length - 5) % ITEM_FIELDS !== 0) throw unexpectedReply('read-backlog', reply);
  const [, examined, nextStream, nextA, nextB] = reply;
  const entries: BacklogEntry[] = [];
  for (let i = 5; i < reply.length; i += ITEM_FIELDS) {
    const time = String(reply[i + 6]);
    entries.push({
      position: { stream: reply[i] as BacklogStream, a: String(reply[i + 1]), b: String(reply[i + 2]) },
      seq: String(reply[i + 3]),
      state: reply[i + 4] as StoredState,
      attempts: Number(reply[i + 5]),
      timeUs: time === '' ? undefined : Number(time),
    });
  }
  const next =
    nextStream === '' ? undefined : { stream: nextStream as BacklogStream, a: String(nextA), b: String(nextB) };
  return { kind: 'read', examined: Number(examined), entries, next };
}

/** One subscription's counts (count-backlog.lua); 'no-subscription' where it is not attached. */
export type BacklogCount =
  | 'no-subscription'
  | {
      unacked: number;
      leased: number;
      forwarding: number;
      /** The publish time of the oldest un-acked message (µs), undefined when there is none. */
      oldestUs: number | undefined;
    };

/**
 * Counts subscriptions of one topic incarnation (`data`) in one script, each given by its key
 * prefix (TopicKeys.subscriptionPrefix): their counts in the same order, and the script's clock
 * (µs), for the ages of their oldest messages.
 */
export async function countBacklog(
  scripts: Scripts,
  data: TopicKeys,
  subscriptionPrefixes: readonly string[],
  time: string,
): Promise<{ nowUs: number; counts: BacklogCount[] }> {
  const reply = (await scripts.run(
    'count-backlog',
    [data.bodies, ...subscriptionPrefixes],
    [time, ...COUNTED_KEY_NAMES],
  )) as (number | string)[];
  if (reply[0] !== REPLY_OK || reply.length !== 2 + 4 * subscriptionPrefixes.length) {
    throw unexpectedReply('count-backlog', reply);
  }
  const counts = new Array<BacklogCount>(subscriptionPrefixes.length);
  for (let i = 0, at = 2; i < counts.length; i++, at += 4) {
    const oldest = reply[at + 3];
    counts[i] =
      reply[at] === REPLY_NO_SUBSCRIPTION
        ? 'no-subscription'
        : {
            unacked: Number(reply[at]),
            leased: Number(reply[at + 1]),
            forwarding: Number(reply[at + 2]),
            oldestUs: oldest === '' ? undefined : Number(oldest),
          };
  }
  return { nowUs: Number(reply[1]), counts };
}

/** Runs index-holds.lua: writes the subscription's holds from what it holds (storage-format.ts). */
export async function indexHolds(scripts: Scripts, sub: SubscriptionKeys): Promise<'indexed' | 'no-subscription'> {
  const reply = await scripts.run('index-holds', [...holdingKeys(sub), sub.holds, sub.holdBlocks], []);
  if (reply === REPLY_NO_SUBSCRIPTION) return 'no-subscription';
  if (reply !== REPLY_OK) throw unexpectedReply('index-holds', reply);
  return 'indexed';
}
