// One acknowledge request that mixes keys, out-of-order and in-order acks, unkeyed messages and
// a duplicate, on an ordered subscription: each ack ID is decided as if the request were applied
// one ID after the other (the script reads and writes in batches), and the keys are released.

import t from 'tap';
import { b64, startBroker, unb64, type TestBroker } from '../helpers/app.ts';
import { redisTargets } from '../helpers/redis.ts';

const TOPIC = '/v1/projects/p/topics/ordered-acks';

async function setUp(broker: TestBroker, sub: string, exactlyOnce: boolean) {
  await broker.api('PUT', TOPIC, {});
  await broker.api('PUT', sub, {
    topic: 'projects/p/topics/ordered-acks',
    enableMessageOrdering: true,
    enableExactlyOnceDelivery: exactlyOnce,
  });
  const ids: Record<string, string> = {};
  for (const [name, key] of [
    ['k1', 'k'],
    ['k2', 'k'],
    ['k3', 'k'],
    ['k4', 'k'],
    ['j1', 'j'],
    ['j2', 'j'],
    ['u1', ''],
  ]) {
    const response = await broker.api('POST', `${TOPIC}:publish`, {
      messages: [{ data: b64(name), ...(key ? { orderingKey: key } : {}) }],
    });
    ids[response.body.messageIds[0]] = name;
  }
  const pulled = await broker.api('POST', `${sub}:pull`, { maxMessages: 10, returnImmediately: true });
  const ackId: Record<string, string> = {};
  for (const m of pulled.body.receivedMessages) ackId[ids[m.message.messageId]] = m.ackId;
  return ackId;
}

for (const target of redisTargets()) {
  t.test(`${target.name}: exactly-once decides a mixed request one ack ID after the other`, async (t) => {
    const broker = await startBroker(t, { target, name: 'ordered-acks-eo' });
    const sub = '/v1/projects/p/subscriptions/ordered-acks-eo';
    const ackId = await setUp(broker, sub, true);
    t.same(
      Object.keys(ackId).sort(),
      ['j1', 'j2', 'k1', 'k2', 'k3', 'k4', 'u1'],
      'every message was delivered at once',
    );

    const first = await broker.api('POST', `${sub}:acknowledge`, {
      ackIds: ['k2', 'k1', 'k3', 'j2', 'u1', 'j1', 'k1'].map((name) => ackId[name]),
    });
    t.equal(first.status, 400);
    t.same(
      first.body.error.details[0].metadata,
      {
        [ackId.k2]: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID', // k1 was not acked yet
        [ackId.k3]: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID', // k2 (failed above) still comes first
        [ackId.j2]: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID', // j1 comes later in the request
      },
      'k1, u1 and j1 were acknowledged (k1 once, though named twice)',
    );

    const second = await broker.api('POST', `${sub}:acknowledge`, {
      ackIds: ['k2', 'j2', 'k3', 'k4'].map((name) => ackId[name]),
    });
    t.same([second.status, second.body], [200, {}], 'the rest, in order per key');

    const again = await broker.api('POST', `${sub}:acknowledge`, { ackIds: [ackId.k1, ackId.u1] });
    t.same(
      again.body.error.details[0].metadata,
      {
        [ackId.k1]: 'PERMANENT_FAILURE_INVALID_ACK_ID',
        [ackId.u1]: 'PERMANENT_FAILURE_INVALID_ACK_ID',
      },
      'acknowledged ack IDs stay done',
    );

    // Both keys are free again: new messages of them are delivered at once.
    await broker.api('POST', `${TOPIC}:publish`, { messages: [{ data: b64('k5'), orderingKey: 'k' }] });
    await broker.api('POST', `${TOPIC}:publish`, { messages: [{ data: b64('j3'), orderingKey: 'j' }] });
    const next = await broker.api('POST', `${sub}:pull`, { maxMessages: 10, returnImmediately: true });
    t.same(next.body.receivedMessages.map((m: any) => unb64(m.message.data)).sort(), ['j3', 'k5']);
  });

  t.test(`${target.name}: without exactly-once every ack of a mixed request applies`, async (t) => {
    const broker = await startBroker(t, { target, name: 'ordered-acks' });
    const sub = '/v1/projects/p/subscriptions/ordered-acks';
    const ackId = await setUp(broker, sub, false);
    const first = await broker.api('POST', `${sub}:acknowledge`, {
      ackIds: ['k3', 'j2', 'u1', 'k1'].map((name) => ackId[name]),
    });
    t.same([first.status, first.body], [200, {}]);
    // k is still busy (k2 and k4 outstanding), j too (j1): nothing new goes out for them yet.
    await broker.api('POST', `${TOPIC}:publish`, { messages: [{ data: b64('k5'), orderingKey: 'k' }] });
    t.same(
      (await broker.api('POST', `${sub}:pull`, { maxMessages: 10, returnImmediately: true })).body,
      {},
      'keys with outstanding messages wait',
    );
    await broker.api('POST', `${sub}:acknowledge`, { ackIds: ['k4', 'j1', 'k2'].map((name) => ackId[name]) });
    const next = await broker.api('POST', `${sub}:pull`, { maxMessages: 10, returnImmediately: true });
    t.same(
      next.body.receivedMessages.map((m: any) => unb64(m.message.data)),
      ['k5'],
      'k was released when its last outstanding message was acked',
    );
  });
}
