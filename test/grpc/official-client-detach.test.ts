// The official Node client's detach calls over gRPC: pubsub.detachSubscription(name) and
// subscription.detached(), and what its streaming subscriber and publisher see once a
// subscription is detached.

import t from 'tap';
import { waitUntil } from '../helpers/wait.ts';
import { listeningBroker, type Message, pubsubFor, rejection, unique } from './_official.ts';

const broker = await listeningBroker(t, 'grpc-official-detach');
const pubsub = pubsubFor(broker.host);
t.teardown(() => pubsub.close());

t.test('detachSubscription and detached()', async (t) => {
  const [topic] = await pubsub.createTopic(unique('detach-topic'));
  const [subscription] = await topic.createSubscription(unique('detach-sub'));
  const [other] = await topic.createSubscription(unique('other-sub'));
  t.teardown(async () => {
    await subscription.close();
    await other.close();
    await subscription.delete();
    await other.delete();
    await topic.delete();
  });
  t.strictSame(await subscription.detached(), [false], 'a new subscription is attached');

  const received: string[] = [];
  const errors: (Error & { code?: number })[] = [];
  subscription.on('message', (message: Message) => {
    received.push(message.data.toString());
    message.ack();
  });
  subscription.on('error', (error) => errors.push(error));
  await topic.publishMessage({ data: Buffer.from('before') });
  t.ok(
    await waitUntil(() => received.length === 1, 5000),
    'the subscriber gets the message published before the detach',
  );

  t.strictSame((await pubsub.detachSubscription(subscription.name))[0], {}, 'detachSubscription answers {}');
  t.ok(await waitUntil(() => errors.length > 0, 5000), 'the open subscriber learns of the detach');
  t.equal(errors[0].code, 9, 'its stream ends with FAILED_PRECONDITION');
  t.match(errors[0].message, /is detached from its topic/);
  t.strictSame(await subscription.detached(), [true], 'detached() is true');
  t.strictSame(await other.detached(), [false], 'the other subscription is not detached');
  t.strictSame(
    (await topic.getSubscriptions())[0].map((s) => s.name),
    [other.name],
    'the topic lists only the attached subscription',
  );

  const toOther: string[] = [];
  other.on('message', (message: Message) => {
    toOther.push(message.data.toString());
    message.ack();
  });
  await topic.publishMessage({ data: Buffer.from('after') });
  t.ok(
    await waitUntil(() => toOther.includes('after'), 5000),
    'the attached subscription gets a message published after',
  );
  t.strictSame(received, ['before'], 'the detached subscription got nothing more');
  t.strictSame((await pubsub.detachSubscription(subscription.name))[0], {}, 'detaching again succeeds');

  const unknown = await rejection(() => pubsub.detachSubscription(unique('no-such-sub')));
  t.equal(unknown.code, 5, 'an unknown subscription is NOT_FOUND');
});
