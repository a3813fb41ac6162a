import { BulkStrings } from '../binary-command.ts';
import type { SubscriptionKeys, TopicKeys } from '../keys.ts';
import type { Scripts } from '../scripts.ts';
import {
  REPLY_LEASES_REFUSED,
  REPLY_NO_SUBSCRIPTION,
  REPLY_OK,
  REPLY_PUBLISH_REFUSED,
  type ScriptTime,
  unexpectedReply,
} from './codes.ts';
import {
  acknowledgeArguments,
  acknowledgeOrderedArguments,
  type DeliveryOutcome,
  type SettleResult,
  settled,
} from './delivery.ts';
import { type PublishCall, type PublishResult, publishArguments, publishResult } from './publish.ts';

export interface AcknowledgeAndPublishCall {
  time: ScriptTime;
  /** Distinct deliveries, "seq:gen", in request order. */
  members: readonly string[];
  /** Refuse after the lease check whatever it finds: the call also names ack IDs of no delivery here. */
  refuse: boolean;
  /** The subscription orders by key (acknowledge-ordered.lua acknowledges). */
  ordered: boolean;
  wakeChannel: string;
  /**
   * The publishes, in order, each to the subscription's topic incarnation, with its bodies in the
   * call (not staged); only the first may schedule messages.
   */
  publishes: readonly PublishCall[];
}

/**
 * What acknowledge-and-publish.lua did; on every answer but 'done' nothing changed:
 *   'no-subscription'  the subscription is not attached in this region;
 *   'leases-refused'   not every lease was current (per delivery, as a hold answers);
 *   'publish-refused'  the first publish refused, as publish.lua does;
 *   'done'             what the acknowledgement and each publish did.
 */
export type AcknowledgeAndPublishResult =
  | { kind: 'no-subscription' }
  | { kind: 'leases-refused'; outcomes: DeliveryOutcome[] }
  | { kind: 'publish-refused'; refusal: PublishResult }
  | { kind: 'done'; acknowledged: SettleResult; published: PublishResult[] };

/**
 * Runs acknowledge-and-publish.lua. Each step's KEYS and ARGV are what its own wrapper builds
 * (acknowledgeArguments, acknowledgeOrderedArguments, publishArguments), the KEYS passed once each.
 */
export async function acknowledgeAndPublish(
  scripts: Scripts,
  data: TopicKeys,
  sub: SubscriptionKeys,
  call: AcknowledgeAndPublishCall,
): Promise<AcknowledgeAndPublishResult> {
  const keys = [sub.config, sub.leased, sub.keyed, sub.keyedDeliveries];
  const positions = new Map(keys.map((key, index) => [key, index + 1]));
  const positionOf = (key: string) => {
    let position = positions.get(key);
    if (position === undefined) {
      position = keys.push(key);
      positions.set(key, position);
    }
    return String(position);
  };
  const step = (step: { keys: string[]; args: string[] }, bodies: number) => [
    String(step.keys.length),
    ...step.keys.map(positionOf),
    String(step.args.length),
    ...step.args,
    String(bodies),
  ];
  const { time, members, wakeChannel } = call;
  const acknowledgement = call.ordered
    ? acknowledgeOrderedArguments(data, sub, { time, members, wakeChannel })
    : acknowledgeArguments(data, sub, { time, members });
  const args = [
    time,
    call.refuse ? '1' : '',
    String(members.length),
    ...members,
    call.ordered ? 'acknowledge-ordered' : 'acknowledge',
    ...step(acknowledgement, 0),
    String(call.publishes.length),
  ];
  for (const publish of call.publishes) args.push(...step(publishArguments(data, publish), publish.bodies.count));
  const bodies = BulkStrings.joined(call.publishes.map((publish) => publish.bodies));
  const reply = (await scripts.runEncoded('acknowledge-and-publish', keys, args, bodies)) as [number, ...unknown[]];
  switch (reply[0]) {
    case REPLY_NO_SUBSCRIPTION:
      return { kind: 'no-subscription' };
    case REPLY_LEASES_REFUSED: {
      const outcomes = settled('acknowledge-and-publish', reply[1] as number[]);
      if (outcomes.kind !== 'settled') throw unexpectedReply('acknowledge-and-publish', reply);
      return { kind: 'leases-refused', outcomes: outcomes.outcomes };
    }
    case REPLY_PUBLISH_REFUSED:
      return { kind: 'publish-refused', refusal: publishResult(reply[1] as number[]) };
    case REPLY_OK: {
      const [, acknowledged, ...published] = reply as [number, number[], ...number[][]];
      return {
        kind: 'done',
        acknowledged: settled('acknowledge-and-publish', acknowledged),
        published: published.map(publishResult),
      };
    }
    default:
      throw unexpectedReply('acknowledge-and-publish', reply);
  }
}
