import { stampMessages } from '../../broker/message-codec.ts';
import { BulkStrings } from '../binary-command.ts';
import { SEQS_PER_BLOCK } from '../keys.ts';
import { atTurnEnd } from '../turn-end.ts';
import type { TopicKeys } from '../keys.ts';
import type { Scripts } from '../scripts.ts';
import { unexpectedReply } from './codes.ts';
import {
  type PublishCall,
  type PublishResult,
  publish,
  publishArgumentsBeforeBodies,
  publishKeys,
  publishResult,
} from './publish.ts';

/**
 * At most this many publishes go in one publish-batch.lua call. Their bodies are in the call (a
 * publish with more bytes is staged and goes alone), so a batch stays within about a megabyte
 * and a few milliseconds of Redis time.
 */
const MAX_PUBLISHES_PER_BATCH = 64;

interface Waiting {
  data: TopicKeys;
  call: PublishCall;
  resolve(result: PublishResult): void;
  reject(error: unknown): void;
}

/**
 * Publishes to one topic incarnation sent in the same turn of the event loop go to Redis in one
 * script, publish-batch.lua, which stores each as publish.lua alone would and answers each its
 * own reply: a refusal of one (a stamp refused, say) is that publish's alone.
 *
 * Sixteen clients each publishing one message at a time make sixteen scripts, each paying the
 * call itself (its KEYS and ARGV made into Lua strings, the prelude's definitions, reading the
 * topic's state) and a command for the broker to write and parse. Gathered, the requests that
 * arrived together pay those once. A publish waits only for the rest of its turn: the batch is
 * sent once the turn's I/O callbacks are done, just before the Redis socket's writes of the turn
 * leave (turn-end.ts, coalesced-writes.ts); never on a timer.
 *
 * Within a batch, consecutive publishes alike but for their messages are joined into one publish
 * of all their messages (joinedSteps): one step instead of several, or no batch script at all. A
 * refusal of the joined publish (which writes nothing) answers each of them, and each is then
 * sent again as any refused publish is.
 *
 * Only publishes sent alike are gathered: with bodies in the call, no message scheduled for later,
 * and the same KEYS: those whose caller passed the same `sentAlike` object, which it does for
 * publishes to one incarnation against the same attached subscriptions (publish.ts). Any other is
 * sent at once by itself.
 */
export class PublishBatches {
  /** The publishes of this turn, by the object their caller passed as `sentAlike`. */
  private waiting = new Map<object, Waiting[]>();

  constructor(private readonly scripts: Scripts) {}

  publish(data: TopicKeys, call: PublishCall, sentAlike: object): Promise<PublishResult> {
    if (call.staged || (call.scheduled?.length ?? 0) > 0) return publish(this.scripts, data, call);
    return new Promise((resolve, reject) => {
      if (this.waiting.size === 0) atTurnEnd(() => this.sendWaiting());
      let batch = this.waiting.get(sentAlike);
      if (!batch) this.waiting.set(sentAlike, (batch = []));
      batch.push({ data, call, resolve, reject });
    });
  }

  private sendWaiting(): void {
    const batches = this.waiting;
    this.waiting = new Map();
    for (const batch of batches.values()) {
      for (let first = 0; first < batch.length; first += MAX_PUBLISHES_PER_BATCH) {
        this.send(batch.slice(first, first + MAX_PUBLISHES_PER_BATCH));
      }
    }
  }

  private send(batch: Waiting[]): void {
    const steps = joinedSteps(batch);
    const { data } = batch[0];
    const sent =
      steps.length === 1
        ? publish(this.scripts, data, steps[0].call).then((result) => [result])
        : publishBatch(this.scripts, data, steps);
    sent.then(
      (results) => {
        results.forEach((result, i) => {
          answerParts(steps[i], result);
        });
      },
      (error: unknown) => {
        for (const waiting of batch) waiting.reject(error);
      },
    );
  }
}

/** One publish.lua step of a batch: its call, and the publishes it stores, from which message on. */
interface Step {
  call: PublishCall;
  parts: { waiting: Waiting; first: number }[];
}

/**
 * At most this many bytes of bodies are joined into one publish (a publish alone keeps its own
 * size, up to the staging threshold).
 */
const MAX_JOINED_BYTES = 64 * 1024;

/**
 * The batch's publishes as steps: consecutive publishes that are alike but for their messages
 * (the same ordering key, and none with an idempotency key, a filter's selection or a forward ID)
 * are joined into one publish of all their messages, in order, which publish.lua stores as it
 * would store them one after another: consecutive seqs, one reading of the state, one body write,
 * one run of holds. The joined bodies carry the first one's publish time, the one the script
 * checks.
 */
function joinedSteps(batch: readonly Waiting[]): Step[] {
  const steps: Step[] = [];
  let joining: { parts: Step['parts']; calls: PublishCall[]; count: number; bytes: number } | undefined;
  const finish = () => {
    if (!joining) return;
    const [first] = joining.calls;
    if (joining.calls.length === 1) {
      steps.push({ call: first, parts: joining.parts });
    } else {
      const bodies = BulkStrings.joined(joining.calls.map((call) => call.bodies));
      stampMessages(bodies, first.publishTimeUs);
      steps.push({ call: { ...first, bodies, idempotencyKeys: [] }, parts: joining.parts });
    }
    joining = undefined;
  };
  for (const waiting of batch) {
    const { call } = waiting;
    if (!joinable(call)) {
      finish();
      steps.push({ call, parts: [{ waiting, first: 0 }] });
      continue;
    }
    const bytes = call.bodies.bytes.length;
    if (
      joining &&
      (call.orderingKey !== joining.calls[0].orderingKey ||
        call.time !== joining.calls[0].time ||
        joining.count + call.bodies.count > SEQS_PER_BLOCK ||
        joining.bytes + bytes > MAX_JOINED_BYTES)
    ) {
      finish();
    }
    joining ??= { parts: [], calls: [], count: 0, bytes: 0 };
    joining.parts.push({ waiting, first: joining.count });
    joining.calls.push(call);
    joining.count += call.bodies.count;
    joining.bytes += bytes;
  }
  finish();
  return steps;
}

/** A publish that may share a step with others (joinedSteps). */
function joinable(call: PublishCall): boolean {
  return (
    call.forwardId === undefined &&
    (call.idempotencyKeys ?? []).every((key) => key === '') &&
    call.subscriptions.every(({ takes }) => takes === undefined)
  );
}

/** Each publish of a step its part of the step's result: its own seqs, or the refusal they share. */
function answerParts(step: Step, result: PublishResult | Error): void {
  for (const { waiting, first } of step.parts) {
    if (result instanceof Error) waiting.reject(result);
    else if (result.kind !== 'published' || step.parts.length === 1) waiting.resolve(result);
    else {
      const { firstSeq, redisTimeUs } = result;
      waiting.resolve({ kind: 'published', firstSeq: firstSeq + first, redisTimeUs, duplicates: new Map() });
    }
  }
}

/**
 * Runs publish-batch.lua: the publishes' ARGV up to the bodies, each after its count, then every
 * body. Per publish, its result, or the error its step answered.
 */
async function publishBatch(
  scripts: Scripts,
  data: TopicKeys,
  steps: readonly Pick<Step, 'call'>[],
): Promise<(PublishResult | Error)[]> {
  const args = [String(steps.length)];
  for (const { call } of steps) {
    const publishArgs = publishArgumentsBeforeBodies(call);
    args.push(String(publishArgs.length), ...publishArgs);
  }
  const bodies = BulkStrings.joined(steps.map(({ call }) => call.bodies));
  const keys = publishKeys(data, steps[0].call);
  const replies = await scripts.runEncoded('publish-batch', keys, args, bodies);
  if (!Array.isArray(replies) || replies.length !== steps.length) throw unexpectedReply('publish-batch', replies);
  return replies.map((reply) => (reply instanceof Error ? reply : publishResult(reply)));
}
