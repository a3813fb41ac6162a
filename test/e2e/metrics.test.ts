// GET /metrics (src/broker/metrics.ts) against a known workload on a ManualClock: publish N, ack M,
// let K leases expire, fail exactly-once acks, forward to a dead-letter topic; the counters and
// gauges say so, labelled by project, subscription and topic, and the request metrics name the
// route and the Pub/Sub status. Over gRPC the request metrics name the RPC.

import { existsSync, readFileSync } from 'node:fs';
import t from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { packagePath } from '../../src/paths.ts';
import { buildApp } from '../../src/app.ts';
import { b64, jsonApi, okApi, startBroker } from '../helpers/app.ts';
import { sampleValue, samplesOf } from '../helpers/metrics.ts';
import { redisTargets } from '../helpers/redis.ts';
import { rpc, rpcError, startGrpcBroker, topicName } from '../grpc/_client.ts';

const P = '/v1/projects/mp';
const PUBLISH_ROUTE = 'POST /v1/projects/:project/topics/:topic:publish';

for (const target of redisTargets()) {
  t.test(`${target.name}: the metrics count a known workload`, async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'metrics' });
    const ok = okApi(broker.api);
    const scrape = async () => {
      const response = await broker.app.inject({ method: 'GET', url: '/metrics' });
      t.equal(response.statusCode, 200);
      t.match(response.headers['content-type'], /^text\/plain; version=0\.0\.4/);
      return response.body;
    };
    const of = (sub: string) => ({ project: 'mp', subscription: sub, topic: 'jobs' });

    await ok('PUT', `${P}/topics/jobs`, {});
    await ok('PUT', `${P}/topics/jobs-dead`, {});
    await ok('PUT', `${P}/subscriptions/work`, { topic: 'projects/mp/topics/jobs', ackDeadlineSeconds: 10 });
    await ok('PUT', `${P}/subscriptions/strict`, {
      topic: 'projects/mp/topics/jobs',
      enableExactlyOnceDelivery: true,
      ackDeadlineSeconds: 10,
      deadLetterPolicy: { deadLetterTopic: 'projects/mp/topics/jobs-dead', maxDeliveryAttempts: 5 },
    });

    // N = 5 messages in one request, and a publish refused.
    await ok('POST', `${P}/topics/jobs:publish`, {
      messages: [1, 2, 3, 4, 5].map((i) => ({ data: b64('x'.repeat(i * 100)), attributes: { k: 'v' } })),
    });
    t.equal((await broker.api('POST', `${P}/topics/jobs:publish`, { messages: [] })).status, 400);
    clock.advanceSeconds(1);

    // work: 5 leased, M = 3 acked, K = 2 expire and are leased again.
    const first = (await ok('POST', `${P}/subscriptions/work:pull`, { maxMessages: 10 })).receivedMessages;
    await ok('POST', `${P}/subscriptions/work:acknowledge`, { ackIds: first.slice(0, 3).map((r: any) => r.ackId) });
    clock.advanceSeconds(11);
    const again = (await ok('POST', `${P}/subscriptions/work:pull`, { maxMessages: 10 })).receivedMessages;
    t.equal(again.length, 2, 'the two expired leases are delivered again');

    // strict: one valid ack, one ack ID that is stale by then (a client-side exactly-once failure).
    const strict = (await ok('POST', `${P}/subscriptions/strict:pull`, { maxMessages: 1 })).receivedMessages;
    await ok('POST', `${P}/subscriptions/strict:acknowledge`, { ackIds: [strict[0].ackId] });
    const stale = await broker.api('POST', `${P}/subscriptions/strict:acknowledge`, { ackIds: [strict[0].ackId] });
    t.equal(stale.status, 400, 'the second ack of one delivery fails');
    // strict: the next message fails five times and is forwarded to the dead-letter topic.
    for (let i = 0; i < 5; i++) {
      const [failing] = (await ok('POST', `${P}/subscriptions/strict:pull`, { maxMessages: 1 })).receivedMessages;
      await ok('POST', `${P}/subscriptions/strict:modifyAckDeadline`, {
        ackIds: [failing.ackId],
        ackDeadlineSeconds: 0,
      });
    }
    await ok('POST', `${P}/subscriptions/strict:pull`, { maxMessages: 1 });

    const metrics = await scrape();
    const value = (name: string, labels: Record<string, string>) => sampleValue(metrics, name, labels);
    t.equal(value('pubsub_topic_send_request_count_total', { topic: 'jobs', response_code: 'OK' }), 1);
    t.equal(value('pubsub_topic_send_request_count_total', { topic: 'jobs', response_code: 'INVALID_ARGUMENT' }), 1);
    t.equal(value('pubsub_topic_send_message_operation_count_total', { project: 'mp', topic: 'jobs' }), 5);
    t.equal(value('pubsub_topic_message_sizes_count', { topic: 'jobs' }), 5);
    t.equal(value('pubsub_topic_message_sizes_sum', { topic: 'jobs' }), 1500 + 5 * 2, 'data and attributes');
    t.equal(value('pubsub_topic_message_sizes_bucket', { topic: 'jobs', le: '100' }), 0);
    t.equal(value('pubsub_topic_message_sizes_bucket', { topic: 'jobs', le: '1000' }), 5);
    t.equal(value('pubsub_topic_send_message_operation_count_total', { topic: 'jobs-dead' }), 1, 'the forward');

    t.equal(value('pubsub_subscription_sent_message_count_total', of('work')), 7, '5 leased, then 2 again');
    t.equal(value('pubsub_subscription_ack_message_count_total', of('work')), 3);
    t.equal(value('pubsub_subscription_expired_ack_deadlines_count_total', of('work')), 2);
    t.equal(value('pubsub_subscription_num_undelivered_messages', of('work')), 2);
    t.equal(value('pubsub_subscription_num_outstanding_messages', of('work')), 2);
    t.same(samplesOf(metrics, 'pubsub_subscription_num_unacked_messages_by_region'), [], 'no regions: no split');
    const age = value('pubsub_subscription_oldest_unacked_message_age', of('work'));
    t.ok(age !== undefined && age >= 12 && age < 13, `the oldest is 12 s old by the manual clock (${age})`);

    t.equal(value('pubsub_subscription_ack_message_count_total', of('strict')), 1);
    t.equal(
      value('pubsub_subscription_exactly_once_warning_count_total', {
        ...of('strict'),
        reason: 'client',
        operation_type: 'ack',
      }),
      1,
    );
    t.equal(value('pubsub_subscription_dead_letter_message_count_total', of('strict')), 1);
    t.equal(
      value('pubsub_subscription_num_undelivered_messages', of('strict')),
      3,
      'five less the acked and the forwarded',
    );

    t.equal(value('pubsub_request_count_total', { method: PUBLISH_ROUTE, response_code: 'OK' }), 1);
    t.equal(value('pubsub_request_count_total', { method: PUBLISH_ROUTE, response_code: 'INVALID_ARGUMENT' }), 1);
    t.equal(value('pubsub_request_latencies_seconds_count', { method: PUBLISH_ROUTE }), 2);
    t.ok(samplesOf(metrics, 'process_cpu_seconds_total').length === 1, 'and the process metrics');

    // A deleted subscription leaves the gauges; the counters of this process stay.
    await ok('DELETE', `${P}/subscriptions/work`);
    const after = await scrape();
    t.equal(sampleValue(after, 'pubsub_subscription_num_undelivered_messages', of('work')), undefined);
    t.equal(sampleValue(after, 'pubsub_subscription_ack_message_count_total', of('work')), 3);
  });
}

for (const target of redisTargets()) {
  t.test(`${target.name}: each broker on one store scrapes what another changed, at once`, async (t) => {
    const a = await startBroker(t, { target, name: 'metrics-two' });
    const redisB = target.connect();
    const b = await buildApp({ redis: redisB, keyPrefix: a.prefix, pullWaitMs: 200 });
    t.teardown(async () => {
      await b.close();
      redisB.disconnect();
    });
    const apiB = jsonApi(b);
    const undelivered = async (sub: string) =>
      sampleValue(
        (await a.app.inject({ method: 'GET', url: '/metrics' })).body,
        'pubsub_subscription_num_undelivered_messages',
        { project: 'mp', subscription: sub, topic: 'shared' },
      );
    t.equal((await a.api('PUT', `${P}/topics/shared`, {})).status, 200);
    t.equal((await a.api('PUT', `${P}/subscriptions/first`, { topic: 'projects/mp/topics/shared' })).status, 200);
    t.equal(await undelivered('first'), 0, 'broker A has read the records once');

    t.equal((await apiB('PUT', `${P}/subscriptions/second`, { topic: 'projects/mp/topics/shared' })).status, 200);
    const messages = [{ data: b64('one') }, { data: b64('two') }];
    t.equal((await apiB('POST', `${P}/topics/shared:publish`, { messages })).status, 200);
    t.equal(await undelivered('second'), 2, 'a subscription created through B is in the next scrape of A');
    t.equal(await undelivered('first'), 2);

    t.equal((await apiB('DELETE', `${P}/subscriptions/first`)).status, 200);
    t.equal(await undelivered('first'), undefined, 'one deleted through B has left it');
    t.equal(await undelivered('second'), 2);
  });
}

t.test('gRPC calls are counted by RPC and status', async (t) => {
  const b = await startGrpcBroker(t);
  await rpc(b.publisher, 'CreateTopic', { name: topicName('metered') });
  t.equal((await rpcError(b.publisher, 'GetTopic', { topic: topicName('missing') })).code, 5);
  const metrics = (await b.app.inject({ method: 'GET', url: '/metrics' })).body;
  const count = (method: string, code: string) =>
    sampleValue(metrics, 'pubsub_request_count_total', {
      method: `/google.pubsub.v1.Publisher/${method}`,
      response_code: code,
    });
  t.equal(count('CreateTopic', 'OK'), 1);
  t.equal(count('GetTopic', 'NOT_FOUND'), 1);
  t.equal(
    sampleValue(metrics, 'pubsub_request_latencies_seconds_count', { method: '/google.pubsub.v1.Publisher/GetTopic' }),
    1,
  );
});

t.test('the Grafana dashboard and Prometheus set-up read metrics the broker serves', async (t) => {
  const broker = await startBroker(t, { name: 'metrics-dashboard' });
  const served = new Set(
    [...(await broker.app.inject({ method: 'GET', url: '/metrics' })).body.matchAll(/^# TYPE (\S+) /gm)].map(
      (m) => m[1],
    ),
  );
  const dashboard = JSON.parse(
    readFileSync(packagePath('docs/monitoring/grafana/dashboards/pubsub-broker.json'), 'utf8'),
  );
  const expressions = [
    ...dashboard.panels.flatMap((panel: { targets: { expr: string }[] }) => panel.targets.map((target) => target.expr)),
    ...dashboard.templating.list.map((variable: { query: { query: string } }) => variable.query.query),
  ];
  const used = new Set(
    expressions.flatMap((expr: string) => [...expr.matchAll(/\b((?:pubsub|process)_\w+)/g)].map((m) => m[1])),
  );
  t.ok(used.size >= 10, `the dashboard reads ${used.size} metrics`);
  for (const name of used) {
    t.ok(served.has(name.replace(/_bucket$/, '')), `${name} is served`);
  }
  const prometheus = readFileSync(packagePath('docs/monitoring/prometheus.yml'), 'utf8');
  const compose = readFileSync(packagePath('docker-compose.yml'), 'utf8');
  t.match(prometheus, /targets: \["broker:8085"\]/, 'Prometheus scrapes the compose broker');
  t.match(compose, /PORT: "8085"/, 'which listens there');
  for (const [, mounted] of compose.matchAll(/- \.\/(docs\/monitoring\/[^:]+):/g)) {
    t.ok(existsSync(packagePath(mounted)), `${mounted} exists`);
  }
});
