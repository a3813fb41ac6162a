// Publishes to one topic incarnation sent in the same turn of the event loop go to Redis as one
// script (src/redis/calls/publish-batch.ts, publish-batch.lua), each stored as it would be alone.
// On standalone and cluster:
//   - the first publishes to a topic, sent together, read its attached subscriptions once and
//     share a script (or a few: FEW_SCRIPTS);
//   - many concurrent one-message publishes take fewer scripts than publishes, each answers its
//     own message ID, and each message is stored once under that ID with its own data;
//   - the holds flags they leave are those publishes one by one would leave;
//   - their wake-up is one PUBLISH per batch, of the sum of the new messages, and a waiting pull
//     is woken by it;
//   - publishes alike but for their messages are joined into one publish; others (ordering keys,
//     idempotency keys) share the script as steps of their own, each stored as it would be alone;
//   - a publish of a batch that its step refuses (a stale publish time) is refused alone: the
//     others of the batch are stored.
// And without Redis: an error one step answers rejects that publish only.
import t from 'tap';
import { buildApp } from '../../src/app.ts';
import { stampMessages } from '../../src/broker/message-codec.ts';
import { resourceName } from '../../src/broker/names.ts';
import { packChecked } from '../../src/broker/publish-request.ts';
import { PublishBatches } from '../../src/redis/calls/publish-batch.ts';
import type { PublishCall } from '../../src/redis/calls/publish.ts';
import { REPLY_OK } from '../../src/redis/calls/codes.ts';
import { Keys } from '../../src/redis/keys.ts';
import { Scripts } from '../../src/redis/scripts.ts';
import { b64, jsonApi, okApi, unb64 } from '../helpers/app.ts';
import { redisTargets, uniquePrefix, type RedisTarget } from '../helpers/redis.ts';
import { watchScripts } from '../helpers/script-calls.ts';
import { waitUntil } from '../helpers/wait.ts';
import { caller } from '../helpers/work-subscription.ts';
import type { Test } from 'tap';

const P = '/v1/projects/p';
/**
 * The most scripts that publishes sent together may take. One is the rule; the reads that a
 * publish may wait for first (a due reading of the Redis clock, the topic's record) can resume
 * them in different turns of the event loop, which a loaded machine showed (three scripts for
 * twenty publishes). Without batching there would be one per publish.
 */
const FEW_SCRIPTS = 4;
const TOPIC = resourceName('topics', 'p', 'orders');

/** A broker with the topic 'orders' and its subscription 'all'. */
async function ordersBroker(t: Test, target: RedisTarget) {
  const redis = target.connect();
  const app = await buildApp({ redis, keyPrefix: uniquePrefix('publish-batches'), pullWaitMs: 10_000 });
  t.teardown(async () => {
    await app.close();
    redis.disconnect();
  });
  const api = okApi(jsonApi(app));
  await api('PUT', `${P}/topics/orders`, {});
  await api('PUT', `${P}/subscriptions/all`, { topic: 'projects/p/topics/orders', ackDeadlineSeconds: 600 });
  return { app, api };
}

for (const target of redisTargets()) {
  t.test(`${target.name}: the first publishes read the attached subscriptions once, and share a script`, async (t) => {
    const { app } = await ordersBroker(t, target);
    const { redis, keys } = app.broker.ctx;
    const attached = keys.topicData((await app.broker.topics.read(TOPIC)).uid).attached;
    const hgetall = redis.hgetall.bind(redis);
    let readings = 0;
    redis.hgetall = ((key: string) => {
      if (key === attached) readings++;
      return hgetall(key);
    }) as typeof redis.hgetall;
    t.teardown(() => {
      redis.hgetall = hgetall;
    });
    const texts = Array.from({ length: 20 }, (_, i) => `message ${i}`);
    const watch = watchScripts();
    await Promise.all(
      texts.map((text) => app.broker.delivery.publish(caller(), TOPIC, { messages: [{ data: Buffer.from(text) }] })),
    );
    const publishScripts = watch.scripts.filter((name) => name === 'publish' || name === 'publish-batch');
    watch.stop();
    t.equal(readings, 1, 'one reading of the attached subscriptions');
    t.ok(publishScripts.length <= FEW_SCRIPTS, `${publishScripts.length} scripts for ${texts.length} publishes`);
  });

  t.test(`${target.name}: concurrent publishes share scripts, each stored once under its own ID`, async (t) => {
    const { app, api } = await ordersBroker(t, target);
    const record = await app.broker.topics.read(TOPIC);
    const wakes: number[] = [];
    const listener = target.connect();
    t.teardown(() => listener.disconnect());
    // Counts only: on a cluster, the subscription's creation announced on the channel ('config')
    // may reach this node after it subscribed.
    listener.on('message', (_channel: string, count: string) => {
      if (/^\d+$/.test(count)) wakes.push(Number(count));
    });
    await listener.subscribe(app.broker.ctx.keys.wakeChannel(record.uid));

    // A first publish reads the topic's record and attached subscriptions, which the others use.
    await app.broker.delivery.publish(caller(), TOPIC, { messages: [{ data: Buffer.from('first') }] });
    const first = await api('POST', `${P}/subscriptions/all:pull`, { maxMessages: 10, returnImmediately: true });
    t.equal(first.receivedMessages.length, 1);
    // Its wake-up is heard (on a cluster, through another node, perhaps later), then forgotten.
    t.ok(await waitUntil(() => wakes.length > 0, 5_000), 'the first wake-up heard');
    wakes.length = 0;

    // A pull waiting for messages, woken by the batch.
    const waiting = api('POST', `${P}/subscriptions/all:pull`, { maxMessages: 1 });
    await new Promise((resolve) => setTimeout(resolve, 200));

    const texts = Array.from({ length: 40 }, (_, i) => `message ${i}`);
    const watch = watchScripts();
    const answers = await Promise.all(
      texts.map((text) => app.broker.delivery.publish(caller(), TOPIC, { messages: [{ data: Buffer.from(text) }] })),
    );
    const publishScripts = watch.scripts.filter((name) => name === 'publish' || name === 'publish-batch');
    watch.stop();
    // All were sent in one turn, and alike but for their messages, as one publish of all of them.
    t.ok(publishScripts.length <= FEW_SCRIPTS, `${publishScripts.length} scripts for ${texts.length} publishes`);

    const ids = answers.map(({ messageIds }) => {
      t.equal(messageIds.length, 1);
      return messageIds[0];
    });
    t.equal(new Set(ids).size, ids.length, 'each publish has its own message ID');

    // The holds flags are as publishes one by one would have left them: one per message held.
    const data = app.broker.ctx.keys.topicData(record.uid);
    const [subscriptionUid] = Object.keys(await app.broker.ctx.redis.hgetall(data.attached));
    const holds = data.subscription(subscriptionUid);
    const flags = await app.broker.ctx.redis.hgetall(holds.holds);
    const held = (id: string) => flags[String(Math.floor(Number(id) / 1000))]?.[Number(id) % 1000];
    t.same(
      ids.map(held),
      ids.map(() => '1'),
      'every message held',
    );
    t.equal(
      Object.values(flags).reduce((sum, blockFlags) => sum + blockFlags.replaceAll('0', '').length, 0),
      texts.length + 1,
      'and nothing else (but the first message)',
    );
    t.same(
      (await app.broker.ctx.redis.zrange(holds.holdBlocks, 0, -1)).sort(),
      Object.keys(flags).sort(),
      'every block with holds indexed',
    );

    const woken = (await waiting).receivedMessages ?? [];
    t.equal(woken.length, 1, 'the waiting pull was woken');
    const pulled = await api('POST', `${P}/subscriptions/all:pull`, { maxMessages: 100, returnImmediately: true });
    const received = [...woken, ...(pulled.receivedMessages ?? [])];
    const dataById = new Map(received.map((m: any) => [m.message.messageId, unb64(m.message.data)]));
    t.equal(received.length, texts.length, 'every message stored once');
    t.same(
      ids.map((id) => dataById.get(id)),
      texts,
      "each publish's message ID names its own data",
    );

    t.ok(
      await waitUntil(() => wakes.reduce((sum, n) => sum + n, 0) === texts.length, 5_000),
      'wake-ups count them all',
    );
    t.ok(wakes.length <= publishScripts.length, `${wakes.length} wake-ups, one per script at most`);
  });

  t.test(`${target.name}: publishes of all kinds in one batch, each stored as it would be alone`, async (t) => {
    const { app, api } = await ordersBroker(t, target);
    await api('PUT', `${P}/subscriptions/keyed`, { topic: 'projects/p/topics/orders', enableMessageOrdering: true });
    await app.broker.delivery.publish(caller(), TOPIC, { messages: [{ data: Buffer.from('first') }] });
    // Plain ones (joined), ordered ones of two keys, and ones with idempotency keys, one of them
    // given twice: stored once, both answered with its ID.
    const requests = [
      { data: 'plain 1' },
      { data: 'plain 2' },
      { data: 'k1 a', orderingKey: 'k1' },
      { data: 'k1 b', orderingKey: 'k1' },
      { data: 'plain 3' },
      { data: 'k2 a', orderingKey: 'k2' },
      { data: 'once', idempotencyKey: 'same' },
      { data: 'k1 c', orderingKey: 'k1' },
      { data: 'once again', idempotencyKey: 'same' },
      { data: 'plain 4' },
    ];
    const watch = watchScripts();
    const answers = await Promise.all(
      requests.map(({ data, ...rest }) =>
        app.broker.delivery.publish(caller(), TOPIC, { messages: [{ data: Buffer.from(data), ...rest }] }),
      ),
    );
    watch.stop();
    t.same(watch.scripts, ['publish-batch'], 'one script');
    const ids = answers.map(({ messageIds }) => messageIds[0]);
    t.equal(ids[6], ids[8], 'the idempotency key given twice names one message');
    t.equal(new Set(ids).size, requests.length - 1, 'every other publish has its own ID');

    const all = await api('POST', `${P}/subscriptions/all:pull`, { maxMessages: 100, returnImmediately: true });
    const byId = new Map(all.receivedMessages.map((m: any) => [m.message.messageId, m.message]));
    t.equal(byId.size, requests.length, 'first, and each of the others once');
    t.same(
      ids.map((id) => unb64((byId.get(id) as any).data)),
      requests.map(({ data }, i) => (i === 8 ? 'once' : data)),
      "each publish's ID names its own data",
    );
    t.same(
      ids.map((id) => (byId.get(id) as any).orderingKey ?? ''),
      requests.map((request, i) => (i === 8 ? '' : (request.orderingKey ?? ''))),
      'and its own ordering key',
    );
    // The ordered subscription gets each key's messages in publish order.
    const keyed: string[] = [];
    for (let round = 0; round < 20 && keyed.length < 3; round++) {
      const pulled = await api('POST', `${P}/subscriptions/keyed:pull`, { maxMessages: 100, returnImmediately: true });
      const messages = pulled.receivedMessages ?? [];
      for (const m of messages) if (m.message.orderingKey === 'k1') keyed.push(unb64(m.message.data));
      if (messages.length > 0) {
        await api('POST', `${P}/subscriptions/keyed:acknowledge`, { ackIds: messages.map((m: any) => m.ackId) });
      }
    }
    t.same(keyed, ['k1 a', 'k1 b', 'k1 c'], 'one key in order');
  });

  t.test(`${target.name}: a publish its step refuses is refused alone`, async (t) => {
    const { app, api } = await ordersBroker(t, target);
    const { ctx } = app.broker;
    const record = await app.broker.topics.read(TOPIC);
    const data = ctx.keys.topicData(record.uid);
    const [version, attached] = await Promise.all([
      ctx.redis.hget(data.state, 'attachVersion'),
      ctx.redis.hgetall(data.attached),
    ]);
    const nowUs = await ctx.publishClock.stampUs();
    const call = (text: string, publishTimeUs: number): PublishCall => {
      const { bodies } = packChecked([{ data: Buffer.from(text) }], Number.POSITIVE_INFINITY);
      stampMessages(bodies, publishTimeUs);
      return {
        time: '',
        publishTimeUs,
        attachVersion: version ?? '0',
        wakeChannel: ctx.keys.wakeChannel(record.uid),
        orderingKey: '',
        subscriptions: Object.entries(attached).map(([uid, value]) => ({ uid, ordered: value[0] === '1' })),
        bodies,
        staged: false,
        stagingKey: data.staging('unused'),
      };
    };
    const batches = new PublishBatches(ctx.scripts);
    const sentAlike = {};
    const watch = watchScripts();
    // Each with its own ordering key: none joins another.
    const results = await Promise.all([
      batches.publish(data, { ...call('first', nowUs), orderingKey: 'a' }, sentAlike),
      batches.publish(data, { ...call('stale', nowUs - 60_000_000), orderingKey: 'b' }, sentAlike),
      batches.publish(data, { ...call('last', nowUs), orderingKey: 'c' }, sentAlike),
    ]);
    watch.stop();
    t.same(watch.scripts, ['publish-batch'], 'one script');
    t.same(
      results.map(({ kind }) => kind),
      ['published', 'stamp-refused', 'published'],
    );
    const pulled = await api('POST', `${P}/subscriptions/all:pull`, { maxMessages: 10, returnImmediately: true });
    t.same(
      (pulled.receivedMessages ?? []).map((m: any) => unb64(m.message.data)).sort(),
      ['first', 'last'],
      'the others of the batch are stored',
    );
  });
}

t.test('an error one step answers rejects that publish only', async (t) => {
  const scripts = Object.assign(Object.create(Scripts.prototype) as Scripts, {
    runEncoded: async () => [[REPLY_OK, 1000, 5], new Error('publish: something went wrong')],
  });
  const data = new Keys('ps').topicData('0123456789abcdef');
  const call = (): PublishCall => ({
    time: '',
    publishTimeUs: 5,
    attachVersion: '1',
    wakeChannel: 'wake',
    orderingKey: '',
    subscriptions: [],
    bodies: packChecked([{ data: Buffer.from(b64('x')) }], Number.POSITIVE_INFINITY).bodies,
    staged: false,
    stagingKey: data.staging('unused'),
  });
  const batches = new PublishBatches(scripts);
  const sentAlike = {};
  const [stored, failed] = await Promise.allSettled([
    batches.publish(data, call(), sentAlike),
    batches.publish(data, { ...call(), orderingKey: 'another' }, sentAlike),
  ]);
  t.same(stored, {
    status: 'fulfilled',
    value: { kind: 'published', firstSeq: 1000, redisTimeUs: 5, duplicates: new Map() },
  });
  t.equal(failed.status, 'rejected');
  t.match((failed as PromiseRejectedResult).reason, { message: 'publish: something went wrong' });
});
