// Snapshots and seek to a snapshot (src/broker/snapshots.ts, create-snapshot.lua, seek.lua,
// drop-snapshot.lua), over REST on a ManualClock, on standalone Redis and on Redis Cluster:
//   - a snapshot records what its subscription has not acknowledged; a seek to it brings those
//     back, and everything published after it, on its own subscription or another of the topic;
//     what was acknowledged before it stays acknowledged; leases end (exactly-once: old ack IDs
//     fail);
//   - with ordering, delivery restarts from each key's oldest unacknowledged message, in order;
//   - expireTime is seven days after the oldest unacknowledged message; a snapshot that would
//     expire within an hour is refused; the janitor deletes expired ones;
//   - deleting a snapshot lets go of the bodies it held and of its hold on the log;
//   - get, list (paged), list of a topic, update of labels, delete, and Pub/Sub's errors for
//     bad requests (which change nothing).
import t, { type Test } from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { formatTimestampUs } from '../../src/broker/durations.ts';
import { b64, startBroker, type TestBroker, unb64 } from '../helpers/app.ts';
import { markCleanup } from '../../src/redis/calls/control-plane.ts';
import { createSnapshot as createSnapshotScript } from '../../src/redis/calls/retention.ts';
import { redisTargets, storedBodies } from '../helpers/redis.ts';
import { topicData } from '../helpers/topic.ts';

const P = '/v1/projects/p';
const START_US = Date.UTC(2026, 0, 1) * 1000;
const DAY_S = 24 * 3600;

async function setUp(t: Test, target: ReturnType<typeof redisTargets>[number], name: string) {
  const clock = new ManualClock(START_US);
  const broker = await startBroker(t, { target, clock, name });
  return { clock, broker };
}

async function ok(broker: TestBroker, method: string, path: string, body?: object) {
  const reply = await broker.api(method, `${P}/${path}`, body);
  if (reply.status !== 200) throw new Error(`${method} ${path}: ${JSON.stringify(reply.body)}`);
  return reply.body;
}

const createTopic = (broker: TestBroker, id: string) => ok(broker, 'PUT', `topics/${id}`, {});
const createSubscription = (broker: TestBroker, id: string, topic: string, settings: object = {}) =>
  ok(broker, 'PUT', `subscriptions/${id}`, { topic: `projects/p/topics/${topic}`, ...settings });
const createSnapshot = (broker: TestBroker, id: string, sub: string, extra: object = {}) =>
  broker.api('PUT', `${P}/snapshots/${id}`, { subscription: `projects/p/subscriptions/${sub}`, ...extra });
const seekToSnapshot = (broker: TestBroker, sub: string, snapshot: string) =>
  broker.api('POST', `${P}/subscriptions/${sub}:seek`, { snapshot: `projects/p/snapshots/${snapshot}` });

async function publish(broker: TestBroker, topic: string, texts: string[], extra: object = {}): Promise<string[]> {
  const body = await ok(broker, 'POST', `topics/${topic}:publish`, {
    messages: texts.map((text) => ({ data: b64(text), ...extra })),
  });
  return body.messageIds;
}

async function pull(broker: TestBroker, sub: string, max = 100): Promise<{ ackId: string; text: string }[]> {
  const body = await ok(broker, 'POST', `subscriptions/${sub}:pull`, { maxMessages: max, returnImmediately: true });
  return (body.receivedMessages ?? []).map((m: any) => ({ ackId: m.ackId, text: unb64(m.message.data) }));
}

const ack = (broker: TestBroker, sub: string, ackIds: string[]) =>
  broker.api('POST', `${P}/subscriptions/${sub}:acknowledge`, { ackIds });

const texts = (received: { text: string }[]) => received.map((m) => m.text).sort();

async function drain(broker: TestBroker, sub: string): Promise<string[]> {
  const received = await pull(broker, sub);
  if (received.length > 0)
    await ack(
      broker,
      sub,
      received.map((m) => m.ackId),
    );
  return texts(received);
}

for (const target of redisTargets()) {
  t.test(
    `${target.name}: a seek to a snapshot brings back its unacknowledged messages and what came after`,
    async (t) => {
      const { clock, broker } = await setUp(t, target, 'snap-back');
      await createTopic(broker, 'back');
      await createSubscription(broker, 'source', 'back', { enableExactlyOnceDelivery: true });
      await publish(broker, 'back', ['acked-before', 'leased', 'waiting']);
      const first = await pull(broker, 'source', 2);
      const acked = first.find((m) => m.text === 'acked-before')!;
      const leased = first.find((m) => m.text === 'leased')!;
      t.ok(acked && leased, 'pulled the first two');
      t.equal((await ack(broker, 'source', [acked.ackId])).status, 200);
      clock.advanceSeconds(1);
      const created = await createSnapshot(broker, 'snap', 'source', { labels: { team: 'a' } });
      t.equal(created.status, 200, JSON.stringify(created.body));
      t.same(created.body, {
        name: 'projects/p/snapshots/snap',
        topic: 'projects/p/topics/back',
        expireTime: formatTimestampUs(START_US + 7 * DAY_S * 1_000_000),
        labels: { team: 'a' },
      });
      clock.advanceSeconds(1);
      await publish(broker, 'back', ['after']);
      t.same(await drain(broker, 'source'), ['after', 'waiting'], 'the rest delivered');
      t.equal((await ack(broker, 'source', [leased.ackId])).status, 200, 'and the leased one acknowledged');
      t.same(await pull(broker, 'source'), [], 'nothing left');

      const seek = await seekToSnapshot(broker, 'source', 'snap');
      t.same([seek.status, seek.body], [200, {}], 'the seek answers {}');
      const again = await pull(broker, 'source');
      t.same(texts(again), ['after', 'leased', 'waiting'], 'unacknowledged at the snapshot, and published after it');
      t.same(await pull(broker, 'source'), [], 'each once');

      // A second seek to it ends these leases: their ack IDs fail, the messages come once more.
      t.equal((await seekToSnapshot(broker, 'source', 'snap')).status, 200);
      const stale = await ack(broker, 'source', [again[0].ackId]);
      t.equal(stale.status, 400, 'a lease the seek ended cannot be acknowledged');
      t.same(texts(await pull(broker, 'source')), ['after', 'leased', 'waiting'], 'all three again');
    },
  );

  t.test(`${target.name}: another subscription of the topic seeks to the snapshot`, async (t) => {
    const { clock, broker } = await setUp(t, target, 'snap-other');
    await createTopic(broker, 'shared');
    await createSubscription(broker, 'source', 'shared');
    await publish(broker, 'shared', ['one', 'two']);
    t.same(await drain(broker, 'source'), ['one', 'two']);
    await publish(broker, 'shared', ['three']);
    clock.advanceSeconds(1);
    t.equal((await createSnapshot(broker, 'snap', 'source')).status, 200);
    // Created after the snapshot: it never received 'three' nor 'four'.
    await createSubscription(broker, 'later', 'shared');
    clock.advanceSeconds(1);
    await publish(broker, 'shared', ['four']);
    await publish(broker, 'shared', ['five']);
    t.same(await drain(broker, 'later'), ['five', 'four']);
    t.equal((await seekToSnapshot(broker, 'later', 'snap')).status, 200);
    t.same(await drain(broker, 'later'), ['five', 'four', 'three'], "the snapshot's state");
    t.same(await drain(broker, 'source'), ['five', 'four', 'three'], 'the source is unchanged by it');
  });

  t.test(
    `${target.name}: a filtered subscription made after the snapshot takes what its filter takes of it`,
    async (t) => {
      const { clock, broker } = await setUp(t, target, 'snap-filtered');
      await createTopic(broker, 'colours');
      const red = { filter: 'attributes.colour = "red"' };
      await createSubscription(broker, 'source', 'colours', red);
      await publish(broker, 'colours', ['red-1'], { attributes: { colour: 'red' } });
      await publish(broker, 'colours', ['blue-1'], { attributes: { colour: 'blue' } });
      clock.advanceSeconds(1);
      t.equal((await createSnapshot(broker, 'snap', 'source')).status, 200);
      await publish(broker, 'colours', ['red-2'], { attributes: { colour: 'red' } });
      await publish(broker, 'colours', ['blue-2'], { attributes: { colour: 'blue' } });
      // Created after those: publish never selected them for it.
      await createSubscription(broker, 'later', 'colours', red);
      await publish(broker, 'colours', ['red-3'], { attributes: { colour: 'red' } });
      t.same(await drain(broker, 'later'), ['red-3']);
      t.equal((await seekToSnapshot(broker, 'later', 'snap')).status, 200);
      t.same(
        await drain(broker, 'later'),
        ['red-1', 'red-2', 'red-3'],
        "the snapshot's, and of what came after it the messages its filter takes",
      );
    },
  );

  t.test(`${target.name}: ordering keys restart from the snapshot's oldest message of each key`, async (t) => {
    const { clock, broker } = await setUp(t, target, 'snap-ordered');
    await createTopic(broker, 'ordered');
    await createSubscription(broker, 'ordered', 'ordered', { enableMessageOrdering: true });
    await publish(broker, 'ordered', ['a1', 'a2'], { orderingKey: 'a' });
    await publish(broker, 'ordered', ['b1'], { orderingKey: 'b' });
    const first = await pull(broker, 'ordered');
    await ack(
      broker,
      'ordered',
      first.filter((m) => m.text === 'a1').map((m) => m.ackId),
    );
    clock.advanceSeconds(1);
    t.equal((await createSnapshot(broker, 'snap', 'ordered')).status, 200);
    await publish(broker, 'ordered', ['a3'], { orderingKey: 'a' });
    for (let round = 0; round < 4; round++) await drain(broker, 'ordered');
    t.same(await pull(broker, 'ordered'), [], 'all acknowledged');
    t.equal((await seekToSnapshot(broker, 'ordered', 'snap')).status, 200);
    const order: string[] = [];
    for (let round = 0; round < 5; round++) {
      const received = await pull(broker, 'ordered');
      order.push(...received.map((m) => m.text));
      await ack(
        broker,
        'ordered',
        received.map((m) => m.ackId),
      );
    }
    t.same(
      order.filter((text) => text.startsWith('a')),
      ['a2', 'a3'],
      'key a from its oldest unacknowledged message at the snapshot, in order',
    );
    t.same(
      order.filter((text) => text.startsWith('b')),
      ['b1'],
      'key b',
    );
  });

  t.test(`${target.name}: deleting a snapshot lets go of what it held`, async (t) => {
    const { clock, broker } = await setUp(t, target, 'snap-delete');
    await createTopic(broker, 'held');
    await createSubscription(broker, 'held', 'held');
    await publish(broker, 'held', ['x', 'y']);
    t.equal((await createSnapshot(broker, 'snap', 'held')).status, 200);
    clock.advanceSeconds(1);
    await publish(broker, 'held', ['z']);
    t.same(await drain(broker, 'held'), ['x', 'y', 'z']);
    const { data, ctx } = await topicData(broker, 'held');
    t.equal((await storedBodies(ctx.redis, data)).size, 3, 'the snapshot keeps the bodies');
    t.ok(await ctx.redis.hget(data.state, 'retainUs'), 'and the topic retains for it');
    t.equal((await broker.api('DELETE', `${P}/snapshots/snap`)).status, 200);
    t.equal((await storedBodies(ctx.redis, data)).size, 1, 'its own bodies go at once');
    t.equal(await ctx.redis.hget(data.state, 'retainUs'), null, 'the topic retains no more');
    clock.advanceSeconds(601);
    await broker.app.broker.collectGarbage();
    t.equal((await storedBodies(ctx.redis, data)).size, 0, "and the log's go with the janitor");
    t.equal((await seekToSnapshot(broker, 'held', 'snap')).status, 404, 'it is no seek target');
  });

  t.test(`${target.name}: a snapshot whose create never finished is let go by the janitor`, async (t) => {
    const { broker } = await setUp(t, target, 'snap-unfinished');
    await createTopic(broker, 'orphan');
    await createSubscription(broker, 'orphan', 'orphan');
    await publish(broker, 'orphan', ['x', 'y']);
    const { data, ctx, record } = await topicData(broker, 'orphan');
    const topicUid = record.uid;
    const subscription = JSON.parse((await ctx.redis.hget(ctx.keys.subscriptions, 'projects/p/subscriptions/orphan'))!);
    // Captured and marked, as a create does, and then nothing more: the broker stopped there.
    const snapshot = data.snapshot('feedfacefeedface');
    await markCleanup(ctx.scripts, ctx.keys, {
      time: ctx.clock.scriptTime(),
      ref: `${topicUid}/feedfacefeedface/projects/p/snapshots/orphan`,
    });
    await createSnapshotScript(ctx.scripts, data, {
      time: ctx.clock.scriptTime(),
      subscriptionUid: subscription.uid,
      snapshot,
      maxLifeUs: 7 * DAY_S * 1_000_000,
    });
    t.equal(await ctx.redis.hlen(data.refs), 2, 'the capture holds both bodies');
    t.equal(await broker.app.broker.controlPlane.collectGarbage(Number.MAX_SAFE_INTEGER), 1, 'one dropped');
    t.same(
      [await ctx.redis.exists(snapshot.held, snapshot.info), await ctx.redis.hlen(data.refs)],
      [0, 0],
      'its data and references are gone',
    );
    t.equal(await ctx.redis.hget(data.state, 'retainUs'), null, 'and its hold on the log');
    t.same(await drain(broker, 'orphan'), ['x', 'y'], 'the subscription is as it was');
    t.equal((await storedBodies(ctx.redis, data)).size, 0, 'acknowledged, the bodies go');
  });

  t.test(`${target.name}: a snapshot holding many blocks is let go whole, a few blocks per call`, async (t) => {
    const { broker } = await setUp(t, target, 'snap-many-blocks');
    await createTopic(broker, 'wide');
    const { data, ctx, record } = await topicData(broker, 'wide');
    // More blocks than Redis keeps in a compact hash (128 by default): a hash table, whose
    // emptied first buckets a scan from the start would find again and again.
    const snapshot = data.snapshot('0123456789abcdef');
    const fields = Array.from({ length: 300 }, (_, i) => [String(i + 1), '0'.repeat(1000)]).flat();
    await ctx.redis.hset(snapshot.held, ...fields);
    await ctx.redis.hset(snapshot.info, 'cut', '1000');
    await broker.app.broker.controlPlane.dropSnapshotData(
      broker.app.broker.regions.local,
      record.uid,
      '0123456789abcdef',
    );
    t.same(await ctx.redis.exists(snapshot.held, snapshot.info), 0, 'every block released');
  });

  t.test(`${target.name}: expireTime follows the oldest message; the janitor deletes it then`, async (t) => {
    const { clock, broker } = await setUp(t, target, 'snap-expire');
    await createTopic(broker, 'aging');
    await createSubscription(broker, 'aging', 'aging', { messageRetentionDuration: `${7 * DAY_S}s` });
    await publish(broker, 'aging', ['old']);
    clock.advanceSeconds(2 * DAY_S);
    const made = await createSnapshot(broker, 'snap', 'aging');
    t.equal(made.body.expireTime, formatTimestampUs(START_US + 7 * DAY_S * 1_000_000), 'seven days after "old"');
    clock.advanceSeconds(5 * DAY_S - 1800);
    const late = await createSnapshot(broker, 'late', 'aging');
    t.equal(late.status, 400, 'half an hour of life left: refused');
    t.equal(late.body.error.status, 'FAILED_PRECONDITION');
    t.equal((await broker.api('GET', `${P}/snapshots/late`)).status, 404, 'and not made');
    await broker.app.broker.collectGarbage();
    t.equal((await broker.api('GET', `${P}/snapshots/snap`)).status, 200, 'not expired yet');
    clock.advanceSeconds(1801);
    await broker.app.broker.collectGarbage();
    t.equal((await broker.api('GET', `${P}/snapshots/snap`)).status, 404, 'deleted once expired');
  });

  t.test(`${target.name}: get, list, update, delete, and refused requests`, async (t) => {
    const { broker } = await setUp(t, target, 'snap-crud');
    await createTopic(broker, 'crud');
    await createTopic(broker, 'other');
    await createSubscription(broker, 'crud', 'crud');
    await createSubscription(broker, 'elsewhere', 'other');
    await createSubscription(broker, 'filtered', 'crud', { filter: 'attributes.k = "v"' });
    for (const id of ['s-1', 's-2', 's-3']) t.equal((await createSnapshot(broker, id, 'crud')).status, 200);
    const got = await broker.api('GET', `${P}/snapshots/s-1`);
    t.same(Object.keys(got.body).sort(), ['expireTime', 'name', 'topic']);
    const firstPage = await broker.api('GET', `${P}/snapshots?pageSize=2`);
    t.same(
      firstPage.body.snapshots.map((s: any) => s.name),
      ['projects/p/snapshots/s-1', 'projects/p/snapshots/s-2'],
    );
    const secondPage = await broker.api('GET', `${P}/snapshots?pageSize=2&pageToken=${firstPage.body.nextPageToken}`);
    t.same(secondPage.body, { snapshots: [{ ...got.body, name: 'projects/p/snapshots/s-3' }] }, 'the last page');
    t.same((await broker.api('GET', `${P}/topics/crud/snapshots`)).body, {
      snapshots: ['projects/p/snapshots/s-1', 'projects/p/snapshots/s-2', 'projects/p/snapshots/s-3'],
    });
    t.same((await broker.api('GET', `${P}/topics/other/snapshots`)).body, {}, 'none of another topic');
    const updated = await broker.api('PATCH', `${P}/snapshots/s-1`, {
      snapshot: { labels: { env: 'test' } },
      updateMask: 'labels',
    });
    t.same(updated.body, { ...got.body, labels: { env: 'test' } }, 'labels updated');

    const refused: [string, string, string, object | undefined, number, string][] = [
      ['exists', 'PUT', 'snapshots/s-1', { subscription: 'projects/p/subscriptions/crud' }, 409, 'ALREADY_EXISTS'],
      ['no subscription', 'PUT', 'snapshots/s-4', {}, 400, 'INVALID_ARGUMENT'],
      [
        'unknown subscription',
        'PUT',
        'snapshots/s-4',
        { subscription: 'projects/p/subscriptions/nope' },
        404,
        'NOT_FOUND',
      ],
      ['bad name', 'PUT', 'snapshots/x', { subscription: 'projects/p/subscriptions/crud' }, 400, 'INVALID_ARGUMENT'],
      [
        'unknown field',
        'PUT',
        'snapshots/s-4',
        { subscription: 'projects/p/subscriptions/crud', x: 1 },
        400,
        'INVALID_ARGUMENT',
      ],
      [
        'tags',
        'PUT',
        'snapshots/s-4',
        { subscription: 'projects/p/subscriptions/crud', tags: { a: 'b' } },
        501,
        'UNIMPLEMENTED',
      ],
      [
        'expireTime update',
        'PATCH',
        'snapshots/s-1',
        { snapshot: {}, updateMask: 'expireTime' },
        400,
        'INVALID_ARGUMENT',
      ],
      ['empty mask', 'PATCH', 'snapshots/s-1', { snapshot: {} }, 400, 'INVALID_ARGUMENT'],
      ['unknown snapshot', 'GET', 'snapshots/nope', undefined, 404, 'NOT_FOUND'],
      ['unknown topic', 'GET', 'topics/nope/snapshots', undefined, 404, 'NOT_FOUND'],
      [
        'another topic',
        'POST',
        'subscriptions/elsewhere:seek',
        { snapshot: 'projects/p/snapshots/s-1' },
        400,
        'FAILED_PRECONDITION',
      ],
      [
        'another filter',
        'POST',
        'subscriptions/filtered:seek',
        { snapshot: 'projects/p/snapshots/s-1' },
        400,
        'FAILED_PRECONDITION',
      ],
      ['malformed snapshot', 'POST', 'subscriptions/crud:seek', { snapshot: 'snap' }, 400, 'INVALID_ARGUMENT'],
      [
        'missing snapshot',
        'POST',
        'subscriptions/crud:seek',
        { snapshot: 'projects/p/snapshots/nope' },
        404,
        'NOT_FOUND',
      ],
      ['delete unknown', 'DELETE', 'snapshots/nope', undefined, 404, 'NOT_FOUND'],
    ];
    for (const [what, method, path, body, status, code] of refused) {
      const reply = await broker.api(method, `${P}/${path}`, body);
      t.same([reply.status, reply.body.error?.status], [status, code], what);
    }
    t.same((await broker.api('GET', `${P}/snapshots`)).body.snapshots.length, 3, 'nothing changed');
    t.equal((await broker.api('DELETE', `${P}/snapshots/s-2`)).status, 200);
    t.equal((await broker.api('GET', `${P}/snapshots/s-2`)).status, 404, 'deleted');
    t.equal((await createSnapshot(broker, 's-2', 'crud')).status, 200, 'and its name made again');
    t.equal((await broker.api('DELETE', `${P}/topics/crud`)).status, 200);
    t.equal(
      (await broker.api('GET', `${P}/snapshots/s-1`)).body.topic,
      '_deleted-topic_',
      "a deleted topic's snapshot names no topic",
    );
  });
}
