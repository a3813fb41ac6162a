import { BulkStrings } from '../binary-command.ts';
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
 * sent from setImmediate, which runs once the turn's I/O callbacks are done, when the Redis
 * socket's writes of the turn leave too (coalesced-writes.ts); never on a timer.
 *
 * Only publishes sent alike are gathered: with bodies in the call, no message scheduled for later,
 * and the same KEYS: those whose caller passed the same `sentAlike` object, which it does for
 * publishes to one incarnation against the same attached subscriptions (publish.ts), and of one
 * incarnation (checked). Any other is sent at once by itself.
 */
export class PublishBatches {
  /** The publishes of this turn, by the object their caller passed as `sentAlike`. */
  private waiting = new Map<object, Waiting[]>();

  constructor(private readonly scripts: Scripts) {}

  publish(data: TopicKeys, call: PublishCall, sentAlike: object): Promise<PublishResult> {
    if (call.staged || (call.scheduled?.length ?? 0) > 0) return publish(this.scripts, data, call);
    return new Promise((resolve, reject) => {
      if (this.waiting.size === 0) setImmediate(() => this.sendWaiting());
      let batch = this.waiting.get(sentAlike);
      if (!batch) this.waiting.set(sentAlike, (batch = []));
      // Not of the batch's incarnation after all: by itself.
      else if (batch[0].data.state !== data.state) return publish(this.scripts, data, call).then(resolve, reject);
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
    if (batch.length === 1) {
      const [{ data, call, resolve, reject }] = batch;
      publish(this.scripts, data, call).then(resolve, reject);
      return;
    }
    publishBatch(this.scripts, batch).then(
      (results) => {
        results.forEach((result, i) => {
          if (result instanceof Error) batch[i].reject(result);
          else batch[i].resolve(result);
        });
      },
      (error: unknown) => {
        for (const waiting of batch) waiting.reject(error);
      },
    );
  }
}

/**
 * Runs publish-batch.lua: the publishes' ARGV up to the bodies, each after its count, then every
 * body. Per publish, its result, or the error its step answered.
 */
async function publishBatch(
  scripts: Scripts,
  batch: readonly Pick<Waiting, 'data' | 'call'>[],
): Promise<(PublishResult | Error)[]> {
  const args = [String(batch.length)];
  for (const { call } of batch) {
    const publishArgs = publishArgumentsBeforeBodies(call);
    args.push(String(publishArgs.length), ...publishArgs);
  }
  const bodies = BulkStrings.joined(batch.map(({ call }) => call.bodies));
  const keys = publishKeys(batch[0].data, batch[0].call);
  const replies = await scripts.runEncoded('publish-batch', keys, args, bodies);
  if (!Array.isArray(replies) || replies.length !== batch.length) throw unexpectedReply('publish-batch', replies);
  return replies.map((reply) => (reply instanceof Error ? reply : publishResult(reply)));
}
