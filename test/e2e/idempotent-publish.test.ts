// Idempotent publish: a message with an idempotency key (the REST field `idempotencyKey`, or the
// attribute `pubsub-broker/idempotency-key`) is stored once within its topic's deduplication
// window; a publish of the key again stores nothing and answers the first message ID.
//   - a seeded randomized run per Redis target against a model: random batches with keys from a
//     small pool (also twice in one batch), in both forms, with and without an ordering key,
//     bodies inline and staged, time moved on by a manual clock across the window; every answer
//     is the model's, every subscription (plain, ordered, filtered) receives each stored message
//     once and never the extension attribute, and a seek back on the retaining topic replays
//     each once;
//   - duplicates published at once through two broker nodes store one message;
//   - what is remembered stays bounded, and goes with the topic;
//   - every bad input is refused and stores nothing.
// Replay a failure with SEED=<seed printed by the run>.

import t from 'tap';
import { buildApp } from '../../src/app.ts';
import { ManualClock } from '../../src/broker/clock.ts';
import { b64, jsonApi, startBroker, type TestBroker, unb64 } from '../helpers/app.ts';
import { randomFromEnv } from '../helpers/random.ts';
import { redisTargets, storedBodies, uniquePrefix } from '../helpers/redis.ts';
import { topicData } from '../helpers/topic.ts';

const P = '/v1/projects/p';
const KEY_ATTRIBUTE = 'pubsub-broker/idempotency-key';
const WINDOW_SECONDS = 60;

interface Published {
  id: string;
  text: string;
  color: string;
  orderingKey?: string;
}

/** Pulls and acks everything the subscription has now; its messages in delivery order. */
async function drain(broker: TestBroker, subscription: string) {
  const received: { id: string; text: string; attributes: Record<string, string>; orderingKey?: string }[] = [];
  for (;;) {
    const { body } = await broker.api('POST', `${P}/subscriptions/${subscription}:pull`, {
      maxMessages: 1000,
      returnImmediately: true,
    });
    const batch = body.receivedMessages ?? [];
    if (batch.length === 0) return received;
    for (const { message } of batch) {
      received.push({
        id: message.messageId,
        text: unb64(message.data),
        attributes: message.attributes ?? {},
        orderingKey: message.orderingKey,
      });
    }
    await broker.api('POST', `${P}/subscriptions/${subscription}:acknowledge`, {
      ackIds: batch.map((r: { ackId: string }) => r.ackId),
    });
  }
}

for (const target of redisTargets()) {
  t.test(`${target.name}: each idempotency key is stored once within the window`, async (t) => {
    const random = randomFromEnv(t);
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'idempotent', stageBodiesFromBytes: 2000 });
    const created = await broker.api('PUT', `${P}/topics/orders`, {
      deduplicationWindow: `${WINDOW_SECONDS}s`,
      messageRetentionDuration: '600s',
    });
    t.equal(created.status, 200);
    t.equal(created.body.deduplicationWindow, `${WINDOW_SECONDS}s`, 'the window reads back');
    const topic = 'projects/p/topics/orders';
    await broker.api('PUT', `${P}/subscriptions/plain`, { topic });
    await broker.api('PUT', `${P}/subscriptions/ordered`, { topic, enableMessageOrdering: true });
    await broker.api('PUT', `${P}/subscriptions/reds`, { topic, filter: 'attributes.color = "red"' });
    const startUs = Number(clock.scriptTime());

    const remembered = new Map<string, { id: string; atUs: number }>();
    const stored: Published[] = [];
    const storedIds = new Set<string>();
    for (let round = 0; round < 40; round++) {
      clock.advanceSeconds(random.pick([0, 1, 5, 20, WINDOW_SECONDS - 1, WINDOW_SECONDS + 1]));
      const nowUs = Number(clock.scriptTime());
      const orderingKey = random.chance(0.4) ? `k${random.int(1, 3)}` : undefined;
      const large = random.chance(0.3);
      const messages = Array.from({ length: random.int(1, 8) }, (_, i) => ({
        text: `${round}-${i}`.padEnd(large ? 500 : 6, '.'),
        color: random.pick(['red', 'blue']),
        key: random.chance(0.8) ? `key-${random.int(1, 12)}` : undefined,
        form: random.pick(['field', 'attribute', 'both'] as const),
      }));
      const reply = await broker.api('POST', `${P}/topics/orders:publish`, {
        messages: messages.map(({ text, color, key, form }) => ({
          data: b64(text),
          attributes: { color, ...(key && form !== 'field' ? { [KEY_ATTRIBUTE]: key } : {}) },
          ...(key && form !== 'attribute' ? { idempotencyKey: key } : {}),
          ...(orderingKey ? { orderingKey } : {}),
        })),
      });
      t.equal(reply.status, 200, `publish round ${round}`);
      const ids: string[] = reply.body.messageIds;
      const firstInBatch = new Map<string, string>();
      messages.forEach((message, i) => {
        const known = message.key && remembered.get(message.key);
        const expected =
          (known && nowUs - known.atUs <= WINDOW_SECONDS * 1e6 ? known.id : undefined) ??
          (message.key ? firstInBatch.get(message.key) : undefined);
        if (expected !== undefined) {
          if (ids[i] !== expected) t.fail(`round ${round} message ${i} (${message.key}): ${ids[i]}, not ${expected}`);
          return;
        }
        if (storedIds.has(ids[i])) t.fail(`round ${round} message ${i}: a new message answered an old ID ${ids[i]}`);
        storedIds.add(ids[i]);
        stored.push({ id: ids[i], text: message.text, color: message.color, orderingKey });
        if (message.key) {
          firstInBatch.set(message.key, ids[i]);
          remembered.set(message.key, { id: ids[i], atUs: nowUs });
        }
      });
    }
    t.ok(stored.length < 40 * 4.5, `some publishes were duplicates (${stored.length} stored)`);

    const expectedOf = (filter: (m: Published) => boolean) => stored.filter(filter).map((m) => m.id);
    for (const [subscription, filter] of [
      ['plain', () => true],
      ['ordered', () => true],
      ['reds', (m: Published) => m.color === 'red'],
    ] as const) {
      const received = await drain(broker, subscription);
      t.strictSame(
        received.map((m) => m.id).sort(),
        expectedOf(filter).sort(),
        `${subscription}: each stored message once, no duplicate`,
      );
      t.ok(
        received.every((m) => !(KEY_ATTRIBUTE in m.attributes) && Object.keys(m.attributes).length === 1),
        `${subscription}: the extension attribute is never delivered`,
      );
      const byId = new Map(stored.map((m) => [m.id, m]));
      t.ok(
        received.every((m) => byId.get(m.id)?.text === m.text),
        `${subscription}: each with its first publish's data`,
      );
      if (subscription === 'ordered') {
        for (const key of ['k1', 'k2', 'k3']) {
          t.strictSame(
            received.filter((m) => m.orderingKey === key).map((m) => m.id),
            stored.filter((m) => m.orderingKey === key).map((m) => m.id),
            `ordered: key ${key} in publish order`,
          );
        }
      }
    }
    const seek = await broker.api('POST', `${P}/subscriptions/plain:seek`, {
      time: new Date(startUs / 1000).toISOString(),
    });
    t.equal(seek.status, 200, 'seek back to the start');
    t.strictSame(
      (await drain(broker, 'plain')).map((m) => m.id).sort(),
      expectedOf(() => true).sort(),
      'the replay holds each stored message once',
    );
  });
}

t.test('duplicates published at once through two broker nodes store one message', async (t) => {
  const [target] = redisTargets();
  const redis = target.connect();
  const prefix = uniquePrefix('idempotent-nodes');
  const apps = [await buildApp({ redis, keyPrefix: prefix }), await buildApp({ redis, keyPrefix: prefix })];
  t.teardown(async () => {
    for (const app of apps) await app.close();
    redis.disconnect();
  });
  const [first, second] = apps.map((app) => jsonApi(app));
  await first('PUT', `${P}/topics/nodes`, {});
  await first('PUT', `${P}/subscriptions/nodes-sub`, { topic: 'projects/p/topics/nodes' });
  for (let key = 0; key < 10; key++) {
    const answers = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        (i % 2 ? first : second)('POST', `${P}/topics/nodes:publish`, {
          messages: [{ data: b64(`attempt ${i}`), idempotencyKey: `order-${key}` }],
        }),
      ),
    );
    const ids = new Set(answers.map((answer) => answer.body.messageIds?.[0]));
    t.equal(ids.size, 1, `order-${key}: every attempt answered one message ID`);
  }
  const broker = { api: first } as TestBroker;
  t.equal((await drain(broker, 'nodes-sub')).length, 10, 'ten messages stored, one per key');
});

t.test('what is remembered is bounded, and goes with the topic', async (t) => {
  const clock = new ManualClock();
  const broker = await startBroker(t, { clock, name: 'idempotent-bound' });
  await broker.api('PUT', `${P}/topics/bounded`, { deduplicationWindow: '10s' });
  await broker.api('PUT', `${P}/subscriptions/bounded-sub`, { topic: 'projects/p/topics/bounded' });
  const publishKeys = (keys: string[]) =>
    broker.api('POST', `${P}/topics/bounded:publish`, {
      messages: keys.map((key) => ({ data: b64(key), idempotencyKey: key })),
    });
  t.equal((await publishKeys(Array.from({ length: 100 }, (_, i) => `old-${i}`))).status, 200);
  const { ctx, data } = await topicData(broker, 'bounded');
  t.equal(await ctx.redis.hlen(data.idempotencyKeys), 100, '100 keys remembered');
  const ttl = await ctx.redis.pttl(data.idempotencyKeys);
  t.ok(ttl > 0 && ttl <= 10_000, `both expire a window after the last key (${ttl} ms)`);
  t.ok((await ctx.redis.pttl(data.idempotencyTimes)) > 0);
  clock.advanceSeconds(11);
  for (let i = 0; i < 50; i++) t.equal((await publishKeys([`new-${i}`])).status, 200);
  t.equal(await ctx.redis.hlen(data.idempotencyKeys), 50, 'each publish forgot two expired keys: only the new ones');
  t.equal(await ctx.redis.zcard(data.idempotencyTimes), 50);
  const again = await publishKeys(['old-1']);
  t.equal((await drain(broker, 'bounded-sub')).length, 151, 'a key past the window is stored again');
  t.ok(again.body.messageIds[0], 'with a new ID');

  t.equal((await broker.api('DELETE', `${P}/topics/bounded`)).status, 200);
  t.equal(
    await ctx.redis.exists(data.idempotencyKeys, data.idempotencyTimes),
    0,
    'deleting the topic forgets its keys',
  );
});

t.test('bad idempotency keys and windows are refused and store nothing', async (t) => {
  const broker = await startBroker(t, { name: 'idempotent-bad' });
  await broker.api('PUT', `${P}/topics/strict`, {});
  await broker.api('PUT', `${P}/subscriptions/strict-sub`, { topic: 'projects/p/topics/strict' });
  const publish = (message: object) =>
    broker.api('POST', `${P}/topics/strict:publish`, {
      messages: [{ data: b64('ok') }, { data: b64('x'), ...message }],
    });
  for (const [what, message] of [
    ['an empty key', { idempotencyKey: '' }],
    ['a key of 257 bytes', { idempotencyKey: 'k'.repeat(257) }],
    ['an empty key attribute', { attributes: { [KEY_ATTRIBUTE]: '' } }],
    ['field and attribute that differ', { idempotencyKey: 'a', attributes: { [KEY_ATTRIBUTE]: 'b' } }],
    ['an unknown extension attribute', { attributes: { 'pubsub-broker/deliver-sometime': 'x' } }],
    ['a key that is not a string', { idempotencyKey: 7 }],
    ['a lone surrogate', { idempotencyKey: '\ud800' }],
  ] as const) {
    const reply = await publish(message);
    t.equal(reply.status, 400, `${what}: 400`);
    t.equal(reply.body.error.status, 'INVALID_ARGUMENT', `${what}: ${reply.body.error.message}`);
  }
  t.strictSame(await drain(broker, 'strict-sub'), [], 'nothing of those requests was stored');
  const { ctx, data } = await topicData(broker, 'strict');
  t.equal((await storedBodies(ctx.redis, data)).size, 0);

  const longest = 'k'.repeat(256);
  const ok = await publish({ idempotencyKey: longest });
  t.equal(ok.status, 200, 'a 256-byte key is accepted');
  t.equal((await publish({ idempotencyKey: longest })).body.messageIds[1], ok.body.messageIds[1], 'and remembered');
  t.equal(
    (await publish({ idempotencyKey: 'same', attributes: { [KEY_ATTRIBUTE]: 'same' } })).status,
    200,
    'field and attribute alike are one key',
  );

  for (const window of ['0s', '86401s', '10', 'soon']) {
    const reply = await broker.api('PUT', `${P}/topics/window-${window.length}`, { deduplicationWindow: window });
    t.equal(reply.status, 400, `deduplicationWindow ${window}: 400`);
    t.equal(reply.body.error.status, 'INVALID_ARGUMENT');
  }
  const updated = await broker.api('PATCH', `${P}/topics/strict`, {
    topic: { deduplicationWindow: '86400s' },
    updateMask: 'deduplicationWindow',
  });
  t.equal(updated.status, 200, 'the window can be changed, up to a day');
  t.equal(updated.body.deduplicationWindow, '86400s');
});
