// The official Node client's seek over gRPC: subscription.seek(date) replays what a subscription
// with retainAckedMessages acknowledged (its streaming subscriber receives it again), and a seek
// to a later time purges the backlog. Snapshots: subscription.createSnapshot(name) records what
// the subscription has not acknowledged, subscription.seek(name) brings it back (with what was
// published after it), pubsub.getSnapshots() lists it, snapshot.delete() deletes it.

import t from 'tap';
import { deleteSnapshotAndCheck } from '../helpers/official-client.ts';
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
});

t.test('snapshots: createSnapshot, seek to it, getSnapshots, delete', async (t) => {
  const [topic] = await pubsub.createTopic(unique('snap-topic'));
  const subscriptionId = unique('snap-sub');
  const [subscription] = await topic.createSubscription(subscriptionId);
  const [otherTopic] = await pubsub.createTopic(unique('snap-other-topic'));
  const [otherSubscription] = await otherTopic.createSubscription(unique('snap-other-sub'));
  t.teardown(async () => {
    await subscription.close();
    await subscription.delete();
    await otherSubscription.delete();
    await topic.delete();
    await otherTopic.delete();
  });
  const publishedAt = Date.now();
  for (const text of ['one', 'two']) await topic.publishMessage({ data: Buffer.from(text) });

  const snapshotId = unique('snap');
  const snapshotName = `projects/${pubsub.projectId}/snapshots/${snapshotId}`;
  const [snapshot] = await subscription.createSnapshot(snapshotId);
  t.equal(snapshot.name, snapshotName, 'createSnapshot answers the snapshot');
  t.equal(snapshot.metadata?.topic, topic.name, 'of the topic of the subscription');
  const expireMs = Number(snapshot.metadata?.expireTime?.seconds) * 1000;
  const weekMs = 7 * 24 * 3600 * 1000;
  t.ok(
    expireMs >= publishedAt + weekMs - 2000 && expireMs <= Date.now() + weekMs,
    'expireTime (a Timestamp): seven days after the oldest unacknowledged message',
  );
  const duplicate = await rejection(() => subscription.createSnapshot(snapshotId));
  t.equal(duplicate.code, 6, 'a second snapshot of the name: ALREADY_EXISTS');

  await topic.publishMessage({ data: Buffer.from('three') });
  const received: string[] = [];
  subscription.on('message', (message: Message) => {
    received.push(message.data.toString());
    message.ack();
  });
  t.ok(await waitUntil(() => received.length === 3, 5000), 'the subscriber receives the messages');
  t.ok(await waitUntil(async () => (await backlog(broker.app, subscriptionId)) === 0, 5000), 'and acknowledges them');

  const [answer] = await subscription.seek(snapshotId);
  t.strictSame(answer, {}, 'a seek to the snapshot answers {}');
  t.ok(await waitUntil(() => received.length === 6, 5000), 'the messages come back');
  t.same(received.slice(3).sort(), ['one', 'three', 'two'], "the snapshot's, and the one published after it");
  t.ok(await waitUntil(async () => (await backlog(broker.app, subscriptionId)) === 0, 5000), 'acknowledged again');

  const [snapshots] = await pubsub.getSnapshots();
  const listed = snapshots.find((s) => s.name === snapshotName);
  t.ok(listed, 'getSnapshots lists it');
  t.equal(listed?.metadata?.topic, topic.name, 'with its topic');
  t.equal(
    String(listed?.metadata?.expireTime?.seconds),
    String(snapshot.metadata?.expireTime?.seconds),
    'and expireTime',
  );

  const elsewhere = await rejection(() => otherSubscription.seek(snapshotId));
  t.equal(elsewhere.code, 9, "a seek of another topic's subscription to it: FAILED_PRECONDITION");

  await deleteSnapshotAndCheck(t, pubsub, subscription, snapshot);
});
