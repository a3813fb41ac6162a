// A region whose data lives on a Redis Cluster, next to one on a standalone Redis: every
// control-plane and data-plane script keeps its keys in one slot, so metadata copies, the sync,
// publish, pull and acks across the two regions run on the cluster unchanged (no CROSSSLOT).

import t from 'tap';
import { buildApp } from '../../src/app.ts';
import { b64, jsonApi, unb64, waitReady } from '../helpers/app.ts';
import { redisTargets, uniquePrefix, type RedisClient } from '../helpers/redis.ts';

const targets = redisTargets();
const standalone = targets.find((target) => target.name === 'standalone')!;
const cluster = targets.find((target) => target.name === 'cluster');

t.test(
  'a standalone region and a cluster region',
  { skip: cluster ? false : 'no test cluster (TEST_SKIP_CLUSTER)' },
  async (t) => {
    const prefix = uniquePrefix('cluster-region');
    const connections: RedisClient[] = [];
    const connect = (name: 'standalone' | 'cluster') => {
      const client = (name === 'cluster' ? cluster! : standalone).connect();
      connections.push(client);
      return client;
    };
    const build = async (local: 'solo' | 'clustered') => {
      const own = local === 'solo' ? 'standalone' : 'cluster';
      const other = local === 'solo' ? 'cluster' : 'standalone';
      const app = await buildApp({
        redis: connect(own),
        subscriber: connect(own),
        keyPrefix: prefix,
        pullWaitMs: 200,
        regions: {
          local,
          others: [
            { name: local === 'solo' ? 'clustered' : 'solo', redis: connect(other), subscriber: connect(other) },
          ],
        },
      });
      t.teardown(() => app.close());
      return app;
    };
    t.teardown(() => {
      for (const client of connections) client.disconnect();
    });
    const solo = await build('solo');
    const clustered = await build('clustered');
    const api = (app: typeof solo, method: string, url: string, body?: unknown) => jsonApi(app)(method, url, body);
    for (const app of [solo, clustered]) await waitReady(app);

    t.equal(
      (await api(clustered, 'PUT', '/v1/projects/p/topics/both', {})).status,
      200,
      'a topic created through the cluster region',
    );
    const created = await api(solo, 'PUT', '/v1/projects/p/subscriptions/both-sub', {
      topic: 'projects/p/topics/both',
      enableExactlyOnceDelivery: true,
      enableMessageOrdering: true,
    });
    t.equal(created.status, 200, 'a subscription created through the standalone region');
    t.equal((await api(clustered, 'GET', '/v1/projects/p/subscriptions/both-sub')).status, 200);
    for (const [app, text] of [
      [solo, 'via solo'],
      [clustered, 'via cluster'],
    ] as const) {
      const published = await api(app, 'POST', '/v1/projects/p/topics/both:publish', {
        messages: [{ data: b64(text), orderingKey: 'k' }],
      });
      t.equal(published.status, 200, `publish ${text}`);
    }
    const pulled = await api(clustered, 'POST', '/v1/projects/p/subscriptions/both-sub:pull', {
      maxMessages: 10,
      returnImmediately: true,
    });
    t.same(
      pulled.body.receivedMessages.map((m: any) => unb64(m.message.data)),
      ['via cluster', 'via solo'],
      'both, the local region first',
    );
    const acked = await api(solo, 'POST', '/v1/projects/p/subscriptions/both-sub:acknowledge', {
      ackIds: pulled.body.receivedMessages.map((m: any) => m.ackId),
    });
    t.same(acked, { status: 200, body: {} }, 'acked through the other region');
    t.equal((await api(solo, 'DELETE', '/v1/projects/p/subscriptions/both-sub')).status, 200);
    t.equal(
      (await api(clustered, 'GET', '/v1/projects/p/subscriptions/both-sub')).status,
      404,
      'the delete reached the cluster',
    );
    await solo.broker.controlPlane.requestSync();
    t.ok(clustered.broker.regions.local.usable, 'a sync over both leaves the cluster region usable');
  },
);
