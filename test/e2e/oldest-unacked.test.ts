// The oldest unacknowledged message of a subscription (GET .../backlog: oldestUnackedPublishTime
// and oldestUnackedMessageAge), from its holds (SCHEMA.md), through every way a message stops
// being held that the randomized backlog test (backlog.property.test.ts) does not take: a filter
// that refuses a message, seeks to a time (back and forth), a message whose body is gone, a
// dead-letter forward, the holds written for a store of storage format 5 when a broker claims
// it, and a deleted subscription (its holds go with it).

import t from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { formatDuration } from '../../src/broker/durations.ts';
import { Keys, SEQS_PER_BLOCK } from '../../src/redis/keys.ts';
import { Scripts } from '../../src/redis/scripts.ts';
import { claimStorageFormat } from '../../src/redis/storage-format.ts';
import { b64, startBroker } from '../helpers/app.ts';
import { openPolicyBroker, PROJECT } from '../helpers/policy-broker.ts';
import { redisTargets, scanKeys } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';

const P = '/v1/projects/p';

for (const target of redisTargets()) {
  t.test(
    `${target.name}: the oldest unacked message follows filters, acks, seeks, lost bodies and upgrades`,
    async (t) => {
      const clock = new ManualClock();
      const broker = await startBroker(t, { target, clock, name: 'oldest-unacked' });
      const ok = async (method: string, url: string, body?: unknown) => {
        const response = await broker.api(method, url, body);
        if (response.status !== 200)
          throw new Error(`${method} ${url}: ${response.status} ${JSON.stringify(response.body)}`);
        return response.body;
      };
      const oldest = async (sub: string) => {
        const counts = await ok('GET', `${P}/subscriptions/${sub}/backlog`);
        return { time: counts.oldestUnackedPublishTime, age: counts.oldestUnackedMessageAge };
      };
      await ok('PUT', `${P}/topics/old`, {});
      await ok('PUT', `${P}/subscriptions/ou-all`, { topic: 'projects/p/topics/old', retainAckedMessages: true });
      await ok('PUT', `${P}/subscriptions/ou-kept`, {
        topic: 'projects/p/topics/old',
        filter: 'attributes.keep = "1"',
      });
      t.same(await oldest('ou-all'), { time: undefined, age: undefined }, 'nothing held: no oldest message');

      const published: { id: string; time: string }[] = [];
      for (const keep of ['0', '1', '1']) {
        const [id] = (
          await ok('POST', `${P}/topics/old:publish`, { messages: [{ data: b64(keep), attributes: { keep } }] })
        ).messageIds;
        published.push({ id, time: (await ok('GET', `${P}/topics/old/messages/${id}`)).message.publishTime });
        clock.advanceSeconds(10);
      }
      const [first, second, third] = published;
      t.equal((await oldest('ou-all')).time, first.time, 'the first message is the oldest');
      t.equal((await oldest('ou-kept')).time, second.time, 'a message the filter refused is never held');
      const age = Date.parse(first.time);
      t.equal(
        (await oldest('ou-all')).age,
        formatDuration((Number(clock.scriptTime()) / 1000 - age) / 1000),
        'its age by the clock of the store',
      );

      const received = (await ok('POST', `${P}/subscriptions/ou-all:pull`, { maxMessages: 10 })).receivedMessages;
      const ackIdOf = (id: string) => received.find((r: any) => r.message.messageId === id).ackId;
      t.equal((await oldest('ou-all')).time, first.time, 'a leased message is unacknowledged too');
      await ok('POST', `${P}/subscriptions/ou-all:acknowledge`, { ackIds: [ackIdOf(first.id)] });
      t.equal((await oldest('ou-all')).time, second.time, 'acknowledged, the next one is the oldest');
      await ok('POST', `${P}/subscriptions/ou-all:acknowledge`, { ackIds: [ackIdOf(second.id), ackIdOf(third.id)] });
      t.same(await oldest('ou-all'), { time: undefined, age: undefined }, 'all acknowledged: none');

      await ok('POST', `${P}/subscriptions/ou-all:seek`, { time: second.time });
      t.equal((await oldest('ou-all')).time, second.time, 'a seek brings back from its time on');
      await ok('POST', `${P}/subscriptions/ou-all:seek`, { time: first.time });
      t.equal((await oldest('ou-all')).time, first.time, 'and further back');
      await ok('POST', `${P}/subscriptions/ou-all:seek`, { time: third.time });
      t.equal((await oldest('ou-all')).time, third.time, 'a seek forward acknowledges what came before');

      // The store's view, for the holds themselves.
      const keys = new Keys(broker.prefix);
      const recordOf = async (sub: string) =>
        JSON.parse((await broker.redis.hget(keys.subscriptions, `projects/p/subscriptions/${sub}`))!);
      const all = await recordOf('ou-all');
      const data = keys.topicData(all.topicUid);
      const holdsOf = async (uid: string) => {
        const sub = data.subscription(uid);
        return {
          flags: await broker.redis.hgetall(sub.holds),
          blocks: await broker.redis.zrange(sub.holdBlocks, 0, -1),
        };
      };

      // A message whose body is gone is dropped by the pull that meets it, and held no more.
      const [lost] = (await ok('POST', `${P}/topics/old:publish`, { messages: [{ data: b64('lost') }] })).messageIds;
      await ok('POST', `${P}/subscriptions/ou-all:seek`, { time: new Date(Date.parse(third.time) + 1).toISOString() });
      t.equal((await oldest('ou-all')).time, (await ok('GET', `${P}/topics/old/messages/${lost}`)).message.publishTime);
      const seq = Number(lost);
      await broker.redis.hdel(
        data.bodyBlock(Math.floor(seq / SEQS_PER_BLOCK)),
        String(seq % SEQS_PER_BLOCK).padStart(3, '0'),
      );
      t.same((await ok('POST', `${P}/subscriptions/ou-all:pull`, { maxMessages: 10 })).receivedMessages ?? [], []);
      t.same(await holdsOf(all.uid), { flags: {}, blocks: [] }, 'the lost message left the holds');

      // A store of format 5 has no holds: claiming it writes them from what each subscription holds.
      await ok('POST', `${P}/subscriptions/ou-all:seek`, { time: first.time });
      const kept = await recordOf('ou-kept');
      const before = [await holdsOf(all.uid), await holdsOf(kept.uid)];
      t.ok(Object.keys(before[0].flags).length > 0 && Object.keys(before[1].flags).length > 0, 'both hold messages');
      for (const uid of [all.uid, kept.uid])
        await broker.redis.del(data.subscription(uid).holds, data.subscription(uid).holdBlocks);
      await broker.redis.set(keys.storageFormat, '5');
      t.equal(
        await claimStorageFormat(broker.redis, keys, new Scripts(broker.redis)),
        undefined,
        'format 5 is claimed',
      );
      t.same([await holdsOf(all.uid), await holdsOf(kept.uid)], before, 'with the holds it had');
      t.equal((await oldest('ou-kept')).time, second.time);

      // A deleted subscription's holds go with the rest of its data.
      await ok('DELETE', `${P}/subscriptions/ou-all`);
      await waitUntil(
        async () => (await scanKeys(broker.redis, `${broker.prefix}:*${all.uid}:hold*`)).length === 0,
        10_000,
      );
      t.same(await scanKeys(broker.redis, `${broker.prefix}:*${all.uid}:hold*`), [], 'dropped');
    },
  );
}

t.test('a message forwarded to its dead-letter topic is held no more', async (t) => {
  const b = await openPolicyBroker(t);
  await b.setUp('ou-dead');
  const s = await b.setUp('ou-source', {
    deadLetterPolicy: { deadLetterTopic: `projects/${PROJECT}/topics/ou-dead`, maxDeliveryAttempts: 5 },
  });
  await s.publish([{ data: b64('poison') }]);
  const [after] = await s.publish([{ data: b64('fine') }]);
  const counts = () => b.ok('GET', `/v1/projects/${PROJECT}/subscriptions/ou-source/backlog`);
  for (let i = 0; i < 5; i++) {
    const poison = (await s.pull(true, 1))[0];
    await s.nack([poison.ackId]);
  }
  // The next pull hands the poison over to forward, and the fine one goes out.
  const fine = await s.pull(true, 10);
  await waitUntil(async () => (await counts()).unackedMessageCount === 1, 10_000);
  const published = (await b.ok('GET', `/v1/projects/${PROJECT}/topics/ou-source/messages/${after}`)).message
    .publishTime;
  t.equal((await counts()).oldestUnackedPublishTime, published, 'the message after it is the oldest');
  await s.ack(fine.map((r: any) => r.ackId));
  t.equal((await counts()).oldestUnackedPublishTime, undefined);
});
