// A topic's Redis side for tests that look beneath the API (project p): its keys, one pull, and
// a direct call of publish.lua the way DeliveryService.publishTo makes it.

import { parseResourceName } from '../../src/broker/names.ts';
import { layoutMessage, packMessages, stampMessages } from '../../src/broker/message-codec.ts';
import type { BulkStrings } from '../../src/redis/binary-command.ts';
import { b64, type TestBroker } from './app.ts';

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
 * (default: the topic's) and `count` (default 1) can be set wrong on purpose.
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
): Promise<{ reply: number[]; body: Buffer }> {
  const { ctx, record, data } = topic;
  const [uid] = Object.keys(await ctx.redis.hgetall(data.attached));
  const sub = data.subscription(uid);
  const attachVersion = options.attachVersion ?? (await ctx.redis.hget(data.state, 'attachVersion')) ?? '0';
  const packed = packMessages([layoutMessage(b64(options.text))!], { asBlockFields: options.staged }) as BulkStrings;
  stampMessages(packed, options.stampUs);
  const keys = [data.state, data.bodies, data.refs, options.stagingKey, sub.ready, sub.keyed, sub.keyStates];
  const args = [
    '',
    String(options.stampUs),
    attachVersion,
    ctx.keys.wakeChannel(record.uid),
    '',
    '0',
    String(options.count ?? 1),
  ];
  const reply = (await (options.staged
    ? ctx.scripts.runStaged('publish', keys, args, options.stagingKey, packed)
    : ctx.scripts.runEncoded('publish', keys, args, packed))) as number[];
  return { reply, body: packed.at(0) };
}
