// A topic's Redis side for tests that look beneath the API (project p): its keys, one pull, and
// a direct call of publish.lua through its wrapper, the way DeliveryService.publishTo makes it.

import { parseResourceName } from '../../src/broker/names.ts';
import { layoutMessage, packMessages, stampMessages } from '../../src/broker/message-codec.ts';
import { publish, type PublishResult } from '../../src/redis/calls/publish.ts';
import type { Scripts } from '../../src/redis/scripts.ts';
import type { TestBroker } from './app.ts';

/** A topic of project p as the broker stores it: its context, record and data-plane keys. */
export async function topicData(broker: TestBroker, topicId: string) {
  const ctx = broker.app.broker.ctx;
  const record = await broker.app.broker.topics.read(parseResourceName('topics', `projects/p/topics/${topicId}`));
  return { ctx, record, data: ctx.keys.topicData(record.uid) };
}

/** One pull that does not wait (at most 100 messages) of a subscription of project p. */
export async function pullNow(broker: TestBroker, subscriptionId: string): Promise<any[]> {
  const { body } = await broker.api('POST', `/v1/projects/p/subscriptions/${subscriptionId}:pull`, {
    maxMessages: 100,
    returnImmediately: true,
  });
  return body.receivedMessages ?? [];
}

/**
 * Runs publish.lua for one message (`text`) stamped `stampUs`, on a topic with one attached
 * subscription, its bodies staged under `stagingKey` or passed in the call. `attachVersion`
 * (default: the topic's) and `count` (the message count the script is told; default 1) can be
 * set wrong on purpose.
 */
export async function callPublishScript(
  topic: Awaited<ReturnType<typeof topicData>>,
  options: {
    text: string;
    stampUs: number;
    staged: boolean;
    stagingKey: string;
    attachVersion?: string;
    count?: number;
  },
): Promise<{ result: PublishResult; body: Buffer }> {
  const { ctx, record, data } = topic;
  const [uid] = Object.keys(await ctx.redis.hgetall(data.attached));
  const attachVersion = options.attachVersion ?? (await ctx.redis.hget(data.state, 'attachVersion')) ?? '0';
  const packed = packMessages([layoutMessage(Buffer.from(options.text))], { asBlockFields: options.staged });
  stampMessages(packed, options.stampUs);
  const scripts = options.count === undefined ? ctx.scripts : miscounting(ctx.scripts, options.count);
  const result = await publish(scripts, data, {
    time: '',
    publishTimeUs: options.stampUs,
    attachVersion,
    wakeChannel: ctx.keys.wakeChannel(record.uid),
    orderingKey: '',
    subscriptions: [{ uid, ordered: false }],
    bodies: packed,
    staged: options.staged,
    stagingKey: options.stagingKey,
  });
  return { result, body: packed.at(0) };
}

/** `scripts`, but telling publish.lua that a publish holds `count` messages (its ARGV[10]). */
function miscounting(scripts: Scripts, count: number): Scripts {
  const told = (args: string[]) => args.map((arg, i) => (i === 9 ? String(count) : arg));
  return Object.assign(Object.create(scripts) as Scripts, {
    runEncoded: (name, keys, args, trailing) => scripts.runEncoded(name, keys, told(args), trailing),
    runStaged: (name, keys, args, stagingKey, trailing) =>
      scripts.runStaged(name, keys, told(args), stagingKey, trailing),
  } satisfies Pick<Scripts, 'runEncoded' | 'runStaged'>);
}
