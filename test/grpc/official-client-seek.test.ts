// The official Node client's seek over gRPC: subscription.seek(date) replays what a subscription
// with retainAckedMessages acknowledged (its streaming subscriber receives it again), and a seek
// to a later time purges the backlog. Seeking to a snapshot answers UNIMPLEMENTED.

import t from 'tap';
import { waitUntil } from '../helpers/wait.ts';
import { backlog, listeningBroker, type Message, pubsubFor, rejection, unique } from './_official.ts';

const broker = await listeningBroker(t, 'grpc-official-seek');
const pubsub = pubsubFor(broker.host);
t.teardown(() => pubsub.close());

t.test('subscription.seek(date): replay of acknowledged messages, and the purge', async (t) => {
  const [topic] = await pubsub.createTopic(unique('seek-topic'));
  const subscriptionId = unique('seek-sub');
  const [subscription] = await topic.createSubscription(subscriptionId, { retainAckedMessages: true });
  t.teardown(async () => {
    await subscription.close();
    await subscription.delete();
    await topic.delete();
  });
  const received: string[] = [];
  subscription.on('message', (message: Message) => {
    received.push(message.data.toString());
    message.ack();
  });
  const before = new Date(Date.now() - 1000);
  for (const text of ['one', 'two', 'three']) await topic.publishMessage({ data: Buffer.from(text) });
  t.ok(await waitUntil(() => received.length === 3, 5000), 'the subscriber receives the messages');
  t.ok(await waitUntil(async () => (await backlog(broker.app, subscriptionId)) === 0, 5000), 'and acknowledges them');

  const [answer] = await subscription.seek(before);
  t.strictSame(answer, {}, 'seek answers {}');
  t.ok(await waitUntil(() => received.length === 6, 5000), 'the acknowledged messages come back');
  t.same(received.slice(3).sort(), ['one', 'three', 'two'], 'every one of them once');
  t.ok(await waitUntil(async () => (await backlog(broker.app, subscriptionId)) === 0, 5000), 'acknowledged again');

  await subscription.close();
  for (const text of ['four', 'five']) await topic.publishMessage({ data: Buffer.from(text) });
  t.ok(await waitUntil(async () => (await backlog(broker.app, subscriptionId)) === 2, 5000), 'a backlog waits');
  await subscription.seek(new Date(Date.now() + 1000));
  t.equal(await backlog(broker.app, subscriptionId), 0, 'a seek to a later time purges it');

  const error = await rejection(() => subscription.seek(`projects/${pubsub.projectId}/snapshots/none`));
  t.equal(error.code, 12, 'a seek to a snapshot: UNIMPLEMENTED');
});
