// A pull of a few small messages is one round trip to Redis: the pull script answers their
// bodies with their leases (pull.lua, ARGV[9]). Bodies of more bytes in all are read after the
// script, with HMGET. Either way every message arrives whole: binary data, attributes and
// ordering key. Counted, never timed: every command the broker sends goes through its Redis
// client (helpers/commands.ts), and a script's own commands are not among them.
import { randomBytes } from 'node:crypto';
import t from 'tap';
import { startBroker } from '../helpers/app.ts';
import { countCommands } from '../helpers/commands.ts';
import { redisTargets } from '../helpers/redis.ts';

const topic = '/v1/projects/p/topics/bodies';
const sub = '/v1/projects/p/subscriptions/bodies-sub';

for (const target of redisTargets()) {
  t.test(`${target.name}: small bodies come with the pull script's answer, larger ones after it`, async (t) => {
    const broker = await startBroker(t, { target, name: 'pull-bodies' });
    await broker.api('PUT', topic, {});
    await broker.api('PUT', sub, { topic: 'projects/p/topics/bodies', enableMessageOrdering: true });
    const pullAll = async (expected: { data: string; attributes: Record<string, string>; orderingKey: string }[]) => {
      const { status } = await broker.api('POST', `${topic}:publish`, { messages: expected });
      t.equal(status, 200, 'published');
      const count = countCommands(broker.redis);
      const pulled = await broker.api('POST', `${sub}:pull`, { maxMessages: 10, returnImmediately: true });
      count.stop();
      const received = (pulled.body.receivedMessages ?? []).map(({ message }: any) => ({
        data: message.data,
        attributes: message.attributes,
        orderingKey: message.orderingKey,
      }));
      t.same(received, expected, 'every message whole, in order');
      const ackIds = pulled.body.receivedMessages.map((m: any) => m.ackId);
      t.equal((await broker.api('POST', `${sub}:acknowledge`, { ackIds })).status, 200);
      return count;
    };
    const messages = (n: number, bytes: number) =>
      Array.from({ length: n }, (_, i) => ({
        data: randomBytes(bytes).toString('base64'),
        attributes: { i: String(i) },
        orderingKey: 'k',
      }));

    await pullAll(messages(1, 10)); // the first pull reads the subscription's record
    const small = await pullAll(messages(3, 1000));
    t.equal(small.total(), 1, 'three small messages: one command, the pull script');
    t.equal(small.of('HMGET'), 0, 'no body read after it');
    const large = await pullAll(messages(3, 8000));
    t.equal(large.of('HMGET'), 1, 'three messages of 8,000 bytes: their bodies read after the script');
  });

  t.test(`${target.name}: small bodies from two body blocks come in order`, async (t) => {
    const broker = await startBroker(t, { target, name: 'pull-bodies-blocks' });
    await broker.api('PUT', topic, {});
    await broker.api('PUT', sub, { topic: 'projects/p/topics/bodies', ackDeadlineSeconds: 60 });
    const publish = async (texts: string[]): Promise<number[]> => {
      const { body } = await broker.api('POST', `${topic}:publish`, {
        messages: texts.map((text) => ({ data: Buffer.from(text).toString('base64') })),
      });
      return body.messageIds.map(Number);
    };
    const pull = async (maxMessages: number) => {
      const { body } = await broker.api('POST', `${sub}:pull`, { maxMessages, returnImmediately: true });
      const received: any[] = body.receivedMessages ?? [];
      await broker.api('POST', `${sub}:acknowledge`, { ackIds: received.map((m) => m.ackId) });
      return received.map((m) => Buffer.from(m.message.data ?? '', 'base64').toString());
    };
    // A message ID is the message's seq, and a body block holds the bodies of 1,000 seqs.
    const [first] = await publish(['first']);
    t.same(await pull(1), ['first']);
    const filler = Array.from({ length: 1000 - ((first + 1) % 1000) - 4 }, (_, i) => `filler ${i}`);
    if (filler.length > 0) {
      // In publishes of 200: a larger publish stages its bodies, and a staged publish takes a block of its own.
      for (let i = 0; i < filler.length; i += 200) await publish(filler.slice(i, i + 200));
      t.equal((await pull(1000)).length, filler.length, 'the block filled up to its last four');
    }
    // A publish's messages share a block: four, then four more, which start the next block.
    const texts = Array.from({ length: 8 }, (_, i) => `message ${i}`);
    const ids = [...(await publish(texts.slice(0, 4))), ...(await publish(texts.slice(4)))];
    t.equal(Math.floor(ids[3] / 1000) + 1, Math.floor(ids[4] / 1000), 'four in one block, four in the next');
    const count = countCommands(broker.redis);
    t.same(await pull(10), texts, 'every body, in order');
    t.equal(count.of('HMGET'), 0, 'with the pull script');
    count.stop();
  });
}
