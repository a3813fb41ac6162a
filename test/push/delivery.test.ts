// Push delivery against local HTTP endpoints: Pub/Sub's envelope, acks and nacks by status
// code, pulls refused on push subscriptions, switching between push and pull.

import t, { type Test } from 'tap';
import { b64, startBroker, type TestBroker } from '../helpers/app.ts';
import { waitUntil } from '../helpers/wait.ts';
import { pushedText, startEndpoint } from './_endpoint.ts';

const T = '/v1/projects/p/topics';
const S = '/v1/projects/p/subscriptions';

async function setUp(t: Test, broker: TestBroker, id: string, pushConfig: object, extra: object = {}) {
  t.equal((await broker.api('PUT', `${T}/${id}`, {})).status, 200);
  const created = await broker.api('PUT', `${S}/${id}`, { topic: `projects/p/topics/${id}`, pushConfig, ...extra });
  t.equal(created.status, 200, JSON.stringify(created.body));
  return created.body;
}

async function publish(broker: TestBroker, topic: string, texts: string[], extra: object = {}) {
  const reply = await broker.api('POST', `${T}/${topic}:publish`, {
    messages: texts.map((text) => ({ data: b64(text), ...extra })),
  });
  return reply.body.messageIds as string[];
}

t.test('wrapped push: the envelope, an ack by 204, nothing pushed again', async (t) => {
  const broker = await startBroker(t, { name: 'push-wrapped' });
  const endpoint = await startEndpoint(t);
  const created = await setUp(t, broker, 'wrapped', { pushEndpoint: endpoint.url });
  t.same(created.pushConfig, { pushEndpoint: endpoint.url, pubsubWrapper: {} }, 'stored and returned');
  const [id] = await publish(broker, 'wrapped', ['hello'], { attributes: { kind: 'greeting' } });
  t.ok(await waitUntil(() => endpoint.requests.length === 1, 5000, 10), 'pushed');
  const [request] = endpoint.requests;
  t.equal(request.headers['content-type'], 'application/json');
  t.match(request.json, {
    message: { data: b64('hello'), attributes: { kind: 'greeting' }, messageId: id, message_id: id },
    subscription: 'projects/p/subscriptions/wrapped',
  });
  t.equal(request.json.message.publishTime, request.json.message.publish_time);
  t.notOk('deliveryAttempt' in request.json, 'no deliveryAttempt without a dead-letter policy');
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.equal(endpoint.requests.length, 1, 'acked: not pushed again');
});

t.test('noWrapper with writeMetadata: raw data, attributes and metadata as headers', async (t) => {
  const broker = await startBroker(t, { name: 'push-raw' });
  const endpoint = await startEndpoint(t);
  await setUp(t, broker, 'raw', { pushEndpoint: endpoint.url, noWrapper: { writeMetadata: true } });
  const bytes = Buffer.from([0, 255, 1, 128]);
  const reply = await broker.api('POST', `${T}/raw:publish`, {
    messages: [{ data: bytes.toString('base64'), attributes: { tenant: 'a1', 'bad header': 'x' } }],
  });
  const [id] = reply.body.messageIds;
  t.ok(await waitUntil(() => endpoint.requests.length === 1, 5000, 10), 'pushed');
  const [request] = endpoint.requests;
  t.same(request.body, bytes, 'the data bytes unchanged');
  t.equal(request.headers.tenant, 'a1', 'an attribute as a header');
  t.notOk('bad header' in request.headers, 'an attribute that is no header name is left out');
  t.equal(request.headers['x-goog-pubsub-message-id'], id);
  t.equal(request.headers['x-goog-pubsub-subscription-name'], 'projects/p/subscriptions/raw');
  t.match(request.headers['x-goog-pubsub-publish-time'], /^\d{4}-\d\d-\d\dT/);

  const plain = await startEndpoint(t);
  await broker.api('PUT', `${T}/plain`, {});
  await broker.api('PUT', `${S}/plain`, {
    topic: 'projects/p/topics/plain',
    pushConfig: { pushEndpoint: plain.url, noWrapper: {} },
  });
  await broker.api('POST', `${T}/plain:publish`, { messages: [{ data: b64('x'), attributes: { tenant: 'a1' } }] });
  t.ok(await waitUntil(() => plain.requests.length === 1, 5000, 10), 'pushed');
  t.notOk('x-goog-pubsub-message-id' in plain.requests[0].headers, 'no metadata without writeMetadata');
  t.notOk('tenant' in plain.requests[0].headers, 'no attributes without writeMetadata');
});

t.test('102 Processing acknowledges: the broker ends the request and pushes nothing again', async (t) => {
  const broker = await startBroker(t, { name: 'push-processing' });
  const endpoint = await startEndpoint(t, () => 'processing');
  await setUp(t, broker, 'processing', { pushEndpoint: endpoint.url });
  await publish(broker, 'processing', ['slow work']);
  t.ok(await waitUntil(() => endpoint.requests.length === 1, 5000, 10), 'pushed');
  t.ok(await waitUntil(() => endpoint.open.size === 0, 5000, 10), 'the request ended after the 102');
  await new Promise((resolve) => setTimeout(resolve, 500));
  t.equal(endpoint.requests.length, 1, 'acked: not pushed again');
});

t.test('500s are nacks: pushed again after the backoff until a success acks', async (t) => {
  const broker = await startBroker(t, { name: 'push-fail' });
  const endpoint = await startEndpoint(t, (_request, index) => (index < 3 ? 500 : 200));
  await setUp(t, broker, 'fail', { pushEndpoint: endpoint.url });
  await publish(broker, 'fail', ['again']);
  t.ok(await waitUntil(() => endpoint.requests.length === 4, 10_000, 10), 'pushed four times');
  const gaps = endpoint.requests.slice(1).map((request, i) => request.receivedAt - endpoint.requests[i].receivedAt);
  t.ok(gaps[0] >= 90, `first backoff ~100 ms (${gaps[0]})`);
  t.ok(gaps[1] >= 190, `then ~200 ms (${gaps[1]})`);
  t.ok(gaps[2] >= 390, `then ~400 ms (${gaps[2]})`);
  t.ok(endpoint.requests.every((request) => pushedText(request) === 'again'));
  await new Promise((resolve) => setTimeout(resolve, 500));
  t.equal(endpoint.requests.length, 4, 'acked by the 200');
});

t.test(
  'pull and streaming pull of a push subscription: FAILED_PRECONDITION; switching push -> pull -> push',
  async (t) => {
    const broker = await startBroker(t, { name: 'push-switch' });
    const endpoint = await startEndpoint(t);
    await setUp(t, broker, 'switch', { pushEndpoint: endpoint.url });
    const pulled = await broker.api('POST', `${S}/switch:pull`, { maxMessages: 10, returnImmediately: true });
    t.same(pulled, {
      status: 400,
      body: {
        error: {
          code: 400,
          message: 'This method is not supported for push subscriptions.',
          status: 'FAILED_PRECONDITION',
        },
      },
    });
    await publish(broker, 'switch', ['pushed']);
    t.ok(await waitUntil(() => endpoint.requests.length === 1, 5000, 10), 'pushed');

    t.equal((await broker.api('POST', `${S}/switch:modifyPushConfig`, { pushConfig: {} })).status, 200, 'to pull');
    t.same((await broker.api('GET', `${S}/switch`)).body.pushConfig, {}, 'a pull subscription now');
    await new Promise((resolve) => setTimeout(resolve, 100));
    await publish(broker, 'switch', ['pulled']);
    const reply = await broker.api('POST', `${S}/switch:pull`, { maxMessages: 10 });
    t.equal(reply.status, 200);
    t.same(
      reply.body.receivedMessages.map((m: any) => Buffer.from(m.message.data, 'base64').toString()),
      ['pulled'],
      'pulled, not pushed',
    );
    t.equal(endpoint.requests.length, 1, 'the endpoint got nothing more');
    // Unacked, it goes to the endpoint once the subscription pushes again.
    const patched = await broker.api('PATCH', `${S}/switch`, {
      subscription: { pushConfig: { pushEndpoint: endpoint.url } },
      updateMask: 'pushConfig',
    });
    t.equal(patched.status, 200, 'back to push by PATCH');
    await broker.api('POST', `${S}/switch:modifyAckDeadline`, {
      ackIds: [reply.body.receivedMessages[0].ackId],
      ackDeadlineSeconds: 0,
    });
    t.ok(await waitUntil(() => endpoint.requests.length === 2, 5000, 10), 'the nacked message is pushed');
    t.equal(pushedText(endpoint.requests[1]), 'pulled');
  },
);

t.test('dead-letter policy: deliveryAttempt counts the pushes, the fifth failure forwards the message', async (t) => {
  const broker = await startBroker(t, { name: 'push-dead-letter' });
  const endpoint = await startEndpoint(t, () => 500);
  t.equal((await broker.api('PUT', `${T}/dead`, {})).status, 200);
  t.equal((await broker.api('PUT', `${S}/dead`, { topic: 'projects/p/topics/dead' })).status, 200);
  await setUp(
    t,
    broker,
    'doomed',
    { pushEndpoint: endpoint.url },
    { deadLetterPolicy: { deadLetterTopic: 'projects/p/topics/dead', maxDeliveryAttempts: 5 } },
  );
  const [id] = await publish(broker, 'doomed', ['doomed']);
  let received: any[] = [];
  const arrived = await waitUntil(async () => {
    const reply = await broker.api('POST', `${S}/dead:pull`, { maxMessages: 10, returnImmediately: true });
    received = reply.body.receivedMessages ?? [];
    return received.length > 0;
  }, 10_000);
  t.ok(arrived, 'on the dead-letter topic');
  t.equal(received.length, 1, 'once');
  const forwarded = received[0].message;
  t.equal(Buffer.from(forwarded.data, 'base64').toString(), 'doomed');
  t.match(forwarded.attributes, {
    CloudPubSubDeadLetterSourceSubscription: 'doomed',
    CloudPubSubDeadLetterSourceDeliveryCount: '5',
  });
  t.same(
    endpoint.requests.map((request) => request.json.deliveryAttempt),
    [1, 2, 3, 4, 5],
    'each push carries its attempt',
  );
  t.ok(
    endpoint.requests.every((request) => request.json.message.messageId === id),
    'the same message each time',
  );
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.equal(endpoint.requests.length, 5, 'forwarded: not pushed again');
});
