// A publish without an ordering key runs in two steps (src/lua/publish.lua): reserve-messages
// hands out the seqs and the publish time, then one MULTI/EXEC stores the stamped bodies with a
// plain HSET and runs publish.lua. These tests put something between the two steps, through
// the real publish path, and check that nothing is stored that no subscription holds, that
// nothing accepted is lost, and that the message IDs stay unique and increasing:
//   - the broker dies after reserving (the commit never runs);
//   - the topic is deleted, or a subscription attached, in between;
//   - the script cache is flushed (the script part of the MULTI/EXEC answers NOSCRIPT);
//   - the commit runs twice (ioredis resends a transaction whose reply a dropped connection
//     lost): the second run changes nothing, so no subscription gets a message twice and no
//     body is deleted while another subscription still holds it;
//   - the publish time is the reserved one, stamped by the broker.
import t, { type Test } from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { storeReserved } from '../../src/broker/delivery.ts';
import { formatTimestampUs } from '../../src/broker/durations.ts';
import { packMessage, stampPublishTime } from '../../src/broker/message-codec.ts';
import { Keys } from '../../src/redis/keys.ts';
import { b64, startBroker, unb64, type TestBroker } from '../helpers/app.ts';
import { redisTargets, type RedisTarget } from '../helpers/redis.ts';

const TOPIC = '/v1/projects/p/topics/commit';
const topicName = { project: 'p', id: 'commit', full: 'projects/p/topics/commit' };

async function setUp(t: Test, target: RedisTarget, name: string) {
  const clock = new ManualClock();
  const broker = await startBroker(t, { target, clock, name });
  await broker.api('PUT', TOPIC, {});
  await broker.api('PUT', '/v1/projects/p/subscriptions/first', { topic: topicName.full });
  return { broker, clock };
}

async function dataKeys(broker: TestBroker) {
  const record = await broker.app.broker.topics.read(topicName);
  return new Keys(broker.prefix).topicData(record.uid);
}

/** Runs `between` right after the next reserve-messages, before the publish commits. */
function betweenReserveAndCommit(broker: TestBroker, between: () => Promise<void>): void {
  const scripts = broker.app.broker.ctx.scripts;
  const run = scripts.run.bind(scripts);
  scripts.run = async (name, keys, args) => {
    const result = await run(name, keys, args);
    if (name === 'reserve-messages') {
      scripts.run = run;
      await between();
    }
    return result;
  };
}

const publish = (broker: TestBroker, ...texts: string[]) =>
  broker.api('POST', `${TOPIC}:publish`, { messages: texts.map((text) => ({ data: b64(text) })) });

async function pullTexts(broker: TestBroker, subscription: string): Promise<string[]> {
  const { body } = await broker.api('POST', `/v1/projects/p/subscriptions/${subscription}:pull`, { maxMessages: 100, returnImmediately: true });
  return (body.receivedMessages ?? []).map((m: any) => unb64(m.message.data));
}

for (const target of redisTargets()) {
  t.test(`${target.name}: a broker that dies between reserving and committing stores nothing; later IDs skip the gap`, async (t) => {
    const { broker } = await setUp(t, target, 'commit-crash');
    t.same((await publish(broker, 'before')).body, { messageIds: ['1'] });
    betweenReserveAndCommit(broker, async () => {
      throw new Error('the broker died here');
    });
    t.equal((await publish(broker, 'lost-1', 'lost-2')).status, 500, 'the publish that never committed failed');
    const data = await dataKeys(broker);
    t.same(await broker.redis.hkeys(data.messages), ['1'], 'no body of the uncommitted publish');
    t.same((await publish(broker, 'after')).body, { messageIds: ['4'] }, 'the next ID is past the reserved ones');
    t.same(await pullTexts(broker, 'first'), ['before', 'after'], 'exactly the committed messages are delivered');
  });

  t.test(`${target.name}: a topic deleted between reserving and committing: 404, and no body is left`, async (t) => {
    const { broker } = await setUp(t, target, 'commit-deleted');
    const data = await dataKeys(broker);
    t.equal((await publish(broker, 'kept')).status, 200);
    betweenReserveAndCommit(broker, async () => {
      t.same((await broker.api('DELETE', TOPIC)).body, {}, 'deleted meanwhile');
    });
    const refused = await publish(broker, 'too-late');
    t.same([refused.status, refused.body.error?.status], [404, 'NOT_FOUND']);
    t.same(await broker.redis.hkeys(data.messages), ['1'], "only the body the detached subscription still holds");
    t.same(await pullTexts(broker, 'first'), ['kept'], 'the subscription delivers what it held, nothing else');
  });

  t.test(`${target.name}: a subscription attached between reserving and committing gets the messages too`, async (t) => {
    const { broker } = await setUp(t, target, 'commit-attached');
    t.equal((await publish(broker, 'warm')).status, 200, 'the broker has read the attachments');
    betweenReserveAndCommit(broker, async () => {
      t.equal((await broker.api('PUT', '/v1/projects/p/subscriptions/second', { topic: topicName.full })).status, 200, 'attached meanwhile');
    });
    t.same((await publish(broker, 'a', 'b')).body, { messageIds: ['2', '3'] }, 'retried with the same reserved IDs');
    const data = await dataKeys(broker);
    t.same((await broker.redis.hkeys(data.messages)).sort(), ['1', '2', '3'], 'each body stored once');
    t.same(await broker.redis.hgetall(data.refs), { '2': '2', '3': '2' }, 'the new messages are held by both subscriptions');
    t.same(await pullTexts(broker, 'second'), ['a', 'b'], 'the new subscription receives them');
    t.same(await pullTexts(broker, 'first'), ['warm', 'a', 'b'], 'and the first one too');
  });

  t.test(`${target.name}: after SCRIPT FLUSH the publish still commits once`, async (t) => {
    const { broker } = await setUp(t, target, 'commit-noscript');
    t.equal((await publish(broker, 'one')).status, 200);
    const nodes = 'nodes' in broker.redis ? broker.redis.nodes('master') : [broker.redis];
    await Promise.all(nodes.map((node) => node.script('FLUSH')));
    t.same((await publish(broker, 'two', 'three')).body, { messageIds: ['2', '3'] }, 'accepted');
    const data = await dataKeys(broker);
    t.same((await broker.redis.hkeys(data.messages)).sort(), ['1', '2', '3'], 'each body stored once');
    t.same(await pullTexts(broker, 'first'), ['one', 'two', 'three'], 'each delivered once');
    t.same(await pullTexts(broker, 'first'), [], 'and nothing more');
  });

  t.test(`${target.name}: a commit run twice changes nothing the second time`, async (t) => {
    const { broker } = await setUp(t, target, 'commit-twice');
    await broker.api('PUT', '/v1/projects/p/subscriptions/second', { topic: topicName.full });
    const { ctx } = broker.app.broker;
    const data = await dataKeys(broker);
    const [, firstSeq, publishTimeUs] = (await ctx.scripts.run('reserve-messages', [data.state], [ctx.clock.scriptTime(), 2])) as number[];
    const bodies = ['a', 'b'].map((text) => packMessage(b64(text))!.packed);
    for (const body of bodies) stampPublishTime(body, publishTimeUs);
    const attached = Object.keys(await broker.redis.hgetall(data.attached));
    const subscriptionKeys = attached.flatMap((uid) => {
      const sub = data.subscription(uid);
      return [sub.ready, sub.keyed, sub.keyStates];
    });
    const record = await broker.app.broker.topics.read(topicName);
    const args = [ctx.clock.scriptTime(), (await broker.redis.hget(data.state, 'attachVersion')) ?? '0', ctx.keys.wakeChannel(record.uid), '', '00'];
    const commit = () => storeReserved(ctx, data, subscriptionKeys, args, firstSeq, bodies);
    t.same(await commit(), [1, firstSeq], 'committed');
    t.same(await commit(), [1, firstSeq], 'the second run answers the same');
    for (const uid of attached) {
      t.same(await broker.redis.lrange(data.subscription(uid).ready, 0, -1), [String(firstSeq), String(firstSeq + 1)], 'each seq queued once');
    }
    t.same(await broker.redis.hgetall(data.refs), { [firstSeq]: '2', [firstSeq + 1]: '2' }, 'two holders per body');
    for (const sub of ['first', 'second']) {
      const { body } = await broker.api('POST', `/v1/projects/p/subscriptions/${sub}:pull`, { maxMessages: 10, returnImmediately: true });
      t.same(body.receivedMessages.map((m: any) => unb64(m.message.data)), ['a', 'b'], `${sub} receives each message once`);
      await broker.api('POST', `/v1/projects/p/subscriptions/${sub}:acknowledge`, { ackIds: body.receivedMessages.map((m: any) => m.ackId) });
    }
    t.equal(await broker.redis.hlen(data.messages), 0, 'no body left once both acked');
    t.equal(await broker.redis.hexists(data.state, `reserved:${firstSeq}`), 0, 'the reservation is gone');
  });

  t.test(`${target.name}: the publish time is the reserved one, stamped by the broker`, async (t) => {
    const { broker, clock } = await setUp(t, target, 'commit-time');
    const reservedAt = formatTimestampUs(Number(clock.scriptTime()));
    betweenReserveAndCommit(broker, async () => clock.advanceSeconds(5));
    t.equal((await publish(broker, 'stamped')).status, 200);
    const { body } = await broker.api('POST', '/v1/projects/p/subscriptions/first:pull', { maxMessages: 1, returnImmediately: true });
    t.equal(body.receivedMessages[0].message.publishTime, reservedAt, 'publishTime is the time of the reservation');
  });
}
