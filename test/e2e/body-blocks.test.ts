// Message bodies live in blocks of 1000 seqs: seq b * 1000 + i is field i of the hash b:<b>
// (keys.ts, SCHEMA.md). Large publishes stage their bodies under a key of their own first
// (Scripts.runStaged) and take a new block whole; small ones go on in the latest block while they
// fit. Checked here, on standalone and cluster:
//   - prelude.lua and keys.ts agree on the block size;
//   - small publishes share a block, a large one takes the next, a small one that does not fit
//     starts the next, and one ordering key is delivered in publish order across all of them;
//   - seqs of 15 digits and more (block 10^11 onwards) keep their digits everywhere: message IDs,
//     bodies, ordered keys, acks on exactly-once subscriptions, and nothing is left afterwards;
//   - a staged publish that is refused (deleted incarnation, attachments changed), that has
//     nobody to deliver to, or whose staged bodies are not all there when its script runs
//     leaves no staging key and takes no block;
//   - a staged publish refused for its stamp or for changed attachments is sent again whole;
//   - a staged publish whose bodies did not all arrive answers UNAVAILABLE and stores nothing;
//   - 1000 messages go in one call when they are small (the script unpacks 2000 arguments).
import { readFileSync } from 'node:fs';
import t from 'tap';
import { redisTimeUs } from '../../src/broker/clock.ts';
import { parseResourceName } from '../../src/broker/names.ts';
import { SEQS_PER_BLOCK } from '../../src/redis/keys.ts';
import { packagePath } from '../../src/paths.ts';
import { b64, startBroker, unb64 } from '../helpers/app.ts';
import { redisTargets, scanKeys, storedBodies } from '../helpers/redis.ts';
import { callPublishScript, pullNow, topicData } from '../helpers/topic.ts';

const P = '/v1/projects/p';

t.test('prelude.lua and keys.ts agree on the block size', async (t) => {
  const prelude = readFileSync(packagePath('src', 'lua', 'prelude.lua'), 'utf8');
  t.equal(Number(/^local SEQS_PER_BLOCK = (\d+)$/m.exec(prelude)?.[1]), SEQS_PER_BLOCK);
});

for (const target of redisTargets()) {
  t.test(`${target.name}: seqs of 15 digits and more keep every digit`, async (t) => {
    const broker = await startBroker(t, { target, name: 'big-seqs' });
    t.equal((await broker.api('PUT', `${P}/topics/big`, {})).status, 200);
    const subscriptions = {
      plain: {},
      ordered: { enableMessageOrdering: true },
      'ordered-eo': { enableMessageOrdering: true, enableExactlyOnceDelivery: true },
    };
    for (const [id, settings] of Object.entries(subscriptions)) {
      t.equal(
        (await broker.api('PUT', `${P}/subscriptions/${id}`, { topic: 'projects/p/topics/big', ...settings })).status,
        200,
      );
    }
    const { ctx, data } = await topicData(broker, 'big');
    await ctx.redis.hset(data.state, 'block', '123456789012'); // the next publish takes block 123456789013

    const keyed = await broker.api('POST', `${P}/topics/big:publish`, {
      messages: ['k1', 'k2', 'k3'].map((text) => ({ data: b64(text), orderingKey: 'k' })),
    });
    const unkeyed = await broker.api('POST', `${P}/topics/big:publish`, { messages: [{ data: b64('u') }] });
    t.same(
      keyed.body.messageIds,
      ['123456789013000', '123456789013001', '123456789013002'],
      'message IDs with every digit',
    );
    t.same(unkeyed.body.messageIds, ['123456789013003'], 'a small publish goes on in the same block');
    const ids = [...keyed.body.messageIds, ...unkeyed.body.messageIds];
    t.same([...(await storedBodies(ctx.redis, data)).keys()].sort(), ids, 'each body in its block');

    for (const id of Object.keys(subscriptions)) {
      const first = await pullNow(broker, id);
      // Ordered subscriptions hand out the key's messages together, then the unkeyed one.
      const received = id === 'plain' ? first : [...first, ...(await pullNow(broker, id))];
      t.same(received.map((m) => m.message.messageId).sort(), ids, `${id}: every message once, under its ID`);
      t.same(received.map((m) => unb64(m.message.data)).sort(), ['k1', 'k2', 'k3', 'u'], `${id}: with its own body`);
      const ack = await broker.api('POST', `${P}/subscriptions/${id}:acknowledge`, {
        ackIds: received.map((m) => m.ackId),
      });
      t.same([ack.status, ack.body], [200, {}], `${id}: acked`);
      t.same(await pullNow(broker, id), [], `${id}: nothing comes again`);
    }
    t.equal((await storedBodies(ctx.redis, data)).size, 0, 'every body released');
    for (const id of ['ordered', 'ordered-eo']) {
      const uid = (
        await broker.app.broker.subscriptions.read(parseResourceName('subscriptions', `projects/p/subscriptions/${id}`))
      ).uid;
      const sub = data.subscription(uid);
      t.same(
        [
          await ctx.redis.zcard(sub.keyed),
          await ctx.redis.hlen(sub.keyedDeliveries),
          await ctx.redis.hlen(sub.keyStates),
        ],
        [0, 0, 0],
        `${id}: no keyed state left`,
      );
    }
  });

  t.test(
    `${target.name}: small publishes share a block, a large one takes a block of its own, seqs only grow`,
    async (t) => {
      const broker = await startBroker(t, { target, name: 'shared-blocks', stageBodiesFromBytes: 4096 });
      t.equal((await broker.api('PUT', `${P}/topics/blocks`, {})).status, 200);
      const sub = { topic: 'projects/p/topics/blocks', enableMessageOrdering: true };
      t.equal((await broker.api('PUT', `${P}/subscriptions/blocks`, sub)).status, 200);
      const publish = async (texts: string[]): Promise<string[]> => {
        const { status, body } = await broker.api('POST', `${P}/topics/blocks:publish`, {
          messages: texts.map((text) => ({ data: b64(text), orderingKey: 'k' })),
        });
        t.equal(status, 200);
        return body.messageIds;
      };
      const large = (name: string) => Array.from({ length: 5 }, (_, i) => `${name}-${i}-${'x'.repeat(1000)}`);
      const small1 = await publish(['s1']);
      const small2 = await publish(['s2', 's3']);
      const staged = await publish(large('L'));
      const small3 = await publish(['s4']);
      const { ctx, data } = await topicData(broker, 'blocks');
      await ctx.redis.hset(data.state, 'used', '998'); // two fields left in the latest block
      const tooMany = await publish(['s5', 's6', 's7']);
      t.same([...small1, ...small2], ['1000', '1001', '1002'], 'small publishes go on in one block');
      t.same(staged, ['2000', '2001', '2002', '2003', '2004'], 'a large one takes the next block');
      t.same(small3, ['3000'], 'the small one after it starts another');
      t.same(tooMany, ['4000', '4001', '4002'], 'a small one that does not fit the rest of a block starts the next');
      t.same(
        (await scanKeys(ctx.redis, `${data.bodies}*`)).map((key) => key.slice(data.bodies.length)).sort(),
        ['1', '2', '3', '4'],
        'four block hashes',
      );

      const order: string[] = [];
      for (let round = 0; round < 20 && order.length < 12; round++) {
        const received = await pullNow(broker, 'blocks');
        order.push(...received.map((m) => unb64(m.message.data).split('-').slice(0, 2).join('-')));
        await broker.api('POST', `${P}/subscriptions/blocks:acknowledge`, { ackIds: received.map((m) => m.ackId) });
      }
      t.same(
        order,
        ['s1', 's2', 's3', 'L-0', 'L-1', 'L-2', 'L-3', 'L-4', 's4', 's5', 's6', 's7'],
        'one key, in publish order',
      );
      t.same(await scanKeys(ctx.redis, `${data.bodies}*`), [], 'every block released');
    },
  );

  t.test(`${target.name}: a staged publish that stores nothing leaves no staging key`, async (t) => {
    const broker = await startBroker(t, { target, name: 'staging-left', stageBodiesFromBytes: 0 });
    t.equal((await broker.api('PUT', `${P}/topics/staged`, {})).status, 200);
    const nobody = await broker.api('POST', `${P}/topics/staged:publish`, {
      messages: [{ data: b64('nobody listens') }],
    });
    t.equal(nobody.status, 200, 'a staged publish with no subscription attached is accepted');
    t.equal((await broker.api('PUT', `${P}/subscriptions/staged`, { topic: 'projects/p/topics/staged' })).status, 200);
    const topic = await topicData(broker, 'staged');
    const { ctx, data } = topic;
    const [uid] = Object.keys(await ctx.redis.hgetall(data.attached));
    const sub = data.subscription(uid);
    const version = (await ctx.redis.hget(data.state, 'attachVersion'))!;
    const stagingKey = data.staging('refused');
    const run = (count: number, attachVersion = version) =>
      callPublishScript(topic, {
        text: 'staged',
        stampUs: Date.now() * 1000,
        staged: true,
        stagingKey,
        attachVersion,
        count,
      }).then(({ result }) => result);
    const blockBefore = await ctx.redis.hget(data.state, 'block');

    t.same(await run(1, String(Number(version) + 1)), { kind: 'attachments-changed' }, 'attachments changed: refused');
    t.same(await run(2), { kind: 'staged-bodies-missing' }, 'bodies missing: the script refuses');
    t.equal(await ctx.redis.hget(data.state, 'block'), blockBefore, 'no block taken');
    t.same(await scanKeys(ctx.redis, data.staging('*')), [], 'the broker deleted what it had staged');
    await ctx.redis.hset(data.state, 'deleted', '1');
    t.same(await run(1), { kind: 'topic-deleted' }, 'a deleted incarnation: refused');
    t.same(await scanKeys(ctx.redis, data.staging('*')), [], 'no staging key is left');
    t.equal((await storedBodies(ctx.redis, data)).size, 0, 'and no body stored');
    t.equal(await ctx.redis.llen(sub.ready), 0, 'nothing to deliver');
  });

  t.test(
    `${target.name}: a staged publish refused for its stamp or for changed attachments is sent again whole`,
    async (t) => {
      const broker = await startBroker(t, { target, name: 'staged-retries', stageBodiesFromBytes: 0 });
      t.equal((await broker.api('PUT', `${P}/topics/retries`, {})).status, 200);
      t.equal(
        (await broker.api('PUT', `${P}/subscriptions/retries`, { topic: 'projects/p/topics/retries' })).status,
        200,
      );
      const { ctx, data } = await topicData(broker, 'retries');
      const publish = async (texts: string[]) => {
        const { status, body } = await broker.api('POST', `${P}/topics/retries:publish`, {
          messages: texts.map((text) => ({ data: b64(text) })),
        });
        t.equal(status, 200, JSON.stringify(body));
        return body.messageIds;
      };
      t.same(await publish(['one']), ['1000']);
      ctx.publishClock.observe((await redisTimeUs(ctx.redis)) - 3_600_000_000); // a reading an hour behind: refused once
      t.same(await publish(['two', 'three']), ['2000', '2001'], 'stored after the stamp was refused');
      await ctx.redis.hincrby(data.state, 'attachVersion', 1); // attachments changed behind the broker's back
      t.same(await publish(['four']), ['3000'], 'stored after the attachments were read again');
      const received = await pullNow(broker, 'retries');
      t.same(
        received.map((m) => [m.message.messageId, unb64(m.message.data)]),
        [
          ['1000', 'one'],
          ['2000', 'two'],
          ['2001', 'three'],
          ['3000', 'four'],
        ],
        'each body under its own ID, once',
      );
      t.same(await scanKeys(ctx.redis, data.staging('*')), [], 'no staging key is left');
    },
  );

  t.test(
    `${target.name}: a staged publish whose bodies did not all arrive answers UNAVAILABLE and stores nothing`,
    async (t) => {
      const broker = await startBroker(t, { target, name: 'staged-missing', stageBodiesFromBytes: 0 });
      t.equal((await broker.api('PUT', `${P}/topics/missing`, {})).status, 200);
      t.equal(
        (await broker.api('PUT', `${P}/subscriptions/missing`, { topic: 'projects/p/topics/missing' })).status,
        200,
      );
      const { ctx, data } = await topicData(broker, 'missing');
      // As if the script ran before the HSET (ioredis Cluster retrying commands one by one): the
      // staging key holds fewer bodies than the script is told.
      const runStaged = ctx.scripts.runStaged.bind(ctx.scripts);
      ctx.scripts.runStaged = (name, keys, args, stagingKey, bodies) =>
        runStaged(
          name,
          keys,
          args.map((arg, i) => (i === 9 ? String(Number(arg) + 1) : arg)), // ARGV[10], the message count
          stagingKey,
          bodies,
        );
      const answer = await broker.api('POST', `${P}/topics/missing:publish`, {
        messages: [{ data: b64('one') }, { data: b64('two') }],
      });
      ctx.scripts.runStaged = runStaged;
      t.same(
        [answer.status, answer.body.error?.status],
        [503, 'UNAVAILABLE'],
        'UNAVAILABLE: the client publishes again',
      );
      t.same(await scanKeys(ctx.redis, data.staging('*')), [], 'no staging key is left');
      t.same(await pullNow(broker, 'missing'), [], 'nothing was stored');
      const again = await broker.api('POST', `${P}/topics/missing:publish`, {
        messages: [{ data: b64('one') }, { data: b64('two') }],
      });
      t.equal(again.status, 200, 'publishing again succeeds');
      t.same(
        (await pullNow(broker, 'missing')).map((m) => unb64(m.message.data)),
        ['one', 'two'],
      );
    },
  );

  t.test(`${target.name}: a publish of 1000 small messages in one call`, async (t) => {
    const broker = await startBroker(t, { target, name: 'thousand', stageBodiesFromBytes: Infinity });
    t.equal((await broker.api('PUT', `${P}/topics/thousand`, {})).status, 200);
    t.equal(
      (await broker.api('PUT', `${P}/subscriptions/thousand`, { topic: 'projects/p/topics/thousand' })).status,
      200,
    );
    const texts = Array.from({ length: 1000 }, (_, i) => `m${i}`);
    const published = await broker.api('POST', `${P}/topics/thousand:publish`, {
      messages: texts.map((text) => ({ data: b64(text) })),
    });
    t.equal(published.status, 200);
    t.equal(published.body.messageIds.length, 1000);
    const received: string[] = [];
    for (;;) {
      const { body } = await broker.api('POST', `${P}/subscriptions/thousand:pull`, {
        maxMessages: 1000,
        returnImmediately: true,
      });
      if (!body.receivedMessages) break;
      received.push(...body.receivedMessages.map((m: any) => unb64(m.message.data)));
      await broker.api('POST', `${P}/subscriptions/thousand:acknowledge`, {
        ackIds: body.receivedMessages.map((m: any) => m.ackId),
      });
    }
    t.same(received, texts, 'every message, in order');
  });
}
