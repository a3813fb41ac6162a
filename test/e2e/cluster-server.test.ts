// The broker process on a Redis Cluster (REDIS_CLUSTER_NODES): publish, long-poll pull woken by a
// publish, ack, exactly-once failure.

import t from 'tap';
import { call, startBrokerProcess, stopProcess } from '../helpers/processes.ts';
import { testClusterNodes, uniquePrefix } from '../helpers/redis.ts';

t.test('broker process against a 3-master cluster', async (t) => {
  const nodes = testClusterNodes()
    .map(({ host, port }) => `${host}:${port}`)
    .join(',');
  const broker = await startBrokerProcess({
    REDIS_CLUSTER_NODES: nodes,
    KEY_PREFIX: uniquePrefix('cluster-server'),
    PULL_WAIT_SECONDS: '10',
  });
  t.teardown(() => stopProcess(broker.child));
  const B = '/v1/projects/p';
  t.equal((await call(broker.url, 'PUT', `${B}/topics/orders`, {})).status, 200);
  t.equal(
    (
      await call(broker.url, 'PUT', `${B}/subscriptions/eod`, {
        topic: 'projects/p/topics/orders',
        enableExactlyOnceDelivery: true,
      })
    ).status,
    200,
  );

  const waiting = call(broker.url, 'POST', `${B}/subscriptions/eod:pull`, { maxMessages: 5 });
  await new Promise((done) => setTimeout(done, 300));
  const published = await call(broker.url, 'POST', `${B}/topics/orders:publish`, { messages: [{ data: 'aGk=' }] });
  t.equal(published.status, 200);
  const pulled = await Promise.race([
    waiting,
    new Promise<{ status: number; body: any }>((done) => setTimeout(() => done({ status: -1, body: {} }), 8000)),
  ]);
  t.equal(pulled.status, 200, 'the long poll was woken by the publish');
  const ackId = pulled.body.receivedMessages[0].ackId;
  t.same((await call(broker.url, 'POST', `${B}/subscriptions/eod:acknowledge`, { ackIds: [ackId] })).body, {});
  const again = await call(broker.url, 'POST', `${B}/subscriptions/eod:acknowledge`, { ackIds: [ackId] });
  t.equal(again.body.error.details[0].metadata[ackId], 'PERMANENT_FAILURE_INVALID_ACK_ID');
});
