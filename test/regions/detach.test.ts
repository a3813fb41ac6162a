// DetachSubscription with regions (a, b, c; each its own redis-server): a detach through one
// endpoint takes effect in every region before it answers (the record, the topic's list, the
// backlog each region stores, streams through other endpoints), detaching again through another
// endpoint changes nothing, and a region whose Redis was down during a detach catches up when it
// returns.

import t, { type Test } from 'tap';
import { b64 } from '../helpers/app.ts';
import { unackedByRegion } from '../helpers/metrics.ts';
import { startRegions, type Deployment } from '../helpers/regions.ts';
import { StreamClient } from '../streaming/_ws.ts';
import type { AddressInfo } from 'node:net';

const REGIONS = ['a', 'b', 'c'];
const P = '/v1/projects/p';
const TOPIC = `${P}/topics/top`;
const sub = (id: string) => `${P}/subscriptions/${id}`;
const fullSub = (id: string) => `projects/p/subscriptions/${id}`;

async function publishThroughEach(d: Deployment, text: string) {
  for (const region of REGIONS) {
    const reply = await d.api(region, 'POST', `${TOPIC}:publish`, { messages: [{ data: b64(`${text} ${region}`) }] });
    if (reply.status !== 200) throw new Error(`publish through ${region}: ${reply.status}`);
  }
}

/** What each region holds of the subscription: its record, its data-plane keys, whether it is attached. */
async function stateIn(d: Deployment, region: string, id: string) {
  const { ctx } = d.brokers.get(region)!.app.broker;
  const record = JSON.parse((await ctx.redis.hget(ctx.keys.subscriptions, fullSub(id)))!);
  const data = ctx.keys.topicData(record.topicUid);
  const sub = data.subscription(record.uid);
  const held = await Promise.all([
    ctx.redis.exists(sub.config),
    ctx.redis.llen(sub.ready),
    ctx.redis.zcard(sub.leased),
  ]);
  return {
    record,
    held: held.reduce((sum, n) => sum + n, 0),
    attached: (await ctx.redis.hget(data.attached, record.uid)) !== null,
    pendingCleanups: await ctx.redis.zcard(ctx.keys.pendingCleanups),
  };
}

async function expectDetachedEverywhere(t: Test, d: Deployment, id: string, version: number) {
  for (const region of REGIONS) {
    const got = await d.api(region, 'GET', sub(id));
    t.equal(got.body.detached, true, `${id} reads detached through ${region}`);
    const listed = (await d.api(region, 'GET', `${TOPIC}/subscriptions`)).body.subscriptions;
    t.ok(
      listed.includes(fullSub('kept')) && !listed.includes(fullSub(id)),
      `${id} is not listed under the topic through ${region}`,
    );
    const pull = await d.api(region, 'POST', `${sub(id)}:pull`, { maxMessages: 10, returnImmediately: true });
    t.strictSame([pull.status, pull.body.error?.status], [400, 'FAILED_PRECONDITION'], `pull through ${region}`);
    const state = await stateIn(d, region, id);
    t.strictSame(
      {
        version: state.record.version,
        held: state.held,
        attached: state.attached,
        pendingCleanups: state.pendingCleanups,
      },
      { version, held: 0, attached: false, pendingCleanups: 0 },
      `${region}: the same record version, no backlog, not attached, no clean-up left`,
    );
  }
  const metrics = String((await d.api('a', 'GET', '/metrics')).body);
  t.strictSame(Object.fromEntries(unackedByRegion(metrics, fullSub(id))), { a: 0, b: 0, c: 0 }, 'the backlog metric');
}

t.test('detach with regions', async (t) => {
  const d = await startRegions(t, REGIONS);
  await d.api('a', 'PUT', TOPIC, {});
  for (const id of ['gone', 'late', 'kept']) await d.api('b', 'PUT', sub(id), { topic: 'projects/p/topics/top' });
  await publishThroughEach(d, 'before');
  const leased = await d.api('c', 'POST', `${sub('gone')}:pull`, { maxMessages: 1, returnImmediately: true });
  t.equal(leased.body.receivedMessages.length, 1, 'a message is leased before the detach');
  for (const region of REGIONS) t.ok((await stateIn(d, region, 'gone')).held > 1, `${region} holds a backlog`);

  // A stream through c's endpoint (which listens, for the WebSocket).
  const c = d.brokers.get('c')!.app;
  await c.listen({ port: 0, host: '127.0.0.1' });
  const port = (c.server.address() as AddressInfo).port;
  const stream = await StreamClient.connect(`ws://127.0.0.1:${port}/v1/projects/p/subscriptions/gone:streamingPull`);
  t.teardown(() => stream.terminate());
  stream.send({ streamAckDeadlineSeconds: 60 });
  await stream.take((frame) => frame?.subscriptionProperties !== undefined, 3000, 'subscriptionProperties');

  t.strictSame(await d.api('b', 'POST', `${sub('gone')}:detach`, {}), { status: 200, body: {} }, 'detach through b');
  const { version } = (await stateIn(d, 'b', 'gone')).record;
  await expectDetachedEverywhere(t, d, 'gone', version);
  const ack = await d.api('a', 'POST', `${sub('gone')}:acknowledge`, {
    ackIds: [leased.body.receivedMessages[0].ackId],
  });
  t.strictSame(
    [ack.status, ack.body.error?.status],
    [400, 'FAILED_PRECONDITION'],
    'its ack ID, through another region',
  );
  t.equal((await stream.waitClose(3000)).code, 4009, 'a stream through c ends with FAILED_PRECONDITION');

  t.strictSame(await d.api('c', 'POST', `${sub('gone')}:detach`), { status: 200, body: {} }, 'again, through c');
  await publishThroughEach(d, 'after');
  await expectDetachedEverywhere(t, d, 'gone', version);

  // c's Redis is down during the detach of `late`; c holds `late`'s messages published through c.
  await d.redis.get('c')!.kill();
  t.strictSame(await d.api('a', 'POST', `${sub('late')}:detach`), { status: 200, body: {} }, 'detach while c is down');
  await d.redis.get('c')!.start();
  await d.waitReady('c');
  await expectDetachedEverywhere(t, d, 'late', (await stateIn(d, 'a', 'late')).record.version);
  t.strictSame(
    await d.api('c', 'POST', `${sub('late')}:detach`),
    { status: 200, body: {} },
    'detaching through the region that was away changes nothing',
  );

  const kept = await d.api('a', 'POST', `${sub('kept')}:pull`, { maxMessages: 100, returnImmediately: true });
  t.equal(kept.body.receivedMessages.length, 6, 'the attached subscription got every message from every region');
});
