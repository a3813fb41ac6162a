// Publisher.DetachSubscription over gRPC, with a raw grpc-js client: the same broker service as
// the REST route (test/routes/detach.test.ts has the data-plane details), its errors, and what
// the Subscriber RPCs and StreamingPull answer on a detached subscription.

import { status as grpcStatus } from '@grpc/grpc-js';
import t from 'tap';
import { ackIdsOf, P, rpc, rpcError, startGrpcBroker, subName, textOf, topicName } from './_client.ts';

const detachedMessage = (id: string) =>
  `The subscription ${subName(id)} is detached from its topic: it has no messages to pull or acknowledge.`;

t.test('DetachSubscription and the Subscriber RPCs on a detached subscription', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('top');
  await b.subscription('gone', 'top');
  await b.subscription('kept', 'top');
  await b.publish('top', [{ data: 'before' }]);
  const [leased] = (await rpc(b.subscriber, 'Pull', { subscription: subName('gone'), maxMessages: 1 }))
    .receivedMessages;
  t.equal(textOf(leased), 'before', 'a message is leased before the detach');
  const stream = await b.open('gone');

  t.strictSame(await rpc(b.publisher, 'DetachSubscription', { subscription: subName('gone') }), {}, 'answers {}');
  const ended = await stream.waitEnd();
  t.equal(ended.code, grpcStatus.FAILED_PRECONDITION, 'a stream open on it ends with FAILED_PRECONDITION');
  t.equal(ended.details, detachedMessage('gone'), 'saying why');

  const got = await rpc(b.subscriber, 'GetSubscription', { subscription: subName('gone') });
  t.equal(got.detached, true, 'GetSubscription: detached');
  t.equal(got.topic, topicName('top'), 'still naming its topic');
  t.notOk(
    (await rpc(b.subscriber, 'GetSubscription', { subscription: subName('kept') })).detached,
    'the other one is not',
  );
  const listed = await rpc(b.subscriber, 'ListSubscriptions', { project: `projects/${P}` });
  t.strictSame(
    listed.subscriptions.map((s: { name: string; detached?: boolean }) => [s.name, s.detached === true]),
    [
      [subName('gone'), true],
      [subName('kept'), false],
    ],
    'ListSubscriptions lists both',
  );
  t.strictSame(
    (await rpc(b.publisher, 'ListTopicSubscriptions', { topic: topicName('top') })).subscriptions,
    [subName('kept')],
    'ListTopicSubscriptions only the attached one',
  );

  for (const [method, request] of [
    ['Pull', { subscription: subName('gone'), maxMessages: 1 }],
    ['Acknowledge', { subscription: subName('gone'), ackIds: [leased.ackId] }],
    ['ModifyAckDeadline', { subscription: subName('gone'), ackIds: [leased.ackId], ackDeadlineSeconds: 60 }],
    ['ModifyAckDeadline', { subscription: subName('gone'), ackIds: [leased.ackId] }],
  ] as const) {
    const error = await rpcError(b.subscriber, method, request);
    t.equal(error.code, grpcStatus.FAILED_PRECONDITION, `${method}: FAILED_PRECONDITION`);
    t.equal(error.details, detachedMessage('gone'), `${method}: the message says why`);
  }
  const reopened = b.stream();
  reopened.write({ subscription: subName('gone'), streamAckDeadlineSeconds: 60 });
  t.equal((await reopened.waitEnd()).code, grpcStatus.FAILED_PRECONDITION, 'a new stream is refused too');

  await b.publish('top', [{ data: 'after' }]);
  const kept = await rpc(b.subscriber, 'Pull', { subscription: subName('kept'), maxMessages: 10 });
  t.strictSame(kept.receivedMessages.map(textOf), ['before', 'after'], 'the attached one gets both messages');
  await rpc(b.subscriber, 'Acknowledge', { subscription: subName('kept'), ackIds: ackIdsOf(kept.receivedMessages) });

  t.strictSame(
    await rpc(b.publisher, 'DetachSubscription', { subscription: subName('gone') }),
    {},
    'detaching again answers {}',
  );
});

t.test('DetachSubscription errors', async (t) => {
  const b = await startGrpcBroker(t);
  await b.topic('top');
  await b.subscription('sub', 'top');
  for (const [why, request, code] of [
    ['no subscription', {}, grpcStatus.INVALID_ARGUMENT],
    ['not a subscription name', { subscription: topicName('top') }, grpcStatus.INVALID_ARGUMENT],
    ['a bad subscription ID', { subscription: subName('0bad') }, grpcStatus.INVALID_ARGUMENT],
    ['an unknown subscription', { subscription: subName('nope') }, grpcStatus.NOT_FOUND],
  ] as const) {
    t.equal((await rpcError(b.publisher, 'DetachSubscription', request)).code, code, `${why}: ${grpcStatus[code]}`);
  }
  t.notOk(
    (await rpc(b.subscriber, 'GetSubscription', { subscription: subName('sub') })).detached,
    'nothing was detached',
  );

  await rpc(b.publisher, 'DeleteTopic', { topic: topicName('top') });
  t.strictSame(
    await rpc(b.publisher, 'DetachSubscription', { subscription: subName('sub') }),
    {},
    'a subscription of a deleted topic can be detached',
  );
  t.match(
    await rpc(b.subscriber, 'GetSubscription', { subscription: subName('sub') }),
    { topic: '_deleted-topic_', detached: true },
    'and reads so',
  );
});
