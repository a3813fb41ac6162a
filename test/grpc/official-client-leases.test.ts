// The official Node client's streaming subscriber over gRPC, on what takes time or exactly-once
// delivery: the lease of a message held past its ack deadline is extended (the client's unary
// ModifyAckDeadline calls), and on an exactly-once subscription ackWithResponse() resolves
// SUCCESS for the current delivery and rejects with AckError INVALID for a stale one (the broker
// sends subscriptionProperties on the stream, so the client knows the subscription is
// exactly-once, and the ErrorInfo of the failure in grpc-status-details-bin).

import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { waitUntil } from '../helpers/wait.ts';
import {
  backlog,
  client,
  listeningBroker,
  type Message,
  pubsubFor,
  rejection,
  type Subscription,
  subscriptionPath,
  unique,
} from './_official.ts';

const broker = await listeningBroker(t, 'grpc-leases');
const pubsub = pubsubFor(broker.host);
t.teardown(() => pubsub.close());

/** Acknowledges or nacks (deadline 0) ack IDs behind the client's back, over REST. */
async function settleElsewhere(subId: string, ackIds: string[], action: 'ack' | 'nack') {
  const url = `/v1/${subscriptionPath(subId)}:${action === 'ack' ? 'acknowledge' : 'modifyAckDeadline'}`;
  const payload = action === 'ack' ? { ackIds } : { ackIds, ackDeadlineSeconds: 0 };
  const response = await broker.app.inject({ method: 'POST', url, payload });
  if (response.statusCode !== 200) throw new Error(`${action} over REST: ${response.statusCode} ${response.body}`);
}

function listen(subscription: Subscription, onMessage: (m: Message) => void) {
  const errors: Error[] = [];
  subscription.on('message', onMessage);
  subscription.on('error', (error) => errors.push(error));
  return errors;
}

t.test('a message held longer than its ack deadline: the lease is extended, then the ack works', async (t) => {
  const DEADLINE_S = 10;
  const HOLD_MS = 15_000;
  const topicId = unique('lease-topic');
  const subId = unique('lease-sub');
  const [topic] = await pubsub.createTopic(topicId);
  const [subscription] = await topic.createSubscription(subId, { ackDeadlineSeconds: DEADLINE_S });
  // A second client on the subscription: a lease that ran out would be redelivered to either.
  const other = pubsubFor(broker.host);
  const otherSubscription = other.subscription(subId);
  t.teardown(async () => {
    await otherSubscription.close();
    await other.close();
    await subscription.close();
    await subscription.delete();
    await topic.delete();
  });

  const deliveries: { at: number; message: Message }[] = [];
  const errors = [
    ...listen(subscription, (message) => deliveries.push({ at: Date.now(), message })),
    ...listen(otherSubscription, (message) => deliveries.push({ at: Date.now(), message })),
  ];
  const id = await topic.publishMessage({ data: Buffer.from('held') });
  t.ok(await waitUntil(() => deliveries.length > 0, 10_000), 'delivered');
  const [first] = deliveries;
  t.equal(first.message.id, id);

  await sleep(HOLD_MS - (Date.now() - first.at));
  t.same(
    deliveries.map((d) => d.message.id),
    [id],
    `held ${HOLD_MS / 1000} s with a ${DEADLINE_S} s deadline: not redelivered`,
  );
  first.message.ack();
  t.ok(await waitUntil(async () => (await backlog(broker.app, subId)) === 0, 10_000), 'the late ack took effect');
  t.equal(deliveries.length, 1, 'delivered once in all');
  t.same(errors, []);
});

t.test('exactly-once: ackWithResponse and nackWithResponse through the streaming subscriber', async (t) => {
  const topicId = unique('eod-topic');
  const subId = unique('eod-sub');
  const [topic] = await pubsub.createTopic(topicId);
  const [subscription] = await topic.createSubscription(subId, { enableExactlyOnceDelivery: true });
  t.teardown(async () => {
    await subscription.close();
    await subscription.delete();
    await topic.delete();
  });

  const arrivals: Message[] = [];
  const errors = listen(subscription, (message) => arrivals.push(message));
  const next = async (count: number) => {
    if (!(await waitUntil(() => arrivals.length >= count, 10_000))) throw new Error(`delivery ${count} never came`);
    return arrivals[count - 1];
  };
  const settled = async (what: string) =>
    t.ok(await waitUntil(async () => (await backlog(broker.app, subId)) === 0, 10_000), what);

  t.test('the current delivery: SUCCESS', async (t) => {
    const id = await topic.publishMessage({ data: Buffer.from('once') });
    const message = await next(1);
    t.equal(message.id, id);
    t.equal(await message.ackWithResponse(), client.AckResponses.Success);
    await settled('acknowledged');
  });

  t.test('an ack ID acknowledged elsewhere already: AckError INVALID', async (t) => {
    const id = await topic.publishMessage({ data: Buffer.from('acked elsewhere') });
    const message = await next(2);
    t.equal(message.id, id);
    await settleElsewhere(subId, [message.ackId], 'ack');
    const error = await rejection<InstanceType<typeof client.AckError>>(() => message.ackWithResponse());
    t.type(error, client.AckError);
    t.equal(error.errorCode, client.AckResponses.Invalid, 'errorCode INVALID');
    await settled('acknowledged once');
  });

  t.test('the ack ID of an earlier delivery, after a redelivery: AckError INVALID', async (t) => {
    const id = await topic.publishMessage({ data: Buffer.from('redelivered') });
    const first = await next(3);
    t.equal(first.id, id);
    // Nacked behind the client's back: the broker delivers it again, with a new ack ID.
    await settleElsewhere(subId, [first.ackId], 'nack');
    const second = await next(4);
    t.equal(second.id, id, 'redelivered');
    t.not(second.ackId, first.ackId);
    const error = await rejection<InstanceType<typeof client.AckError>>(() => first.ackWithResponse());
    t.type(error, client.AckError);
    t.equal(error.errorCode, client.AckResponses.Invalid, 'the stale ack ID: errorCode INVALID');
    t.equal(await second.ackWithResponse(), client.AckResponses.Success, 'the current one: SUCCESS');
    await settled('acknowledged');
  });

  t.test('nackWithResponse: SUCCESS, and the message comes back', async (t) => {
    const id = await topic.publishMessage({ data: Buffer.from('nacked') });
    const first = await next(5);
    t.equal(first.id, id);
    t.equal(await first.nackWithResponse(), client.AckResponses.Success);
    const second = await next(6);
    t.equal(second.id, id, 'redelivered');
    t.equal(await second.ackWithResponse(), client.AckResponses.Success);
    await settled('acknowledged');
  });

  t.test('a batch of acks, one of them stale: only that one fails', async (t) => {
    const ids = await Promise.all(
      Array.from({ length: 20 }, (_, i) => topic.publishMessage({ data: Buffer.from(`batch ${i}`) })),
    );
    await waitUntil(() => arrivals.length >= 26, 10_000);
    const batch = arrivals.slice(6, 26);
    t.same(batch.map((m) => m.id).sort(), [...ids].sort(), 'all 20 arrived');
    const stale = batch[7];
    await settleElsewhere(subId, [stale.ackId], 'ack');
    // Acked together, so that the client sends them in one Acknowledge call.
    const results = await Promise.allSettled(batch.map((message) => message.ackWithResponse()));
    const outcome = results.map((result, i) =>
      result.status === 'fulfilled'
        ? `${batch[i].id} ${result.value}`
        : `${batch[i].id} AckError ${(result.reason as InstanceType<typeof client.AckError>).errorCode}`,
    );
    t.same(
      outcome,
      batch.map((m) => `${m.id} ${m === stale ? 'AckError INVALID' : 'SUCCESS'}`),
      'SUCCESS for each current delivery, INVALID for the stale one',
    );
    await settled('all acknowledged');
  });

  t.test('nothing was delivered twice but the two nacked', async (t) => {
    const ids = arrivals.map((m) => m.id);
    t.equal(ids.length, 26);
    t.equal(new Set(ids).size, 24);
    t.same(errors, [], 'the subscription emitted no error');
  });
});
