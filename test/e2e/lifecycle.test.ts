// Data lifecycle: retention, subscription deletion, and the janitor that drops data left behind
// by a crash between the steps of creating or deleting a subscription.

import t from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { attachSubscription, markCleanup } from '../../src/redis/calls/control-plane.ts';
import { Keys } from '../../src/redis/keys.ts';
import { b64, startBroker, type TestBroker } from '../helpers/app.ts';
import { redisTargets, storedBodies } from '../helpers/redis.ts';
import { scriptsRunBy } from '../helpers/script-calls.ts';

const TOPIC = '/v1/projects/p/topics/life';
const topicName = { project: 'p', id: 'life', full: 'projects/p/topics/life' };

async function topicKeys(broker: TestBroker) {
  const record = await broker.app.broker.topics.read(topicName);
  return { uid: record.uid, data: new Keys(broker.prefix).topicData(record.uid) };
}

for (const target of redisTargets()) {
  t.test(`${target.name}: messages older than the subscription's retention are dropped, never delivered`, async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'retention' });
    await broker.api('PUT', TOPIC, {});
    await broker.api('PUT', '/v1/projects/p/subscriptions/short', {
      topic: topicName.full,
      messageRetentionDuration: '600s',
    });
    await broker.api('PUT', '/v1/projects/p/subscriptions/long', { topic: topicName.full });
    const [oldId] = (await broker.api('POST', `${TOPIC}:publish`, { messages: [{ data: b64('old') }] })).body
      .messageIds;
    clock.advanceSeconds(601);
    const [newId] = (await broker.api('POST', `${TOPIC}:publish`, { messages: [{ data: b64('new') }] })).body
      .messageIds;
    const short = await broker.api('POST', '/v1/projects/p/subscriptions/short:pull', {
      maxMessages: 10,
      returnImmediately: true,
    });
    t.same(
      short.body.receivedMessages.map((m: any) => m.message.messageId),
      [newId],
      'the expired message is skipped',
    );
    const long = await broker.api('POST', '/v1/projects/p/subscriptions/long:pull', {
      maxMessages: 10,
      returnImmediately: true,
    });
    t.same(
      long.body.receivedMessages.map((m: any) => m.message.messageId),
      [oldId, newId],
      'a longer retention still has it',
    );
    await broker.api('POST', '/v1/projects/p/subscriptions/long:acknowledge', {
      ackIds: long.body.receivedMessages.map((m: any) => m.ackId),
    });
    const { data } = await topicKeys(broker);
    t.same(
      [...(await storedBodies(broker.redis, data)).keys()],
      [newId],
      'the expired body is gone once nobody holds it; the short subscription still holds the other',
    );
  });

  for (const exactlyOnce of [false, true]) {
    const kind = exactlyOnce ? 'ordered exactly-once' : 'ordered';
    t.test(
      `${target.name}: on an ${kind} subscription too, a key's expired messages are dropped, never delivered`,
      async (t) => {
        const clock = new ManualClock();
        const broker = await startBroker(t, { target, clock, name: `retention-${kind.replace(' ', '-')}` });
        const sub = '/v1/projects/p/subscriptions/ordered';
        await broker.api('PUT', TOPIC, {});
        await broker.api('PUT', sub, {
          topic: topicName.full,
          messageRetentionDuration: '600s',
          enableMessageOrdering: true,
          enableExactlyOnceDelivery: exactlyOnce,
        });
        await broker.api('POST', `${TOPIC}:publish`, {
          messages: [
            { data: b64('old-1'), orderingKey: 'k' },
            { data: b64('old-2'), orderingKey: 'k' },
          ],
        });
        clock.advanceSeconds(601);
        const [newId] = (
          await broker.api('POST', `${TOPIC}:publish`, { messages: [{ data: b64('new'), orderingKey: 'k' }] })
        ).body.messageIds;
        const pulled = await broker.api('POST', `${sub}:pull`, { maxMessages: 10, returnImmediately: true });
        t.same(
          pulled.body.receivedMessages.map((m: any) => m.message.messageId),
          [newId],
          'only the retained message of the key',
        );
        const { data } = await topicKeys(broker);
        t.same([...(await storedBodies(broker.redis, data)).keys()], [newId], 'the expired bodies are gone');
        const ack = await broker.api('POST', `${sub}:acknowledge`, { ackIds: [pulled.body.receivedMessages[0].ackId] });
        t.same([ack.status, ack.body], [200, {}], 'the retained message is next in its key');
        t.same(
          (await broker.api('POST', `${sub}:pull`, { maxMessages: 10, returnImmediately: true })).body,
          {},
          'nothing left',
        );
        t.equal((await storedBodies(broker.redis, data)).size, 0, 'and no body');
      },
    );
  }

  t.test(`${target.name}: deleting a subscription releases every body it held`, async (t) => {
    const broker = await startBroker(t, { target, name: 'delete-sub' });
    await broker.api('PUT', TOPIC, {});
    await broker.api('PUT', '/v1/projects/p/subscriptions/keep', { topic: topicName.full });
    await broker.api('PUT', '/v1/projects/p/subscriptions/drop', {
      topic: topicName.full,
      enableMessageOrdering: true,
    });
    for (let i = 0; i < 30; i++) {
      await broker.api('POST', `${TOPIC}:publish`, {
        messages: [{ data: b64(`m${i}`), ...(i % 2 ? { orderingKey: `k${i % 3}` } : {}) }],
      });
    }
    await broker.api('POST', '/v1/projects/p/subscriptions/drop:pull', { maxMessages: 7, returnImmediately: true });
    const { data } = await topicKeys(broker);
    t.equal(await broker.redis.hlen(data.refs), 30, 'two holders per body');
    t.same((await broker.api('DELETE', '/v1/projects/p/subscriptions/drop')).body, {});
    t.equal(await broker.redis.hlen(data.refs), 0, 'one holder left: no reference counts');
    t.equal((await storedBodies(broker.redis, data)).size, 30, 'the remaining subscription still has every body');
    const kept = await broker.api('POST', '/v1/projects/p/subscriptions/keep:pull', {
      maxMessages: 100,
      returnImmediately: true,
    });
    await broker.api('POST', '/v1/projects/p/subscriptions/keep:acknowledge', {
      ackIds: kept.body.receivedMessages.map((m: any) => m.ackId),
    });
    t.equal((await storedBodies(broker.redis, data)).size, 0, 'no body left once the last holder acked');
  });

  t.test(`${target.name}: the janitor drops data of a create interrupted between attach and record`, async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'janitor' });
    await broker.api('PUT', TOPIC, {});
    await broker.api('PUT', '/v1/projects/p/subscriptions/real', { topic: topicName.full });
    const { uid, data } = await topicKeys(broker);
    const { ctx } = broker.app.broker;
    // What a subscription create does before it records the subscription, then "crash".
    const orphan = 'feedfacefeedface';
    const orphanKeys = data.subscription(orphan);
    await markCleanup(ctx.scripts, ctx.keys, {
      time: clock.scriptTime(),
      ref: `${uid}/${orphan}/projects/p/subscriptions/never-recorded`,
    });
    await attachSubscription(ctx.scripts, data, {
      time: clock.scriptTime(),
      subscriptionUid: orphan,
      ordered: false,
      version: 1,
      config: ['ackDeadlineUs', '10000000', 'retentionUs', '604800000000', 'exactlyOnce', '0', 'ordered', '0'],
    });
    await broker.api('POST', `${TOPIC}:publish`, { messages: [{ data: b64('x') }] });
    t.equal(await broker.redis.llen(orphanKeys.ready), 1, 'the orphan receives publishes');

    const now = Number(clock.scriptTime());
    t.equal(
      await broker.app.broker.controlPlane.collectGarbage(now - 60_000_000),
      0,
      'nothing is collected within the grace period',
    );
    clock.advanceSeconds(120);
    t.equal(
      await broker.app.broker.controlPlane.collectGarbage(Number(clock.scriptTime()) - 60_000_000),
      1,
      'collected after it',
    );
    t.equal(await broker.redis.exists(orphanKeys.ready, orphanKeys.config), 0, 'its data is gone');
    t.same(await broker.redis.hkeys(data.attached), [
      (await broker.app.broker.subscriptions.read({ project: 'p', id: 'real', full: 'projects/p/subscriptions/real' }))
        .uid,
    ]);
    t.equal(await broker.redis.zcard(ctx.keys.pendingCleanups), 0, 'no mark left');
    const real = await broker.api('POST', '/v1/projects/p/subscriptions/real:pull', {
      maxMessages: 10,
      returnImmediately: true,
    });
    t.equal(real.body.receivedMessages.length, 1, 'the real subscription is untouched');
  });

  t.test(`${target.name}: a subscription idle longer than its expirationPolicy.ttl is deleted`, async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'expiry' });
    const { subscriptions } = broker.app.broker;
    const now = () => Number(clock.scriptTime());
    await broker.api('PUT', TOPIC, {});
    await broker.api('PUT', '/v1/projects/p/subscriptions/idle', {
      topic: topicName.full,
      expirationPolicy: { ttl: '86400s' },
    });
    await broker.api('PUT', '/v1/projects/p/subscriptions/busy', {
      topic: topicName.full,
      expirationPolicy: { ttl: '86400s' },
    });
    await broker.api('PUT', '/v1/projects/p/subscriptions/forever', { topic: topicName.full, expirationPolicy: {} });
    await broker.api('PUT', '/v1/projects/p/subscriptions/default', { topic: topicName.full });

    await broker.api('PUT', '/v1/projects/p/subscriptions/streamed', {
      topic: topicName.full,
      expirationPolicy: { ttl: '86400s' },
    });

    clock.advanceSeconds(86000);
    await broker.api('POST', '/v1/projects/p/subscriptions/busy:pull', { maxMessages: 1, returnImmediately: true });
    // What an open stream does on each heartbeat tick, messages or not.
    const streamed = { project: 'p', id: 'streamed', full: 'projects/p/subscriptions/streamed' };
    await subscriptions.touch(await subscriptions.read(streamed));
    t.equal(await subscriptions.expireIdle(now()), 0, 'nothing idle for a whole day yet');
    clock.advanceSeconds(401);
    t.equal(await subscriptions.expireIdle(now()), 1, 'one day after its creation, the unused subscription expires');
    t.equal(
      (await broker.api('GET', '/v1/projects/p/subscriptions/streamed')).status,
      200,
      'an open stream kept its subscription',
    );
    t.equal((await broker.api('GET', '/v1/projects/p/subscriptions/idle')).status, 404);
    t.equal(
      (await broker.api('GET', '/v1/projects/p/subscriptions/busy')).status,
      200,
      'a pull kept the other one in use',
    );

    clock.advanceSeconds(86400);
    t.equal(await subscriptions.expireIdle(now()), 2, 'a day after their last use, the others expire too');
    clock.advanceSeconds(40 * 86400);
    t.equal(await subscriptions.expireIdle(now()), 1, 'the default policy (31 days) expires as well');
    t.equal(
      (await broker.api('GET', '/v1/projects/p/subscriptions/forever')).status,
      200,
      'an empty ttl never expires',
    );
    const { data } = await topicKeys(broker);
    t.equal(await broker.redis.hlen(data.attached), 1, 'expired subscriptions are detached from the topic');
  });
}

/**
 * Counts the Redis commands the broker's client sends while `work` runs, but GET and HGETALL:
 * push delivery's listing of the subscription records (set off by the announcements of the
 * test's creates, at any moment) reads those, and an expiration pass never does.
 */
async function commandsSentBy<T>(broker: TestBroker, work: () => Promise<T>): Promise<{ result: T; commands: number }> {
  let commands = 0;
  const sendCommand = broker.redis.sendCommand;
  broker.redis.sendCommand = function (this: unknown, ...args: unknown[]) {
    const { name } = args[0] as { name: string };
    if (name !== 'get' && name !== 'hgetall') commands++;
    return Reflect.apply(sendCommand, this, args);
  } as typeof sendCommand;
  try {
    return { result: await work(), commands };
  } finally {
    broker.redis.sendCommand = sendCommand;
  }
}

for (const target of redisTargets()) {
  t.test(`${target.name}: an expiration pass costs work per due subscription, not per subscription`, async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'expiry-bound' });
    const { subscriptions } = broker.app.broker;
    const now = () => Number(clock.scriptTime());
    const SUBSCRIPTIONS = 40;
    await broker.api('PUT', TOPIC, {});
    for (let i = 0; i < SUBSCRIPTIONS; i++) {
      const expirationPolicy = i % 2 === 0 ? { ttl: '86400s' } : {};
      const created = await broker.api('PUT', `/v1/projects/p/subscriptions/bound-${i}`, {
        topic: topicName.full,
        expirationPolicy,
      });
      t.equal(created.status, 200);
    }

    clock.advanceSeconds(3600);
    const early = await commandsSentBy(broker, () => subscriptions.expireIdle(now()));
    t.equal(early.result, 0);
    t.ok(early.commands <= 1, `with none due, a pass reads only the index (${early.commands} commands)`);

    // Half of those that may expire are used after 12 hours: only the other ten expire after a day.
    clock.advanceSeconds(11 * 3600);
    for (let i = 0; i < SUBSCRIPTIONS; i += 4) {
      await broker.api('POST', `/v1/projects/p/subscriptions/bound-${i}:pull`, {
        maxMessages: 1,
        returnImmediately: true,
      });
    }
    clock.advanceSeconds(12 * 3600 + 1);
    const due = await commandsSentBy(broker, () => subscriptions.expireIdle(now()));
    t.equal(due.result, 10, 'the unused ones with a ttl expire');
    const perDue = due.commands / 20;
    t.ok(perDue <= 15, `a pass costs a few commands per due subscription (${due.commands} for 20 due)`);

    const after = await commandsSentBy(broker, () => subscriptions.expireIdle(now()));
    t.equal(after.result, 0);
    t.ok(after.commands <= 1, `the used ones wait in the index until they may expire (${after.commands} commands)`);

    clock.advanceSeconds(12 * 3600);
    t.equal(
      await subscriptions.expireIdle(now()),
      10,
      'half a day later, a day after their last use, the used ones expire',
    );
    t.equal(
      (await broker.api('GET', '/v1/projects/p/subscriptions?pageSize=100')).body.subscriptions.length,
      SUBSCRIPTIONS / 2,
      'those without a ttl stay',
    );
  });

  t.test(`${target.name}: a long-lived stream keeps its subscription with a few touches per ttl`, async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'expiry-stream' });
    const { subscriptions } = broker.app.broker;
    const now = () => Number(clock.scriptTime());
    await broker.api('PUT', TOPIC, {});
    for (const id of ['streamed', 'idle']) {
      await broker.api('PUT', `/v1/projects/p/subscriptions/${id}`, {
        topic: topicName.full,
        expirationPolicy: { ttl: '86400s' },
      });
    }
    const streamed = await subscriptions.read({
      project: 'p',
      id: 'streamed',
      full: 'projects/p/subscriptions/streamed',
    });
    // Three days of heartbeats of two streams on it, one tick every ten minutes, and a pass every hour.
    const { scripts } = await scriptsRunBy(async () => {
      for (let minutes = 10; minutes <= 3 * 24 * 60; minutes += 10) {
        clock.advanceSeconds(600);
        await subscriptions.touch(streamed);
        await subscriptions.touch(streamed);
        if (minutes % 60 === 0) await subscriptions.expireIdle(now());
      }
    });
    const touches = scripts.filter((name) => name === 'touch-subscription').length;
    t.ok(touches <= 3 * 8 + 1, `the subscription was touched ${touches} times in three days (864 heartbeat ticks)`);
    t.equal((await broker.api('GET', '/v1/projects/p/subscriptions/streamed')).status, 200, 'the streamed one lives');
    t.equal((await broker.api('GET', '/v1/projects/p/subscriptions/idle')).status, 404, 'the idle one expired');
  });
}
