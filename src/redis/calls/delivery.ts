import type { SubscriptionKeys, TopicKeys } from '../keys.ts';
import type { ScriptName, Scripts } from '../scripts.ts';
import {
  DELIVERY_APPLIED,
  DELIVERY_EXPIRED,
  DELIVERY_GONE,
  DELIVERY_OUT_OF_ORDER,
  REPLY_NO_SUBSCRIPTION,
  REPLY_OK,
  type ScriptTime,
  unexpectedReply,
} from './codes.ts';

// The scripts of the pull/ack/modack cycle, of forwarding to a dead-letter topic, and touch-subscription.

export interface PullCall extends RecordChecked {
  time: ScriptTime;
  /** The topic's messageRetentionDuration (µs), when it has one: messages are kept at least that long. */
  topicRetentionUs?: number;
  max: number;
  /** How long the leases last (µs); the subscription's ack deadline when undefined. */
  leaseUs?: number;
  wakeChannel: string;
  /** No further message once the leased bodies reach this many bytes (at least one goes). */
  maxBytes: number;
  /** Messages due for the dead-letter topic may be handed over to forward (it exists). */
  mayForward: boolean;
  /**
   * Leased bodies of at most this many bytes in all come back with the leases (`bodies`), unless
   * messages were handed over to forward; larger ones the caller reads.
   */
  inlineBytes: number;
}

/** A call that may check the caller's copy of the subscription record. */
interface RecordChecked {
  /**
   * The version of a subscription record the caller remembered rather than read for the call:
   * the script answers 'no-subscription', and changes nothing, when the subscription's settings
   * come from a newer record (newer_settings in prelude.lua). Undefined: no check.
   */
  recordVersion?: number;
}

const versionArgument = ({ recordVersion }: RecordChecked) =>
  recordVersion === undefined ? '' : String(recordVersion);

/** A message pull.lua handed over to forward to the dead-letter topic. */
export interface Forward {
  seq: string;
  generation: number;
  /** How many of its deliveries failed. */
  deliveryAttempts: number;
  /** Until when this pull's claim on it holds (µs): only that claim may cancel it. */
  claimUs: number;
}

export type PullResult =
  /**
   * Not attached here: deleted, or its topic was deleted in this region before it came (or its
   * settings come from a newer record than the call's `recordVersion`).
   */
  | { kind: 'no-subscription' }
  | {
      kind: 'leased';
      /**
       * When nothing was leased: microseconds until the earliest lease runs out, retry backoff
       * ends or forwarding claim ends (undefined: none).
       */
      nextDueUs: number | undefined;
      /** Messages published before this are past the subscription's retention. */
      oldestKeptUs: number;
      /** The leased messages and their generations. */
      seqs: string[];
      generations: number[];
      /** Each leased message's delivery attempt, on subscriptions with a dead-letter policy. */
      attempts?: number[];
      /** The leased messages' bodies, when they were small enough (`inlineBytes`); else read them. */
      bodies?: (Buffer | null)[];
      forwards: Forward[];
      /** How many leases the script found past their deadline. */
      expired: number;
    };

export async function pull(
  scripts: Scripts,
  data: TopicKeys,
  sub: SubscriptionKeys,
  call: PullCall,
): Promise<PullResult> {
  // As Buffers: the reply may end in bodies.
  const reply = (await scripts.runForBuffers(
    'pull',
    [
      sub.config,
      sub.ready,
      sub.leased,
      data.bodies,
      sub.keyed,
      sub.keyedDeliveries,
      sub.keyStates,
      sub.delayed,
      sub.forwarding,
      sub.holds,
      sub.holdBlocks,
    ],
    [
      call.time,
      call.max,
      call.leaseUs ?? '',
      call.wakeChannel,
      call.maxBytes,
      call.mayForward ? '1' : '',
      call.topicRetentionUs ? String(call.topicRetentionUs) : '',
      versionArgument(call),
      call.inlineBytes,
    ],
  )) as [number, number | Buffer, number, number, number, number, number, number, ...(Buffer | number | null)[]];
  if (reply[0] === REPLY_NO_SUBSCRIPTION) return { kind: 'no-subscription' };
  if (reply[0] !== REPLY_OK) throw unexpectedReply('pull', reply);
  const [, due, oldestKeptUs, forwardCount, stride, claimUs, expired, inlined] = reply;
  const bodiesAt = reply.length - inlined;
  const forwardsAt = bodiesAt - 3 * forwardCount;
  const seqs: string[] = [];
  const generations: number[] = [];
  const attempts: number[] | undefined = stride === 3 ? [] : undefined;
  for (let i = 8; i < forwardsAt; i += stride) {
    seqs.push(String(reply[i]));
    generations.push(Number(reply[i + 1]));
    attempts?.push(Number(reply[i + 2]));
  }
  const forwards: Forward[] = [];
  for (let i = forwardsAt; i < bodiesAt; i += 3) {
    forwards.push({
      seq: String(reply[i]),
      generation: Number(reply[i + 1]),
      deliveryAttempts: Number(reply[i + 2]),
      claimUs,
    });
  }
  const nextDueUs = typeof due === 'number' ? due : undefined;
  const bodies = inlined > 0 ? (reply.slice(bodiesAt) as (Buffer | null)[]) : undefined;
  return { kind: 'leased', nextDueUs, oldestKeptUs, seqs, generations, attempts, bodies, forwards, expired };
}

/**
 * What an ack or deadline change did to one delivery:
 *   'applied'       done;
 *   'gone'          no such lease: acknowledged, superseded by a newer delivery, nacked, or unknown;
 *   'expired'       the lease had expired: nothing changed on an exactly-once subscription, the
 *                   change applied anyway on others;
 *   'out-of-order'  (acknowledge-ordered, exactly-once) an earlier message of its key is not
 *                   acknowledged yet: nothing changed.
 */
export type DeliveryOutcome = 'applied' | 'gone' | 'expired' | 'out-of-order';

export type SettleResult =
  | { kind: 'no-subscription' }
  /** One outcome per delivery, in the order they were given. */
  | { kind: 'settled'; outcomes: DeliveryOutcome[] };

const OUTCOMES: Record<number, DeliveryOutcome> = {
  [DELIVERY_APPLIED]: 'applied',
  [DELIVERY_GONE]: 'gone',
  [DELIVERY_EXPIRED]: 'expired',
  [DELIVERY_OUT_OF_ORDER]: 'out-of-order',
};

/** What acknowledge.lua, acknowledge-ordered.lua or modify-ack-deadline.lua answered. */
export function settled(script: ScriptName, reply: number[]): SettleResult {
  if (reply[0] === REPLY_NO_SUBSCRIPTION) return { kind: 'no-subscription' };
  const outcomes: DeliveryOutcome[] = [];
  for (const code of reply) {
    const outcome = OUTCOMES[code];
    if (!outcome) throw unexpectedReply(script, reply);
    outcomes.push(outcome);
  }
  return { kind: 'settled', outcomes };
}

export interface AcknowledgeCall extends RecordChecked {
  time: ScriptTime;
  /** Distinct deliveries, "seq:gen". */
  members: readonly string[];
}

/** Runs acknowledge.lua: for subscriptions without message ordering. */
export async function acknowledge(
  scripts: Scripts,
  data: TopicKeys,
  sub: SubscriptionKeys,
  call: AcknowledgeCall,
): Promise<SettleResult> {
  const { keys, args } = acknowledgeArguments(data, sub, call);
  return settled('acknowledge', (await scripts.run('acknowledge', keys, args)) as number[]);
}

/** acknowledge.lua's KEYS and ARGV: for this wrapper and for scripts that run it as a step. */
export function acknowledgeArguments(data: TopicKeys, sub: SubscriptionKeys, call: AcknowledgeCall) {
  return {
    keys: [sub.config, sub.leased, data.bodies, data.refs, sub.holds, sub.holdBlocks],
    args: [call.time, versionArgument(call), ...call.members],
  };
}

/**
 * The KEYS of the scripts that end messages of an ordered subscription for good (acknowledge-ordered
 * from its leases, finish-forwarding from its forwarding set): what the ends change.
 */
function endingKeys(data: TopicKeys, sub: SubscriptionKeys, endedFrom: string): string[] {
  return [
    sub.config,
    endedFrom,
    data.bodies,
    data.refs,
    sub.ready,
    sub.keyed,
    sub.keyedDeliveries,
    sub.keyStates,
    sub.holds,
    sub.holdBlocks,
  ];
}

export type AcknowledgeOrderedCall = AcknowledgeCall & { wakeChannel: string };

/** Runs acknowledge-ordered.lua: for subscriptions with message ordering. */
export async function acknowledgeOrdered(
  scripts: Scripts,
  data: TopicKeys,
  sub: SubscriptionKeys,
  call: AcknowledgeOrderedCall,
): Promise<SettleResult> {
  const { keys, args } = acknowledgeOrderedArguments(data, sub, call);
  return settled('acknowledge-ordered', (await scripts.run('acknowledge-ordered', keys, args)) as number[]);
}

/** acknowledge-ordered.lua's KEYS and ARGV: for this wrapper and for scripts that run it as a step. */
export function acknowledgeOrderedArguments(data: TopicKeys, sub: SubscriptionKeys, call: AcknowledgeOrderedCall) {
  return {
    keys: endingKeys(data, sub, sub.leased),
    args: [call.time, call.wakeChannel, versionArgument(call), ...call.members],
  };
}

export interface ModifyAckDeadlineCall extends RecordChecked {
  time: ScriptTime;
  /** The new deadline, in seconds from now; 0 nacks. */
  seconds: number;
  /**
   * 'release', with seconds 0: the leases never reached a client, so they are given back without
   * counting as a delivery attempt or waiting out a retry backoff. 'hold': the deadlines change
   * only if every lease is valid (not expired), else nothing does.
   */
  mode?: 'release' | 'hold';
  wakeChannel: string;
  /** Deliveries, "seq:gen". */
  members: readonly string[];
}

export async function modifyAckDeadline(
  scripts: Scripts,
  sub: SubscriptionKeys,
  call: ModifyAckDeadlineCall,
): Promise<SettleResult> {
  const reply = await scripts.run(
    'modify-ack-deadline',
    [sub.config, sub.leased, sub.ready, sub.keyed, sub.keyedDeliveries, sub.keyStates, sub.delayed],
    [call.time, call.seconds, call.wakeChannel, call.mode ?? '', versionArgument(call), ...call.members],
  );
  return settled('modify-ack-deadline', reply as number[]);
}

export interface ForwardingCall {
  wakeChannel: string;
  /** Messages pull handed over to forward, "seq:gen". */
  members: readonly string[];
}

/** Runs finish-forwarding.lua: the messages are stored in the dead-letter topic. */
export async function finishForwarding(
  scripts: Scripts,
  data: TopicKeys,
  sub: SubscriptionKeys,
  call: ForwardingCall,
): Promise<'finished' | 'no-subscription'> {
  const reply = await scripts.run('finish-forwarding', endingKeys(data, sub, sub.forwarding), [
    call.wakeChannel,
    ...call.members,
  ]);
  return okOrNoSubscription('finish-forwarding', reply, 'finished');
}

/**
 * Runs cancel-forwarding.lua: the messages cannot be forwarded, and are delivered again, unless
 * the claim `claimUs` names ran out and another pull has claimed them since.
 */
export async function cancelForwarding(
  scripts: Scripts,
  sub: SubscriptionKeys,
  call: ForwardingCall & { claimUs: number },
): Promise<'cancelled' | 'no-subscription'> {
  const reply = await scripts.run(
    'cancel-forwarding',
    [sub.config, sub.forwarding, sub.ready, sub.keyed, sub.keyedDeliveries, sub.keyStates],
    [call.wakeChannel, call.claimUs, ...call.members],
  );
  return okOrNoSubscription('cancel-forwarding', reply, 'cancelled');
}

/** Records that the subscription is in use (an open stream keeps it alive while no message flows). */
export async function touchSubscription(
  scripts: Scripts,
  sub: SubscriptionKeys,
  call: { time: ScriptTime },
): Promise<'touched' | 'no-subscription'> {
  const reply = await scripts.run('touch-subscription', [sub.config], [call.time]);
  return okOrNoSubscription('touch-subscription', reply, 'touched');
}

/** A script's reply that is REPLY_OK (`ok`) or REPLY_NO_SUBSCRIPTION; anything else is a fault. */
function okOrNoSubscription<Ok extends string>(script: ScriptName, reply: unknown, ok: Ok): Ok | 'no-subscription' {
  if (reply === REPLY_OK) return ok;
  if (reply === REPLY_NO_SUBSCRIPTION) return 'no-subscription';
  throw unexpectedReply(script, reply);
}
