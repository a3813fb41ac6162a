// A broker on a single region remembers topic records for its publishes (DeliveryService
// rememberTopic). Two brokers share one Redis here, and the second changes topics behind the
// first one's back; on standalone and cluster:
//   - a topic deleted through the other broker refuses the first broker's next publish (404);
//   - created again, it takes the first broker's next publish into the new incarnation only:
//     the new subscription receives it, the old (detached) one does not;
//   - a Redis that lost the topic altogether (its keys deleted) refuses publishes again once the
//     remembered record has expired.
import type { FastifyInstance } from 'fastify';
import t, { type Test } from 'tap';
import { buildApp } from '../../src/app.ts';
import { b64, jsonApi, unb64, type JsonApi } from '../helpers/app.ts';
import { masterNodes, redisTargets, uniquePrefix, type RedisTarget } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';

const P = '/v1/projects/p';

/**
 * Two brokers on one Redis and one key prefix; the first remembers topic records for
 * `rememberTopicMs`, and `topicReads()` counts the records it reads.
 */
async function twoBrokers(t: Test, target: RedisTarget, rememberTopicMs: number) {
  const prefix = uniquePrefix('remembered-topic');
  const redis = target.connect();
  const apps: FastifyInstance[] = [];
  for (let i = 0; i < 2; i++) apps.push(await buildApp({ redis, keyPrefix: prefix, pullWaitMs: 100, rememberTopicMs }));
  t.teardown(async () => {
    await Promise.all(apps.map((app) => app.close()));
    redis.disconnect();
  });
  const topics = apps[0].broker.topics;
  const read = topics.read.bind(topics);
  let reads = 0;
  topics.read = (name) => {
    reads++;
    return read(name);
  };
  return { first: jsonApi(apps[0]), second: jsonApi(apps[1]), prefix, redis, topicReads: () => reads };
}

const publish = (api: JsonApi, text: string) =>
  api('POST', `${P}/topics/orders:publish`, { messages: [{ data: b64(text) }] });

async function pulled(api: JsonApi, subscription: string): Promise<string[]> {
  const { body } = await api('POST', `${P}/subscriptions/${subscription}:pull`, {
    maxMessages: 10,
    returnImmediately: true,
  });
  return (body.receivedMessages ?? []).map((m: any) => unb64(m.message.data));
}

for (const target of redisTargets()) {
  t.test(`${target.name}: a topic deleted or created again through another broker`, async (t) => {
    const { first, second, topicReads } = await twoBrokers(t, target, 60_000);
    t.equal((await second('PUT', `${P}/topics/orders`, {})).status, 200);
    t.equal((await second('PUT', `${P}/subscriptions/old-orders`, { topic: 'projects/p/topics/orders' })).status, 200);
    t.equal((await publish(first, 'one')).status, 200, 'published');
    t.equal((await publish(first, 'one and a half')).status, 200, 'published again');
    t.equal(topicReads(), 1, 'from a remembered record the second time');
    t.equal((await second('DELETE', `${P}/topics/orders`)).status, 200);
    const afterDelete = await publish(first, 'two');
    t.equal(afterDelete.status, 404, 'deleted through the other broker: refused');
    t.equal(afterDelete.body.error.status, 'NOT_FOUND');
    t.equal(topicReads(), 2, 'the script refused the remembered incarnation, and the record was read again');

    t.equal((await second('PUT', `${P}/topics/orders`, {})).status, 200);
    t.equal((await second('PUT', `${P}/subscriptions/new-orders`, { topic: 'projects/p/topics/orders' })).status, 200);
    t.equal((await publish(first, 'three')).status, 200, 'created again: accepted');
    t.equal((await publish(first, 'four')).status, 200, 'and again, from the remembered new record');
    t.equal(topicReads(), 3, 'one more read, for the new incarnation');
    t.same(await pulled(second, 'new-orders'), ['three', 'four'], 'the new incarnation has them');
    t.same(
      await pulled(second, 'old-orders'),
      ['one', 'one and a half'],
      'the old subscription keeps only what it held',
    );
  });

  t.test(`${target.name}: a topic whose keys are gone is refused once the remembered record expires`, async (t) => {
    const { first, second, prefix, redis } = await twoBrokers(t, target, 200);
    t.equal((await second('PUT', `${P}/topics/orders`, {})).status, 200);
    t.equal((await publish(first, 'one')).status, 200);
    // Redis loses everything of this prefix, as after a restart without its append-only file.
    for (const node of masterNodes(redis)) {
      const keys = await node.keys(`${prefix}:*`);
      if (keys.length) await Promise.all(keys.map((key) => node.del(key)));
    }
    const refused = await waitUntil(async () => (await publish(first, 'later')).status === 404, 5_000, 100);
    t.ok(refused, 'publishes are refused again');
  });
}
