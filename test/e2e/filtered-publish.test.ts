// Subscription filters as publishing applies them (publish.ts evaluates each attached
// subscription's filter against every message; publish.lua gets which messages each one takes).
// A seeded randomized run per Redis target (standalone, cluster): a topic with subscriptions of
// random filters (or none), ordered or not; random publishes, small (bodies in the call) and
// large (staged bodies), with and without an ordering key. Checked against a model:
//   - every subscription receives exactly the messages its filter matches, each once, and an
//     ordered one in publish order per key;
//   - a message no subscription takes is not stored at all (also checked on its own, with bodies
//     staged and inline), and once everything delivered is
//     acknowledged, no body and no reference count is left;
//   - a subscription whose filter refuses a message never leases it (nothing outstanding).
// Replay a failure with SEED=<seed printed by the run>.

import t from 'tap';
import { parseResourceName } from '../../src/broker/names.ts';
import { b64, startBroker, type TestBroker, unb64 } from '../helpers/app.ts';
import { randomFromEnv } from '../helpers/random.ts';
import { redisTargets, storedBodies } from '../helpers/redis.ts';
import { topicData } from '../helpers/topic.ts';

const P = '/v1/projects/p';

type Attributes = Record<string, string>;

/** Filters and what each means, written independently of the parser. */
const FILTERS: { text: string; matches: (a: Attributes) => boolean }[] = [
  { text: 'attributes.color = "red"', matches: (a) => a.color === 'red' },
  { text: 'attributes:size', matches: (a) => 'size' in a },
  { text: 'attributes.color != "red"', matches: (a) => a.color !== 'red' },
  { text: 'hasPrefix(attributes.color, "bl")', matches: (a) => a.color?.startsWith('bl') === true },
  {
    text: '(attributes.color = "red" OR attributes.color = "blue") AND -attributes:size',
    matches: (a) => (a.color === 'red' || a.color === 'blue') && !('size' in a),
  },
  { text: 'NOT attributes:"my key"', matches: (a) => !('my key' in a) },
  { text: 'attributes:absent', matches: () => false },
];
const COLORS = ['red', 'blue', 'black', 'green'];

for (const target of redisTargets()) {
  t.test(`${target.name}: each subscription receives exactly what its filter matches`, async (t) => {
    const random = randomFromEnv(t);
    // Publishes of more than ~3 KB of bodies are staged (their block is the staging hash, renamed).
    const broker = await startBroker(t, { target, name: 'filters', stageBodiesFromBytes: 3000 });
    t.equal((await broker.api('PUT', `${P}/topics/filtered`, {})).status, 200);
    const subscriptions = Array.from({ length: random.int(2, 5) }, (_, i) => ({
      id: `sub-${i}`,
      filter: random.chance(0.8) ? random.pick(FILTERS) : undefined,
      ordered: random.chance(0.5),
      exactlyOnce: random.chance(0.5),
    }));
    for (const sub of subscriptions) {
      const reply = await broker.api('PUT', `${P}/subscriptions/${sub.id}`, {
        topic: 'projects/p/topics/filtered',
        enableMessageOrdering: sub.ordered,
        enableExactlyOnceDelivery: sub.exactlyOnce,
        ...(sub.filter ? { filter: sub.filter.text } : {}),
      });
      t.equal(reply.status, 200, `create ${sub.id} (${sub.filter?.text ?? 'no filter'})`);
      t.equal(reply.body.filter, sub.filter?.text, 'the filter reads back');
    }
    t.comment(
      subscriptions
        .map(
          (s) =>
            `${s.id}: ${s.filter?.text ?? '-'}${s.ordered ? ' (ordered)' : ''}${s.exactlyOnce ? ' (exactly-once)' : ''}`,
        )
        .join('; '),
    );

    const published: { id: string; text: string; attributes: Attributes; orderingKey?: string }[] = [];
    for (let round = 0; round < 12; round++) {
      const orderingKey = random.chance(0.5) ? `key-${random.int(1, 2)}` : undefined;
      const large = random.chance(0.3);
      const messages = Array.from({ length: random.int(1, 20) }, (_, i) => {
        const attributes: Attributes = {};
        if (random.chance(0.8)) attributes.color = random.pick(COLORS);
        if (random.chance(0.4)) attributes.size = String(random.int(1, 3));
        if (random.chance(0.2)) attributes['my key'] = 'x';
        const text = `${round}-${i}`.padEnd(large ? 400 : 8, '.');
        return { text, attributes };
      });
      const reply = await broker.api('POST', `${P}/topics/filtered:publish`, {
        messages: messages.map(({ text, attributes }) => ({
          data: b64(text),
          ...(Object.keys(attributes).length > 0 ? { attributes } : {}),
          ...(orderingKey ? { orderingKey } : {}),
        })),
      });
      t.equal(reply.status, 200, `publish round ${round}`);
      for (const [i, message] of messages.entries()) {
        published.push({ id: reply.body.messageIds[i], orderingKey, ...message });
      }
    }

    const { ctx, data } = await topicData(broker, 'filtered');
    const wanted = (sub: (typeof subscriptions)[number]) =>
      published.filter((m) => !sub.filter || sub.filter.matches(m.attributes));
    const takenByAnyone = new Set(subscriptions.flatMap((sub) => wanted(sub).map((m) => m.id)));
    t.strictSame(
      [...(await storedBodies(ctx.redis, data)).keys()].sort(),
      [...takenByAnyone].sort(),
      'exactly the bodies some subscription takes are stored',
    );

    for (const sub of subscriptions) {
      const received: { id: string; text: string; orderingKey?: string }[] = [];
      for (let pulls = 0; pulls < 100; pulls++) {
        const { body } = await broker.api('POST', `${P}/subscriptions/${sub.id}:pull`, {
          maxMessages: 1000,
          returnImmediately: true,
        });
        const batch = body.receivedMessages ?? [];
        if (batch.length === 0) break;
        for (const r of batch)
          received.push({ id: r.message.messageId, text: unb64(r.message.data), orderingKey: r.message.orderingKey });
        const acked = await broker.api('POST', `${P}/subscriptions/${sub.id}:acknowledge`, {
          ackIds: batch.map((r: { ackId: string }) => r.ackId),
        });
        t.equal(acked.status, 200);
      }
      const expected = wanted(sub);
      t.strictSame(
        received.map((m) => m.id).sort(),
        expected.map((m) => m.id).sort(),
        `${sub.id}: exactly the matching messages, each once`,
      );
      const byId = new Map(published.map((m) => [m.id, m]));
      t.ok(
        received.every((m) => byId.get(m.id)?.text === m.text),
        `${sub.id}: with their data`,
      );
      if (sub.ordered) {
        for (const key of new Set(expected.map((m) => m.orderingKey).filter(Boolean))) {
          t.strictSame(
            received.filter((m) => m.orderingKey === key).map((m) => m.id),
            expected.filter((m) => m.orderingKey === key).map((m) => m.id),
            `${sub.id}: key ${key} in publish order`,
          );
        }
      }
      t.equal(
        await ctx.redis.zcard(data.subscription(await uidOf(broker, sub.id)).leased),
        0,
        `${sub.id}: nothing leased`,
      );
    }
    t.equal((await storedBodies(ctx.redis, data)).size, 0, 'every body is released once all is acknowledged');
    t.equal(await ctx.redis.hlen(data.refs), 0, 'and no reference count is left');
  });
}

for (const staged of [false, true]) {
  t.test(`a message no subscription takes is not stored (${staged ? 'staged' : 'inline'} bodies)`, async (t) => {
    const broker = await startBroker(t, { name: 'unkept', stageBodiesFromBytes: staged ? 0 : Infinity });
    await broker.api('PUT', `${P}/topics/unkept`, {});
    for (const [id, filter] of [
      ['reds', 'attributes.color = "red"'],
      ['blues', 'attributes.color = "blue"'],
    ]) {
      await broker.api('PUT', `${P}/subscriptions/${id}`, { topic: 'projects/p/topics/unkept', filter });
    }
    const reply = await broker.api('POST', `${P}/topics/unkept:publish`, {
      messages: ['red', 'green', 'blue', 'green'].map((color) => ({ data: b64(color), attributes: { color } })),
    });
    const [red, , blue] = reply.body.messageIds;
    const { ctx, data } = await topicData(broker, 'unkept');
    t.strictSame([...(await storedBodies(ctx.redis, data)).keys()].sort(), [red, blue].sort(), 'only red and blue');
    const none = await broker.api('POST', `${P}/topics/unkept:publish`, {
      messages: [{ data: b64('grey'), attributes: { color: 'grey' } }],
    });
    t.equal(none.status, 200, 'a publish nobody takes succeeds');
    t.equal((await storedBodies(ctx.redis, data)).size, 2, 'and stores nothing');
  });
}

t.test('a filter is checked at create and cannot be changed', async (t) => {
  const broker = await startBroker(t, { name: 'filter-rules' });
  await broker.api('PUT', `${P}/topics/filtered`, {});
  const create = (id: string, filter: unknown) =>
    broker.api('PUT', `${P}/subscriptions/${id}`, { topic: 'projects/p/topics/filtered', filter });
  for (const bad of ['attributes.color = red', 'attributes:', 'hasSuffix(attributes.k, "x")', 'a'.repeat(257)]) {
    const reply = await create('bad', bad);
    t.equal(reply.status, 400, `refused: ${bad.slice(0, 40)}`);
    t.equal(reply.body.error.status, 'INVALID_ARGUMENT');
  }
  t.equal((await broker.api('GET', `${P}/subscriptions/bad`)).status, 404, 'nothing was created');
  t.equal((await create('empty', '')).body.filter, undefined, 'an empty filter is no filter');
  const created = await create('sub', 'attributes:k');
  t.equal(created.body.filter, 'attributes:k');
  const patched = await broker.api('PATCH', `${P}/subscriptions/sub`, {
    subscription: { filter: 'attributes:j' },
    updateMask: 'filter',
  });
  t.equal(patched.status, 400, 'an update of the filter is refused');
  t.equal(patched.body.error.status, 'INVALID_ARGUMENT');
  t.equal((await broker.api('GET', `${P}/subscriptions/sub`)).body.filter, 'attributes:k', 'and changes nothing');
});

async function uidOf(broker: TestBroker, id: string): Promise<string> {
  const name = parseResourceName('subscriptions', `projects/p/subscriptions/${id}`);
  return (await broker.app.broker.subscriptions.read(name)).uid;
}
