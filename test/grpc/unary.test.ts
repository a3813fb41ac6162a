// The unary RPCs of google.pubsub.v1 Publisher and Subscriber over gRPC, spoken with a raw grpc-js
// client: each implemented RPC's answer and its error codes, the limits (the same as over REST),
// the per-ack-ID failures of exactly-once acks in the grpc-status-details-bin trailer, snapshots
// and seeks to them, and the conversion of Durations, Timestamps and FieldMasks.

import { status as grpcStatus } from '@grpc/grpc-js';
import t from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import {
  ackFailures,
  ackIdsOf,
  P,
  type ReceivedMessage,
  rpc,
  rpcError,
  startGrpcBroker,
  statusDetails,
  subName,
  textOf,
  topicName,
} from './_client.ts';

t.test('topics', async (t) => {
  const b = await startGrpcBroker(t);
  const created = await rpc(b.publisher, 'CreateTopic', {
    name: topicName('orders'),
    labels: { team: 'a' },
    messageRetentionDuration: { seconds: 600 },
  });
  t.match(created, { name: topicName('orders'), labels: { team: 'a' }, messageRetentionDuration: { seconds: '600' } });
  const rest = await b.ok('GET', `/v1/projects/${P}/topics/orders`);
  t.equal(rest.messageRetentionDuration, '600s', 'a Duration of 600 s is "600s" over REST');
  const fractional = await rpc(b.publisher, 'CreateTopic', {
    name: topicName('fractional'),
    messageRetentionDuration: { seconds: 700, nanos: 500_000_000 },
  });
  t.match(fractional.messageRetentionDuration, { seconds: '700', nanos: 500_000_000 }, 'nanos survive');
  t.equal((await b.ok('GET', `/v1/projects/${P}/topics/fractional`)).messageRetentionDuration, '700.5s');

  const code = async (method: string, request: object) => (await rpcError(b.publisher, method, request)).code;
  t.equal(await code('CreateTopic', { name: topicName('orders') }), grpcStatus.ALREADY_EXISTS, 'created twice');
  t.equal(await code('CreateTopic', {}), grpcStatus.INVALID_ARGUMENT, 'no name');
  t.equal(await code('CreateTopic', { name: topicName('ab') }), grpcStatus.INVALID_ARGUMENT, 'an ID too short');
  t.equal(await code('CreateTopic', { name: 'orders' }), grpcStatus.INVALID_ARGUMENT, 'not a resource name');
  t.equal(
    await code('CreateTopic', { name: topicName('short'), messageRetentionDuration: { seconds: 5 } }),
    grpcStatus.INVALID_ARGUMENT,
    'a retention below 10 minutes',
  );
  const kms = await rpcError(b.publisher, 'CreateTopic', { name: topicName('kms'), kmsKeyName: 'k' });
  t.equal(kms.code, grpcStatus.UNIMPLEMENTED, 'kmsKeyName: UNIMPLEMENTED');
  t.match(kms.details, /kmsKeyName/, 'naming the field');

  t.match(await rpc(b.publisher, 'GetTopic', { topic: topicName('orders') }), { name: topicName('orders') });
  t.equal(await code('GetTopic', { topic: topicName('nope') }), grpcStatus.NOT_FOUND, 'GetTopic of no topic');
  t.equal(await code('GetTopic', {}), grpcStatus.INVALID_ARGUMENT, 'GetTopic without a topic');

  const updated = await rpc(b.publisher, 'UpdateTopic', {
    topic: { name: topicName('orders'), labels: { team: 'b' }, messageRetentionDuration: { seconds: 1200 } },
    updateMask: { paths: ['message_retention_duration'] },
  });
  t.match(updated, { labels: { team: 'a' }, messageRetentionDuration: { seconds: '1200' } }, 'snake_case mask path');
  t.equal(
    await code('UpdateTopic', {
      topic: { name: topicName('orders') },
      updateMask: { paths: ['no_such_field'] },
    }),
    grpcStatus.INVALID_ARGUMENT,
    'an unknown mask path',
  );
  t.equal(
    await code('UpdateTopic', { topic: { name: topicName('nope'), labels: {} }, updateMask: { paths: ['labels'] } }),
    grpcStatus.NOT_FOUND,
    'UpdateTopic of no topic',
  );

  for (const id of ['tp1', 'tp2', 'tp3']) await b.topic(id);
  const names: string[] = [];
  let pageToken: string | undefined;
  do {
    const page = await rpc(b.publisher, 'ListTopics', { project: `projects/${P}`, pageSize: 2, pageToken });
    t.ok(page.topics.length <= 2, 'pages of at most pageSize');
    names.push(...page.topics.map((topic: { name: string }) => topic.name));
    pageToken = page.nextPageToken || undefined;
  } while (pageToken);
  t.strictSame(names.sort(), ['fractional', 'orders', 'tp1', 'tp2', 'tp3'].map(topicName), 'ListTopics, paged');
  t.equal(await code('ListTopics', { project: 'nope' }), grpcStatus.INVALID_ARGUMENT, 'ListTopics of no project');

  await b.subscription('sub-a', 'orders');
  await b.subscription('sub-b', 'orders');
  const subs = await rpc(b.publisher, 'ListTopicSubscriptions', { topic: topicName('orders') });
  t.strictSame(subs.subscriptions.sort(), [subName('sub-a'), subName('sub-b')], 'ListTopicSubscriptions');

  t.strictSame(await rpc(b.publisher, 'DeleteTopic', { topic: topicName('orders') }), {}, 'DeleteTopic');
  t.equal(await code('GetTopic', { topic: topicName('orders') }), grpcStatus.NOT_FOUND, 'then it is gone');
  t.equal(await code('DeleteTopic', { topic: topicName('orders') }), grpcStatus.NOT_FOUND, 'deleted twice');
  t.match(
    await rpc(b.subscriber, 'GetSubscription', { subscription: subName('sub-a') }),
    { topic: '_deleted-topic_' },
    'its subscriptions stay',
  );
});

t.test('subscriptions', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  const created = await rpc(b.subscriber, 'CreateSubscription', {
    name: subName('sub-a'),
    topic: topicName('topic1'),
    ackDeadlineSeconds: 30,
    messageRetentionDuration: { seconds: 600 },
    expirationPolicy: { ttl: { seconds: 86_400 } },
  });
  t.match(created, {
    name: subName('sub-a'),
    topic: topicName('topic1'),
    ackDeadlineSeconds: 30,
    messageRetentionDuration: { seconds: '600' },
    expirationPolicy: { ttl: { seconds: '86400' } },
  });
  const rest = await b.ok('GET', `/v1/projects/${P}/subscriptions/sub-a`);
  t.match(rest, { messageRetentionDuration: '600s', expirationPolicy: { ttl: '86400s' } }, 'the same over REST');

  const code = async (method: string, request: object) => (await rpcError(b.subscriber, method, request)).code;
  const sub = (id: string, extra: object = {}) => ({ name: subName(id), topic: topicName('topic1'), ...extra });
  t.equal(await code('CreateSubscription', sub('sub-a')), grpcStatus.ALREADY_EXISTS, 'created twice');
  t.equal(
    await code('CreateSubscription', { name: subName('sub-b'), topic: topicName('nope') }),
    grpcStatus.NOT_FOUND,
    'of no topic',
  );
  t.equal(await code('CreateSubscription', { topic: topicName('topic1') }), grpcStatus.INVALID_ARGUMENT, 'no name');
  t.equal(
    await code('CreateSubscription', sub('sub-b', { ackDeadlineSeconds: 5 })),
    grpcStatus.INVALID_ARGUMENT,
    'ackDeadlineSeconds 5',
  );
  for (const [field, extra] of [['bigqueryConfig', { bigqueryConfig: { table: 'p.d.t' } }]] as const) {
    const error = await rpcError(b.subscriber, 'CreateSubscription', sub('sub-c', extra));
    t.equal(error.code, grpcStatus.UNIMPLEMENTED, `${field}: UNIMPLEMENTED`);
    t.match(error.details, new RegExp(field), `naming ${field}`);
  }

  t.match(await rpc(b.subscriber, 'GetSubscription', { subscription: subName('sub-a') }), { name: subName('sub-a') });
  t.equal(await code('GetSubscription', { subscription: subName('nope') }), grpcStatus.NOT_FOUND, 'GetSubscription');
  const updated = await rpc(b.subscriber, 'UpdateSubscription', {
    subscription: { name: subName('sub-a'), ackDeadlineSeconds: 45, labels: { ignored: 'yes' } },
    updateMask: { paths: ['ack_deadline_seconds'] },
  });
  t.equal(updated.ackDeadlineSeconds, 45, 'snake_case mask path applied');
  t.notOk(updated.labels?.ignored, 'what the mask does not name is not changed');
  t.equal(
    await code('UpdateSubscription', {
      subscription: { name: subName('sub-a'), enableMessageOrdering: true },
      updateMask: { paths: ['enable_message_ordering'] },
    }),
    grpcStatus.INVALID_ARGUMENT,
    'an immutable field in the mask',
  );

  await b.subscription('sub-b', 'topic1');
  const list = await rpc(b.subscriber, 'ListSubscriptions', { project: `projects/${P}` });
  t.strictSame(
    list.subscriptions.map((s: { name: string }) => s.name).sort(),
    [subName('sub-a'), subName('sub-b')],
    'ListSubscriptions',
  );
  t.strictSame(await rpc(b.subscriber, 'DeleteSubscription', { subscription: subName('sub-b') }), {}, 'Delete');
  t.equal(await code('DeleteSubscription', { subscription: subName('sub-b') }), grpcStatus.NOT_FOUND, 'deleted twice');
});

t.test('retryPolicy: Durations in and out, update mask, bad values', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  const created = await rpc(b.subscriber, 'CreateSubscription', {
    name: subName('retry'),
    topic: topicName('topic1'),
    retryPolicy: { minimumBackoff: { seconds: 1, nanos: 500_000_000 }, maximumBackoff: { seconds: 20 } },
  });
  t.match(created.retryPolicy, {
    minimumBackoff: { seconds: '1', nanos: 500_000_000 },
    maximumBackoff: { seconds: '20', nanos: 0 },
  });
  t.match(
    await b.ok('GET', `/v1/projects/${P}/subscriptions/retry`),
    { retryPolicy: { minimumBackoff: '1.5s', maximumBackoff: '20s' } },
    'the same over REST',
  );
  const defaults = await rpc(b.subscriber, 'UpdateSubscription', {
    subscription: { name: subName('retry'), retryPolicy: {} },
    updateMask: { paths: ['retry_policy'] },
  });
  t.match(
    defaults.retryPolicy,
    { minimumBackoff: { seconds: '10' }, maximumBackoff: { seconds: '600' } },
    'an empty policy: the defaults',
  );
  for (const [why, retryPolicy] of [
    ['a maximum below the minimum', { minimumBackoff: { seconds: 5 }, maximumBackoff: { seconds: 4 } }],
    ['a backoff over 600 s', { minimumBackoff: { seconds: 601 } }],
    ['a negative backoff', { minimumBackoff: { seconds: -1 } }],
  ] as const) {
    const error = await rpcError(b.subscriber, 'UpdateSubscription', {
      subscription: { name: subName('retry'), retryPolicy },
      updateMask: { paths: ['retry_policy'] },
    });
    t.equal(error.code, grpcStatus.INVALID_ARGUMENT, `${why}: INVALID_ARGUMENT (${error.details})`);
  }
  t.match(
    await b.ok('GET', `/v1/projects/${P}/subscriptions/retry`),
    { retryPolicy: { minimumBackoff: '10s', maximumBackoff: '600s' } },
    'the refused updates changed nothing',
  );
  const removed = await rpc(b.subscriber, 'UpdateSubscription', {
    subscription: { name: subName('retry') },
    updateMask: { paths: ['retry_policy'] },
  });
  t.notOk(removed.retryPolicy, 'removed by a mask without a value');
  t.notOk('retryPolicy' in (await b.ok('GET', `/v1/projects/${P}/subscriptions/retry`)), 'and so over REST');
});

t.test('deadLetterPolicy: set and read back, checked, and delivery_attempt on Pull', async (t) => {
  const b = await startGrpcBroker(t, { pullWaitMs: 200 });
  await b.topic('topic1');
  await b.topic('dead');
  await b.subscription('plain', 'topic1');
  const policy = { deadLetterTopic: topicName('dead'), maxDeliveryAttempts: 7 };
  const created = await rpc(b.subscriber, 'CreateSubscription', {
    name: subName('lettered'),
    topic: topicName('topic1'),
    deadLetterPolicy: policy,
  });
  t.match(created.deadLetterPolicy, policy, 'created');
  t.match(
    (await b.ok('GET', `/v1/projects/${P}/subscriptions/lettered`)).deadLetterPolicy,
    policy,
    'the same over REST',
  );
  for (const [why, deadLetterPolicy, status] of [
    ['a topic that does not exist', { deadLetterTopic: topicName('absent') }, grpcStatus.NOT_FOUND],
    ['4 attempts', { deadLetterTopic: topicName('dead'), maxDeliveryAttempts: 4 }, grpcStatus.INVALID_ARGUMENT],
    ['not a topic name', { deadLetterTopic: 'dead' }, grpcStatus.INVALID_ARGUMENT],
  ] as const) {
    const error = await rpcError(b.subscriber, 'UpdateSubscription', {
      subscription: { name: subName('lettered'), deadLetterPolicy },
      updateMask: { paths: ['dead_letter_policy'] },
    });
    t.equal(error.code, status, `${why}: ${grpcStatus[status]} (${error.details})`);
  }
  t.match((await b.ok('GET', `/v1/projects/${P}/subscriptions/lettered`)).deadLetterPolicy, policy, 'unchanged');

  await b.publish('topic1', [{ data: 'again' }]);
  const pullOf = async (id: string) =>
    (
      (await rpc(b.subscriber, 'Pull', { subscription: subName(id), maxMessages: 1 }))
        .receivedMessages as ReceivedMessage[]
    )[0];
  const plain = await pullOf('plain');
  t.notOk(plain.deliveryAttempt, 'no delivery_attempt without a dead-letter policy');
  for (let attempt = 1; attempt <= 3; attempt++) {
    const received = await pullOf('lettered');
    t.equal(received.deliveryAttempt, attempt, `delivery_attempt ${attempt}`);
    await rpc(b.subscriber, 'ModifyAckDeadline', { subscription: subName('lettered'), ackIds: [received.ackId] });
  }
});

t.test('publish limits, as over REST', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const publish = (messages: object[], topic = topicName('topic1')) => rpc(b.publisher, 'Publish', { topic, messages });
  const refused = async (what: string, messages: object[], code: number = grpcStatus.INVALID_ARGUMENT) => {
    const error = await rpcError(b.publisher, 'Publish', { topic: topicName('topic1'), messages });
    t.equal(error.code, code, `${what}: ${grpcStatus[code]} (${error.details.slice(0, 120)})`);
  };
  const data = Buffer.from('x');

  t.equal((await publish(Array.from({ length: 1000 }, () => ({ data })))).messageIds.length, 1000, '1000 messages');
  await refused(
    '1001 messages',
    Array.from({ length: 1001 }, () => ({ data })),
  );
  await refused('no messages', []);
  await refused('an empty message', [{}]);
  await refused('empty data and no attributes', [{ data: Buffer.alloc(0) }]);
  t.equal((await publish([{ attributes: { only: 'attributes' } }])).messageIds.length, 1, 'attributes alone');
  await refused('101 attributes', [
    { data, attributes: Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`k${i}`, 'v'])) },
  ]);
  t.equal(
    (await publish([{ data, attributes: Object.fromEntries(Array.from({ length: 100 }, (_, i) => [`k${i}`, 'v'])) }]))
      .messageIds.length,
    1,
    '100 attributes',
  );
  await refused('an attribute key of 257 bytes', [{ data, attributes: { ['k'.repeat(257)]: 'v' } }]);
  await refused('an attribute value of 1025 bytes', [{ data, attributes: { k: 'v'.repeat(1025) } }]);
  await refused('a goog attribute key', [{ data, attributes: { googThing: 'v' } }]);
  t.equal(
    (await publish([{ data, attributes: { googclient_traceparent: '00-abc-def-01' } }])).messageIds.length,
    1,
    'googclient_traceparent is allowed',
  );
  await refused('an ordering key of 1025 bytes', [{ data, orderingKey: 'k'.repeat(1025) }]);
  await refused(
    'mixed ordering keys',
    [
      { data, orderingKey: 'a' },
      { data, orderingKey: 'b' },
    ],
    grpcStatus.FAILED_PRECONDITION,
  );
  await refused('an ordering key and none', [{ data, orderingKey: 'a' }, { data }], grpcStatus.FAILED_PRECONDITION);
  t.equal(
    (await rpcError(b.publisher, 'Publish', { topic: topicName('nope'), messages: [{ data }] })).code,
    grpcStatus.NOT_FOUND,
    'a topic that does not exist',
  );
  t.equal(
    (await rpcError(b.publisher, 'Publish', { messages: [{ data }] })).code,
    grpcStatus.INVALID_ARGUMENT,
    'no topic',
  );

  // 10 MB of data in one request (10 messages of 1 MB) works; one byte more fails cleanly.
  const mb = Buffer.alloc(1_000_000, 0x61);
  const tenMb = await publish(Array.from({ length: 10 }, () => ({ data: mb })));
  t.equal(tenMb.messageIds.length, 10, 'a 10 MB publish works');
  await refused('10 MB and one byte', [...Array.from({ length: 10 }, () => ({ data: mb })), { data }]);
  await refused('one message over the gRPC receive limit', [{ data: Buffer.alloc(17 * 1024 * 1024) }], 8);
  t.equal((await publish([{ data }])).messageIds.length, 1, 'the connection still works after the refusals');
  const pulled = await rpc(b.subscriber, 'Pull', { subscription: subName('sub1'), maxMessages: 1000 });
  t.ok(pulled.receivedMessages.length > 0, 'and the subscription delivers');
});

t.test('pull, acknowledge, modifyAckDeadline', async (t) => {
  const b = await startGrpcBroker(t, { pullWaitMs: 200 });
  await b.topic('topic1');
  await b.subscription('sub1', 'topic1');
  const code = async (method: string, request: object) => (await rpcError(b.subscriber, method, request)).code;
  const sub = subName('sub1');

  t.equal(await code('Pull', { subscription: sub, maxMessages: 0 }), grpcStatus.INVALID_ARGUMENT, 'maxMessages 0');
  t.equal(await code('Pull', { subscription: sub }), grpcStatus.INVALID_ARGUMENT, 'maxMessages unset (0)');
  t.equal(await code('Pull', { subscription: sub, maxMessages: -1 }), grpcStatus.INVALID_ARGUMENT, 'maxMessages -1');
  t.equal(await code('Pull', { subscription: subName('nope'), maxMessages: 1 }), grpcStatus.NOT_FOUND, 'no such sub');
  t.equal(await code('Pull', { maxMessages: 1 }), grpcStatus.INVALID_ARGUMENT, 'no subscription');
  const empty = await rpc(b.subscriber, 'Pull', { subscription: sub, maxMessages: 5 });
  t.strictSame(empty, {}, 'a pull that waited and found nothing answers no messages');

  const ids = await b.publish('topic1', [{ data: 'p1', attributes: { a: '1' } }, { data: 'p2' }]);
  const pulled = await rpc(b.subscriber, 'Pull', { subscription: sub, maxMessages: 5000 });
  const messages = pulled.receivedMessages as ReceivedMessage[];
  t.strictSame(
    messages.map((m) => [m.message.messageId, textOf(m)]),
    [
      [ids[0], 'p1'],
      [ids[1], 'p2'],
    ],
    'maxMessages above 1000 is capped, not refused',
  );
  t.strictSame(messages[0].message.attributes, { a: '1' }, 'attributes');

  // publishTime is a Timestamp: the same instant as the REST publishTime of the same message.
  await rpc(b.subscriber, 'ModifyAckDeadline', { subscription: sub, ackIds: [messages[0].ackId] });
  const restPull = await b.ok('POST', `/v1/projects/${P}/subscriptions/sub1:pull`, { maxMessages: 1 });
  const restMessage = restPull.receivedMessages[0].message;
  t.equal(restMessage.messageId, ids[0], 'the nacked message, pulled over REST');
  const { seconds, nanos = 0 } = messages[0].message.publishTime;
  const [whole, fraction = ''] = restMessage.publishTime.replace(/Z$/, '').split('.');
  t.equal(seconds, String(Date.parse(`${whole}Z`) / 1000), 'publishTime seconds match REST');
  t.equal(nanos, Number(fraction.padEnd(9, '0')), 'publishTime nanos match REST');
  t.ok(nanos > 0, 'sub-second precision travels');

  t.strictSame(
    await rpc(b.subscriber, 'ModifyAckDeadline', {
      subscription: sub,
      ackIds: [messages[1].ackId],
      ackDeadlineSeconds: 120,
    }),
    {},
    'an extension',
  );
  t.equal(
    await code('ModifyAckDeadline', { subscription: sub, ackIds: [messages[1].ackId], ackDeadlineSeconds: 601 }),
    grpcStatus.INVALID_ARGUMENT,
    'ackDeadlineSeconds 601',
  );
  t.equal(
    await code('ModifyAckDeadline', { subscription: sub, ackIds: [messages[1].ackId], ackDeadlineSeconds: -1 }),
    grpcStatus.INVALID_ARGUMENT,
    'ackDeadlineSeconds -1',
  );
  t.equal(await code('ModifyAckDeadline', { subscription: sub, ackIds: [] }), grpcStatus.INVALID_ARGUMENT, 'no IDs');
  t.strictSame(await rpc(b.subscriber, 'Acknowledge', { subscription: sub, ackIds: [messages[1].ackId] }), {}, 'ack');
  t.strictSame(
    await rpc(b.subscriber, 'Acknowledge', { subscription: sub, ackIds: [messages[1].ackId] }),
    {},
    'a stale ack ID is ignored (not exactly-once)',
  );
  t.equal(await code('Acknowledge', { subscription: sub, ackIds: [] }), grpcStatus.INVALID_ARGUMENT, 'no ack IDs');
  t.equal(
    await code('Acknowledge', { subscription: sub, ackIds: ['not-an-ack-id'] }),
    grpcStatus.INVALID_ARGUMENT,
    'a malformed ack ID',
  );
  t.equal(
    await code('Acknowledge', { subscription: subName('nope'), ackIds: [messages[1].ackId] }),
    grpcStatus.NOT_FOUND,
    'ack on no such subscription',
  );
  const restAck = await b.api('POST', `/v1/projects/${P}/subscriptions/sub1:acknowledge`, {
    ackIds: [restPull.receivedMessages[0].ackId],
  });
  t.equal(restAck.status, 200, 'acked over REST');
  t.strictSame(await rpc(b.subscriber, 'Pull', { subscription: sub, maxMessages: 5 }), {}, 'nothing is left');
});

t.test('exactly-once ack failures carry an ErrorInfo in grpc-status-details-bin', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('topic1');
  await b.subscription('eod', 'topic1', { enableExactlyOnceDelivery: true });
  const sub = subName('eod');
  await b.publish('topic1', [{ data: 'e1' }, { data: 'e2' }, { data: 'e3' }, { data: 'e4' }]);
  const pulled = (await rpc(b.subscriber, 'Pull', { subscription: sub, maxMessages: 10 }))
    .receivedMessages as ReceivedMessage[];
  const [e1, e2, e3, e4] = ackIdsOf(pulled);

  t.strictSame(await rpc(b.subscriber, 'Acknowledge', { subscription: sub, ackIds: [e1] }), {}, 'first ack');
  const again = await rpcError(b.subscriber, 'Acknowledge', { subscription: sub, ackIds: [e1] });
  t.equal(again.code, grpcStatus.INVALID_ARGUMENT, 'a second ack fails with INVALID_ARGUMENT');
  const details = statusDetails(again);
  t.match(details, { code: grpcStatus.INVALID_ARGUMENT, message: String }, 'the trailer is a google.rpc.Status');
  t.equal(details?.message, again.details, 'with the call message');
  t.strictSame(
    details?.details,
    [
      {
        type_url: 'type.googleapis.com/google.rpc.ErrorInfo',
        errorInfo: {
          reason: 'EXACTLY_ONCE_ACKID_FAILURE',
          domain: 'pubsub.googleapis.com',
          metadata: { [e1]: 'PERMANENT_FAILURE_INVALID_ACK_ID' },
        },
      },
    ],
    'holding one google.rpc.ErrorInfo that names the ack ID',
  );

  // A mixed batch: the applied ID is listed as a transient failure, and its retry succeeds.
  const mixed = await rpcError(b.subscriber, 'Acknowledge', { subscription: sub, ackIds: [e2, 'bogus', e1] });
  t.equal(mixed.code, grpcStatus.INVALID_ARGUMENT, 'a mixed batch fails');
  t.strictSame(
    ackFailures(mixed),
    {
      [e2]: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID',
      bogus: 'PERMANENT_FAILURE_INVALID_ACK_ID',
      [e1]: 'PERMANENT_FAILURE_INVALID_ACK_ID',
    },
    'the applied ID is named as a transient failure, the others as permanent',
  );
  t.strictSame(await rpc(b.subscriber, 'Acknowledge', { subscription: sub, ackIds: [e2] }), {}, 'its retry answers OK');
  const retryMixed = await rpcError(b.subscriber, 'Acknowledge', { subscription: sub, ackIds: [e2, e1] });
  t.strictSame(
    ackFailures(retryMixed),
    { [e1]: 'PERMANENT_FAILURE_INVALID_ACK_ID' },
    'retried with a failing ID: only that one is named',
  );
  const restAck = await b.api('POST', `/v1/projects/${P}/subscriptions/eod:acknowledge`, { ackIds: [e2] });
  t.equal(
    restAck.body?.error?.details?.[0]?.metadata?.[e2],
    'PERMANENT_FAILURE_INVALID_ACK_ID',
    'the mixed batch did ack it (a REST ack of it fails)',
  );

  // The same for nacks (ModifyAckDeadline 0).
  const nack = await rpcError(b.subscriber, 'ModifyAckDeadline', { subscription: sub, ackIds: [e3, 'bogus'] });
  t.strictSame(
    ackFailures(nack),
    { [e3]: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID', bogus: 'PERMANENT_FAILURE_INVALID_ACK_ID' },
    'a mixed nack batch',
  );
  t.strictSame(await rpc(b.subscriber, 'ModifyAckDeadline', { subscription: sub, ackIds: [e3] }), {}, 'nack retry OK');
  const redelivered = await rpc(b.subscriber, 'Pull', { subscription: sub, maxMessages: 10 });
  t.strictSame(redelivered.receivedMessages.map(textOf), ['e3'], 'the nacked message is delivered again, once');
  // Extensions are not remembered: a failing one fails again, a valid one applies again.
  const extend = await rpcError(b.subscriber, 'ModifyAckDeadline', {
    subscription: sub,
    ackIds: [e4, e1],
    ackDeadlineSeconds: 30,
  });
  t.strictSame(
    ackFailures(extend),
    { [e4]: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID', [e1]: 'PERMANENT_FAILURE_INVALID_ACK_ID' },
    'a mixed extension batch',
  );
  t.strictSame(
    await rpc(b.subscriber, 'ModifyAckDeadline', { subscription: sub, ackIds: [e4], ackDeadlineSeconds: 30 }),
    {},
    'an extension retried applies again',
  );
  t.equal(
    statusDetails({ metadata: (await rpcError(b.publisher, 'GetTopic', { topic: topicName('nope') })).metadata }),
    undefined,
    'other errors carry no details trailer',
  );
});

t.test('snapshots: create, get, list, list of a topic, update, seek, delete', async (t) => {
  // A start with a fraction of a second, so that expireTime's nanos are not 0.
  const startUs = Date.UTC(2026, 0, 1) * 1000 + 123_456;
  const clock = new ManualClock(startUs);
  const b = await startGrpcBroker(t, { clock });
  await b.topic('snapped');
  await b.topic('other');
  await b.subscription('source', 'snapped');
  await b.subscription('elsewhere', 'other');
  const snapName = (id: string) => `projects/${P}/snapshots/${id}`;
  const sub = subName('source');
  await b.publish('snapped', [{ data: 'acked' }, { data: 'leased' }]);
  const pulled = (await rpc(b.subscriber, 'Pull', { subscription: sub, maxMessages: 10 }))
    .receivedMessages as ReceivedMessage[];
  const byText = new Map(pulled.map((m) => [textOf(m), m.ackId]));
  await rpc(b.subscriber, 'Acknowledge', { subscription: sub, ackIds: [byText.get('acked')] });
  clock.advanceSeconds(1);

  const expireTime = { seconds: String(Math.floor(startUs / 1e6) + 7 * 24 * 3600), nanos: 123_456_000 };
  const created = await rpc(b.subscriber, 'CreateSnapshot', {
    name: snapName('snap-1'),
    subscription: sub,
    labels: { team: 'a' },
  });
  t.strictSame(
    created,
    { name: snapName('snap-1'), topic: topicName('snapped'), expireTime, labels: { team: 'a' } },
    'CreateSnapshot: expireTime is a Timestamp, seven days after the oldest unacknowledged message',
  );
  t.equal(
    (await b.ok('GET', `/v1/projects/${P}/snapshots/snap-1`)).expireTime,
    '2026-01-08T00:00:00.123456Z',
    'the same instant over REST',
  );
  t.strictSame(await rpc(b.subscriber, 'GetSnapshot', { snapshot: snapName('snap-1') }), created, 'GetSnapshot');

  await rpc(b.subscriber, 'CreateSnapshot', { name: snapName('snap-2'), subscription: sub });
  const listed: object[] = [];
  let pageToken: string | undefined;
  do {
    const page = await rpc(b.subscriber, 'ListSnapshots', { project: `projects/${P}`, pageSize: 1, pageToken });
    t.equal(page.snapshots.length, 1, 'pages of pageSize');
    listed.push(...page.snapshots);
    pageToken = page.nextPageToken || undefined;
  } while (pageToken);
  t.strictSame(
    listed,
    [created, { name: snapName('snap-2'), topic: topicName('snapped'), expireTime }],
    'ListSnapshots, paged, with Timestamps',
  );
  t.strictSame(
    await rpc(b.publisher, 'ListTopicSnapshots', { topic: topicName('snapped') }),
    { snapshots: [snapName('snap-1'), snapName('snap-2')] },
    'ListTopicSnapshots: the names',
  );
  const firstName = await rpc(b.publisher, 'ListTopicSnapshots', { topic: topicName('snapped'), pageSize: 1 });
  t.strictSame(firstName.snapshots, [snapName('snap-1')], 'ListTopicSnapshots, paged');
  t.strictSame(
    (await rpc(b.publisher, 'ListTopicSnapshots', { topic: topicName('snapped'), pageToken: firstName.nextPageToken }))
      .snapshots,
    [snapName('snap-2')],
    'its next page',
  );
  t.strictSame(
    await rpc(b.publisher, 'ListTopicSnapshots', { topic: topicName('other') }),
    {},
    'none of another topic',
  );

  // The Snapshot as GetSnapshot gave it, sent back with a new label: the mask names what changes.
  const updated = await rpc(b.subscriber, 'UpdateSnapshot', {
    snapshot: { ...created, labels: { env: 'test' } },
    updateMask: { paths: ['labels'] },
  });
  t.strictSame(updated, { ...created, labels: { env: 'test' } }, 'UpdateSnapshot of labels');
  t.strictSame((await b.ok('GET', `/v1/projects/${P}/snapshots/snap-1`)).labels, { env: 'test' }, 'so over REST');

  await rpc(b.subscriber, 'Acknowledge', { subscription: sub, ackIds: [byText.get('leased')] });
  await b.publish('snapped', [{ data: 'after' }]);
  const drained = (await rpc(b.subscriber, 'Pull', { subscription: sub, maxMessages: 10 }))
    .receivedMessages as ReceivedMessage[];
  await rpc(b.subscriber, 'Acknowledge', { subscription: sub, ackIds: ackIdsOf(drained) });
  t.strictSame(await rpc(b.subscriber, 'Seek', { subscription: sub, snapshot: snapName('snap-1') }), {}, 'Seek');
  const replayed: ReceivedMessage[] =
    (await rpc(b.subscriber, 'Pull', { subscription: sub, maxMessages: 10 })).receivedMessages ?? [];
  t.strictSame(replayed.map(textOf).sort(), ['after', 'leased'], "the snapshot's unacknowledged messages come back");

  t.strictSame(await rpc(b.subscriber, 'DeleteSnapshot', { snapshot: snapName('snap-2') }), {}, 'DeleteSnapshot');
  t.equal(
    (await rpcError(b.subscriber, 'GetSnapshot', { snapshot: snapName('snap-2') })).code,
    grpcStatus.NOT_FOUND,
    'then it is gone',
  );
  t.strictSame(
    (await rpc(b.publisher, 'ListTopicSnapshots', { topic: topicName('snapped') })).snapshots,
    [snapName('snap-1')],
    'and not listed',
  );
});

t.test('snapshots: refused requests', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('snapped');
  await b.topic('other');
  await b.subscription('source', 'snapped');
  await b.subscription('elsewhere', 'other');
  const snapName = (id: string) => `projects/${P}/snapshots/${id}`;
  const made = await rpc(b.subscriber, 'CreateSnapshot', { name: snapName('snap'), subscription: subName('source') });
  for (const [what, client, method, request, code] of [
    [
      'created twice',
      b.subscriber,
      'CreateSnapshot',
      { name: snapName('snap'), subscription: subName('source') },
      grpcStatus.ALREADY_EXISTS,
    ],
    ['no subscription', b.subscriber, 'CreateSnapshot', { name: snapName('new') }, grpcStatus.INVALID_ARGUMENT],
    [
      'an ID too short',
      b.subscriber,
      'CreateSnapshot',
      { name: snapName('x'), subscription: subName('source') },
      grpcStatus.INVALID_ARGUMENT,
    ],
    [
      'a subscription that does not exist',
      b.subscriber,
      'CreateSnapshot',
      { name: snapName('new'), subscription: subName('nope') },
      grpcStatus.NOT_FOUND,
    ],
    [
      'tags',
      b.subscriber,
      'CreateSnapshot',
      { name: snapName('new'), subscription: subName('source'), tags: { a: 'b' } },
      grpcStatus.UNIMPLEMENTED,
    ],
    [
      'a label key with a capital letter',
      b.subscriber,
      'CreateSnapshot',
      { name: snapName('new'), subscription: subName('source'), labels: { Team: 'a' } },
      grpcStatus.INVALID_ARGUMENT,
    ],
    [
      'UpdateSnapshot to a label key with a capital letter',
      b.subscriber,
      'UpdateSnapshot',
      { snapshot: { name: snapName('snap'), labels: { Team: 'a' } }, updateMask: { paths: ['labels'] } },
      grpcStatus.INVALID_ARGUMENT,
    ],
    ['GetSnapshot of no snapshot', b.subscriber, 'GetSnapshot', { snapshot: snapName('nope') }, grpcStatus.NOT_FOUND],
    ['GetSnapshot without a snapshot', b.subscriber, 'GetSnapshot', {}, grpcStatus.INVALID_ARGUMENT],
    ['ListSnapshots of no project', b.subscriber, 'ListSnapshots', { project: 'nope' }, grpcStatus.INVALID_ARGUMENT],
    [
      'ListTopicSnapshots of no topic',
      b.publisher,
      'ListTopicSnapshots',
      { topic: topicName('nope') },
      grpcStatus.NOT_FOUND,
    ],
    [
      'UpdateSnapshot of expire_time',
      b.subscriber,
      'UpdateSnapshot',
      { snapshot: made, updateMask: { paths: ['expire_time'] } },
      grpcStatus.INVALID_ARGUMENT,
    ],
    [
      'UpdateSnapshot without a mask',
      b.subscriber,
      'UpdateSnapshot',
      { snapshot: { name: snapName('snap'), labels: { a: 'b' } } },
      grpcStatus.INVALID_ARGUMENT,
    ],
    [
      'UpdateSnapshot of no snapshot',
      b.subscriber,
      'UpdateSnapshot',
      { snapshot: { name: snapName('nope'), labels: { a: 'b' } }, updateMask: { paths: ['labels'] } },
      grpcStatus.NOT_FOUND,
    ],
    [
      'UpdateSnapshot without a name',
      b.subscriber,
      'UpdateSnapshot',
      { snapshot: { labels: { a: 'b' } }, updateMask: { paths: ['labels'] } },
      grpcStatus.INVALID_ARGUMENT,
    ],
    [
      'DeleteSnapshot of no snapshot',
      b.subscriber,
      'DeleteSnapshot',
      { snapshot: snapName('nope') },
      grpcStatus.NOT_FOUND,
    ],
    [
      'a seek to a snapshot that does not exist',
      b.subscriber,
      'Seek',
      { subscription: subName('source'), snapshot: snapName('nope') },
      grpcStatus.NOT_FOUND,
    ],
    [
      'a seek to a snapshot of another topic',
      b.subscriber,
      'Seek',
      { subscription: subName('elsewhere'), snapshot: snapName('snap') },
      grpcStatus.FAILED_PRECONDITION,
    ],
    [
      'a seek to a malformed snapshot name',
      b.subscriber,
      'Seek',
      { subscription: subName('source'), snapshot: 'snap' },
      grpcStatus.INVALID_ARGUMENT,
    ],
  ] as const) {
    const error = await rpcError(client, method, request);
    t.equal(error.code, code, `${what}: ${grpcStatus[code]} (${error.details})`);
  }
  t.strictSame(
    (await rpc(b.subscriber, 'ListSnapshots', { project: `projects/${P}` })).snapshots,
    [made],
    'the refused requests changed nothing',
  );
  const unnamed = await rpc(b.subscriber, 'CreateSnapshot', { subscription: subName('source') });
  t.match(
    unnamed.name,
    new RegExp(`^projects/${P}/snapshots/snapshot-[0-9a-f]{16}$`),
    "without a name, the broker names it in the subscription's project",
  );
  t.strictSame(await rpc(b.subscriber, 'GetSnapshot', { snapshot: unnamed.name }), unnamed, 'and it is there');
});
