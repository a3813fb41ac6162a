// DetachSubscription over REST (POST .../subscriptions/{s}:detach): the subscription stops
// receiving its topic's messages, its backlog (ready and leased) is dropped from Redis, it stays
// (get, list) with `detached: true` but is no longer listed under its topic, and pulls, acks
// and deadline changes on it fail with FAILED_PRECONDITION. Detaching is idempotent; a PATCH
// keeps it detached; deleting it ends it. Every refused request is followed by a read-back
// showing that nothing changed.

import t, { type Test } from 'tap';
import { startBroker } from '../helpers/app.ts';
import { redisTargets, scanKeys, type RedisTarget } from '../helpers/redis.ts';
import { attachSubscription, markCleanup } from '../../src/redis/calls/control-plane.ts';
import { Keys } from '../../src/redis/keys.ts';
import type { SubscriptionRecord } from '../../src/broker/records.ts';
import {
  b64,
  badResourceName,
  type Client,
  checkMessageIds,
  failedPrecondition,
  invalid,
  normalisePull,
  notAnObject,
  notFound,
  client as clientOf,
  openClient,
  subscriptionBody,
  unknownField,
} from './_support.ts';

const [standalone] = redisTargets();
const P = 'detach-project';
const T = `/v1/projects/${P}/topics`;
const S = `/v1/projects/${P}/subscriptions`;
const TOPIC = `projects/${P}/topics/d-topic`;
const detachedError = (id: string) =>
  failedPrecondition(
    `The subscription projects/${P}/subscriptions/${id} is detached from its topic: it has no messages to pull or acknowledge.`,
  );

async function record({ broker }: Client, id: string): Promise<SubscriptionRecord> {
  const keys = new Keys(broker.prefix);
  return JSON.parse((await broker.redis.hget(keys.subscriptions, `projects/${P}/subscriptions/${id}`)) ?? 'null');
}

/** Every data-plane key of one subscription incarnation, and whether it is in its topic's attached set. */
async function dataOf(client: Client, id: string) {
  const { topicUid, uid } = await record(client, id);
  const data = new Keys(client.broker.prefix).topicData(topicUid);
  const keys = await scanKeys(client.broker.redis, `${data.subscription(uid).config.replace(/config$/, '')}*`);
  return { keys, attached: (await client.broker.redis.hget(data.attached, uid)) !== null };
}

async function publish({ api }: Client, ...texts: string[]): Promise<string[]> {
  const reply = await api('POST', `${T}/d-topic:publish`, { messages: texts.map((text) => ({ data: b64(text) })) });
  return checkMessageIds(reply, texts.length);
}

async function pullTexts({ api }: Client, id: string, max = 10): Promise<{ texts: string[]; ackIds: string[] }> {
  const reply = await api('POST', `${S}/${id}:pull`, { maxMessages: max, returnImmediately: true });
  if (reply.status !== 200) throw new Error(`pull ${id}: ${reply.status} ${JSON.stringify(reply.body)}`);
  const { ackIds } = normalisePull(reply.body);
  const texts = (reply.body.receivedMessages ?? []).map((m: any) => Buffer.from(m.message.data, 'base64').toString());
  return { texts, ackIds };
}

/** Creates the topic, and the subscriptions `ids` on it, through `client`. */
async function withSubscriptions(client: Client, ...ids: string[]): Promise<Client> {
  await client.api('PUT', `${T}/d-topic`, {});
  for (const id of ids) await client.api('PUT', `${S}/${id}`, { topic: TOPIC });
  return client;
}

async function detachSemantics(t: Test, target: RedisTarget) {
  const client = await withSubscriptions(await openClient(t, target, `detach-${target.name}`), 'gone', 'kept');
  const { api } = client;
  const eod = { enableExactlyOnceDelivery: true };
  await api('PUT', `${S}/gone-eod`, { topic: TOPIC, ...eod });
  await publish(client, 'one', 'two', 'three');
  // One message of each detached subscription stays leased, the others ready.
  const leased = await pullTexts(client, 'gone', 1);
  const leasedEod = await pullTexts(client, 'gone-eod', 1);
  t.equal(leased.ackIds.length, 1, 'a message is leased before the detach');
  t.ok((await dataOf(client, 'gone')).keys.length > 0, 'the backlog is in Redis before the detach');

  t.strictSame(await api('POST', `${S}/gone:detach`, {}), { status: 200, body: {} }, 'detach answers {}');
  t.strictSame(
    await client.raw({ method: 'POST', url: `${S}/gone-eod:detach` }),
    { status: 200, body: {} },
    'a detach without a body',
  );

  t.strictSame(
    await api('GET', `${S}/gone`),
    { status: 200, body: subscriptionBody(P, 'gone', TOPIC, { detached: true }) },
    'get: detached',
  );
  const listed = await api('GET', S);
  t.strictSame(
    listed.body.subscriptions.map((s: any) => [s.name.split('/').at(-1), s.detached ?? false]),
    [
      ['gone', true],
      ['gone-eod', true],
      ['kept', false],
    ],
    'ListSubscriptions still lists them, detached',
  );
  t.strictSame(
    await api('GET', `${T}/d-topic/subscriptions`),
    { status: 200, body: { subscriptions: [`projects/${P}/subscriptions/kept`] } },
    'ListTopicSubscriptions lists only the attached one',
  );

  for (const id of ['gone', 'gone-eod']) {
    t.strictSame(
      await dataOf(client, id),
      { keys: [], attached: false },
      `${id}: its backlog is dropped and it is no longer attached`,
    );
  }
  t.strictSame(
    await api('POST', `${S}/gone:pull`, { maxMessages: 5, returnImmediately: true }),
    { status: 400, body: detachedError('gone') },
    'pull: FAILED_PRECONDITION',
  );
  t.strictSame(
    await api('POST', `${S}/gone:pull`, { maxMessages: 5 }),
    { status: 400, body: detachedError('gone') },
    'a long-polling pull too',
  );
  for (const [id, ackId] of [
    ['gone', leased.ackIds[0]],
    ['gone-eod', leasedEod.ackIds[0]],
  ]) {
    t.strictSame(
      await api('POST', `${S}/${id}:acknowledge`, { ackIds: [ackId] }),
      { status: 400, body: detachedError(id) },
      `${id}: an ack ID issued before the detach cannot be acked`,
    );
    t.strictSame(
      await api('POST', `${S}/${id}:modifyAckDeadline`, { ackIds: [ackId], ackDeadlineSeconds: 30 }),
      { status: 400, body: detachedError(id) },
      `${id}: nor its deadline changed`,
    );
    t.strictSame(
      await api('POST', `${S}/${id}:modifyAckDeadline`, { ackIds: [ackId], ackDeadlineSeconds: 0 }),
      { status: 400, body: detachedError(id) },
      `${id}: nor nacked`,
    );
  }

  await publish(client, 'four');
  t.strictSame(
    (await pullTexts(client, 'kept')).texts.sort(),
    ['four', 'one', 'three', 'two'],
    'the attached subscription gets every message',
  );
  t.strictSame(
    await dataOf(client, 'gone'),
    { keys: [], attached: false },
    'a message published after the detach never reaches the detached subscription',
  );

  const before = await record(client, 'gone');
  t.strictSame(await api('POST', `${S}/gone:detach`, {}), { status: 200, body: {} }, 'detaching again answers {}');
  t.strictSame(await record(client, 'gone'), before, 'and changes nothing');
}

for (const target of redisTargets()) t.test(`detach: ${target.name}`, (t) => detachSemantics(t, target));

t.test('detach: refused requests change nothing', async (t) => {
  const client = await withSubscriptions(await openClient(t, standalone, 'detach-errors'), 'sub');
  const { api, raw } = client;
  const rows: [string, Promise<unknown>, unknown][] = [
    ['an unknown subscription', api('POST', `${S}/nope:detach`, {}), { status: 404, body: notFound('nope') }],
    [
      'a bad name',
      api('POST', `${S}/0bad:detach`, {}),
      { status: 400, body: badResourceName('subscriptions', P, '0bad') },
    ],
    [
      'a body with a field',
      api('POST', `${S}/sub:detach`, { subscription: `projects/${P}/subscriptions/sub` }),
      {
        status: 400,
        body: unknownField('subscription'),
      },
    ],
    [
      'a body that is no object',
      api('POST', `${S}/sub:detach`, []),
      { status: 400, body: notAnObject('detach request') },
    ],
    [
      'a body that is no JSON',
      raw({ method: 'POST', url: `${S}/sub:detach`, payload: '{', headers: { 'content-type': 'application/json' } }),
      { status: 400, body: invalid('Invalid JSON payload received. Body is not valid JSON.') },
    ],
  ];
  for (const [why, reply, expected] of rows) t.strictSame(await reply, expected, why);
  t.strictSame(
    await api('GET', `${S}/sub`),
    { status: 200, body: subscriptionBody(P, 'sub', TOPIC) },
    'the subscription is still attached',
  );
  t.strictSame(
    await api('GET', `${T}/d-topic/subscriptions`),
    { status: 200, body: { subscriptions: [`projects/${P}/subscriptions/sub`] } },
    'and listed under its topic',
  );
});

t.test('detach: a subscription whose topic was deleted', async (t) => {
  const client = await withSubscriptions(await openClient(t, standalone, 'detach-orphan'), 'orphan');
  const { api } = client;
  await publish(client, 'held');
  t.equal((await api('DELETE', `${T}/d-topic`)).status, 200);
  t.strictSame(await api('POST', `${S}/orphan:detach`), { status: 200, body: {} }, 'can be detached');
  t.strictSame(
    await api('GET', `${S}/orphan`),
    { status: 200, body: subscriptionBody(P, 'orphan', '_deleted-topic_', { detached: true }) },
    'detached, of the deleted topic',
  );
  t.strictSame(await dataOf(client, 'orphan'), { keys: [], attached: false }, 'what it held is dropped');
  t.strictSame(
    await api('POST', `${S}/orphan:pull`, { maxMessages: 1 }),
    { status: 400, body: detachedError('orphan') },
    'pull: FAILED_PRECONDITION',
  );
});

t.test('detach: PATCH, delete and create again', async (t) => {
  const client = await withSubscriptions(await openClient(t, standalone, 'detach-patch'), 'sub');
  const { api } = client;
  await api('POST', `${S}/sub:detach`);
  t.strictSame(
    await api('PATCH', `${S}/sub`, {
      subscription: { ackDeadlineSeconds: 30, labels: { a: 'b' } },
      updateMask: 'ackDeadlineSeconds,labels',
    }),
    {
      status: 200,
      body: subscriptionBody(P, 'sub', TOPIC, { ackDeadlineSeconds: 30, labels: { a: 'b' }, detached: true }),
    },
    'a PATCH changes its settings and leaves it detached',
  );
  await publish(client, 'after the patch');
  t.strictSame(await dataOf(client, 'sub'), { keys: [], attached: false }, 'the PATCH did not attach it again');
  t.strictSame(
    await api('GET', `${T}/d-topic/subscriptions`),
    { status: 200, body: {} },
    'nor list it under its topic',
  );
  t.strictSame(
    await api('PATCH', `${S}/sub`, { subscription: { detached: false }, updateMask: 'detached' }),
    {
      status: 400,
      body: invalid('Invalid update_mask provided in the UpdateSubscriptionRequest: unknown field name "detached".'),
    },
    'detached is no update-mask path: a detached subscription cannot be attached again',
  );
  t.equal((await api('GET', `${S}/sub`)).body.detached, true, 'still detached');

  t.strictSame(await api('DELETE', `${S}/sub`), { status: 200, body: {} }, 'a detached subscription can be deleted');
  t.strictSame(await api('POST', `${S}/sub:detach`), { status: 404, body: notFound('sub') }, 'then it is gone');
  t.strictSame(
    await api('PUT', `${S}/sub`, { topic: TOPIC }),
    { status: 200, body: subscriptionBody(P, 'sub', TOPIC) },
    'the name makes a new, attached subscription',
  );
  await publish(client, 'new');
  t.strictSame((await pullTexts(client, 'sub')).texts, ['new'], 'which receives messages');
});

t.test('detach: an interrupted drop is finished by the clean-up pass', async (t) => {
  const client = await withSubscriptions(await openClient(t, standalone, 'detach-cleanup'), 'sub');
  const { api, broker } = client;
  await api('POST', `${S}/sub:detach`);
  // A late copy of the record from before the detach, as a region's sync may put it just after
  // the detach: it attaches the data again (marked for clean-up), and its put is refused.
  const { uid, topicUid } = await record(client, 'sub');
  const { ctx } = broker.app.broker;
  await markCleanup(ctx.scripts, ctx.keys, { time: '', ref: `${topicUid}/${uid}/projects/${P}/subscriptions/sub` });
  await attachSubscription(ctx.scripts, ctx.keys.topicData(topicUid), {
    time: '',
    subscriptionUid: uid,
    ordered: false,
    version: 1,
    config: ['ackDeadlineUs', '10000000'],
  });
  await publish(client, 'stray');
  t.equal((await dataOf(client, 'sub')).attached, true, 'the stray attach took');
  await broker.app.broker.controlPlane.collectGarbage(Number.MAX_SAFE_INTEGER);
  t.strictSame(await dataOf(client, 'sub'), { keys: [], attached: false }, 'the clean-up pass dropped it');
  t.equal(await broker.redis.zcard(new Keys(broker.prefix).pendingCleanups), 0, 'no mark left');
});

t.test('detach: a long-polling pull waiting on the subscription answers FAILED_PRECONDITION', async (t) => {
  const long = await startBroker(t, { target: standalone, name: 'detach-long-poll', pullWaitMs: 10_000 });
  const { api } = await withSubscriptions(clientOf(long), 'sub');
  const waiting = api('POST', `${S}/sub:pull`, { maxMessages: 1 });
  await new Promise((resolve) => setTimeout(resolve, 200));
  const startedAt = Date.now();
  await api('POST', `${S}/sub:detach`);
  t.strictSame(await waiting, { status: 400, body: detachedError('sub') }, 'the waiting pull is told why');
  t.ok(Date.now() - startedAt < 5_000, 'at once, woken by the detach');
});
