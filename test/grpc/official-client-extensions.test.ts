// The broker's message extensions from the official Node client over gRPC, which can only set
// data, attributes and an ordering key: the attribute forms of the idempotency key and of a
// delivery delay.

import t from 'tap';
import { waitUntil } from '../helpers/wait.ts';
import { listeningBroker, type Message, pubsubFor, rejection, unique } from './_official.ts';

const broker = await listeningBroker(t, 'grpc-official-extensions');
const pubsub = pubsubFor(broker.host);
t.teardown(() => pubsub.close());

t.test('publishMessage with the idempotency-key attribute stores the message once', async (t) => {
  const [topic] = await pubsub.createTopic(unique('idempotent-topic'));
  const [subscription] = await topic.createSubscription(unique('idempotent-sub'));
  t.teardown(async () => {
    await subscription.close();
    await subscription.delete();
    await topic.delete();
  });
  const keyed = (data: string) => ({
    data: Buffer.from(data),
    attributes: { kind: 'payment', 'pubsub-broker/idempotency-key': 'payment-42' },
  });
  const first = await topic.publishMessage(keyed('first'));
  const retry = await topic.publishMessage(keyed('retry'));
  t.equal(retry, first, 'the retry answers the first message ID');

  const received: Message[] = [];
  subscription.on('message', (message: Message) => {
    received.push(message);
    message.ack();
  });
  await topic.publishMessage({ data: Buffer.from('after') });
  t.ok(await waitUntil(() => received.length >= 2, 5000), 'the subscriber receives');
  await new Promise((done) => setTimeout(done, 500));
  t.strictSame(
    received.map((m) => m.data.toString()).sort(),
    ['after', 'first'],
    'the keyed message once, as first published',
  );
  const stored = received.find((m) => m.id === first);
  t.strictSame(stored?.attributes, { kind: 'payment' }, 'without the extension attribute');

  const refused = await rejection(() =>
    topic.publishMessage({ data: Buffer.from('x'), attributes: { 'pubsub-broker/unknown': '1' } }),
  );
  t.equal(refused.code, 3, 'an unknown extension attribute is INVALID_ARGUMENT');
});

t.test('a message published with the delivery-delay attribute streams to the subscriber at its time', async (t) => {
  const [topic] = await pubsub.createTopic(unique('scheduled-topic'));
  const [subscription] = await topic.createSubscription(unique('scheduled-sub'));
  t.teardown(async () => {
    await subscription.close();
    await subscription.delete();
    await topic.delete();
  });
  const received: { message: Message; atMs: number }[] = [];
  subscription.on('message', (message: Message) => {
    received.push({ message, atMs: Date.now() });
    message.ack();
  });
  const publishedAtMs = Date.now();
  await topic.publishMessage({
    data: Buffer.from('later'),
    attributes: { kind: 'reminder', 'pubsub-broker/delivery-delay': '1.5s' },
  });
  await topic.publishMessage({ data: Buffer.from('now') });
  t.ok(await waitUntil(() => received.length >= 2, 10_000), 'the open stream receives both');
  t.strictSame(
    received.map((r) => r.message.data.toString()),
    ['now', 'later'],
    'the scheduled one after the one published after it',
  );
  t.ok(received[1].atMs - publishedAtMs >= 1400, 'not before its time');
  t.strictSame(received[1].message.attributes, { kind: 'reminder' }, 'without the extension attribute');
});
