// The official Node client (@google-cloud/pubsub 5.x) over its default transport, gRPC, against
// the broker, configured as for the Pub/Sub emulator: PUBSUB_EMULATOR_HOST and projectId only.
// Admin calls and their errors, publishing (batched, ordered, 10 MB), and the streaming
// subscriber's acks, nacks and per-key order. Leases and exactly-once acks are in
// official-client-leases.test.ts, a broker restart in official-client-restart.test.ts.

import { createHash, randomBytes } from 'node:crypto';
import diagnosticsChannel from 'node:diagnostics_channel';
import type { ClientRequest } from 'node:http';
import type { Readable } from 'node:stream';
import t, { type Test } from 'tap';
import { waitUntil } from '../helpers/wait.ts';
import {
  backlog,
  listeningBroker,
  type Message,
  pubsubFor,
  rejection,
  subscriptionPath,
  topicPath,
  unique,
} from './_official.ts';

// Every HTTP/1 request this process starts (the client's gRPC runs over http2 sessions, which
// this does not see): the test's own /metrics reads go through app.inject, so none is expected.
const outgoing: string[] = [];
const onRequestStart = (message: unknown) => {
  const request = (message as { request: ClientRequest }).request;
  outgoing.push(`${request.method} ${String(request.getHeader('host') ?? request.host)}${request.path}`);
};
diagnosticsChannel.subscribe('http.client.request.start', onRequestStart);

const broker = await listeningBroker(t, 'grpc-official');
const pubsub = pubsubFor(broker.host);
t.teardown(async () => {
  await pubsub.close();
  diagnosticsChannel.unsubscribe('http.client.request.start', onRequestStart);
});

/** A topic and a subscription on it, deleted after the test. */
async function topicWithSubscription(
  t: Test,
  name: string,
  options: import('@google-cloud/pubsub').CreateSubscriptionOptions = {},
) {
  const topicId = unique(`${name}-topic`);
  const subId = unique(`${name}-sub`);
  const [topic] = await pubsub.createTopic(topicId);
  const [subscription] = await topic.createSubscription(subId, options);
  t.teardown(async () => {
    await subscription.close();
    await subscription.delete();
    await topic.delete();
  });
  return { topicId, subId, topic, subscription };
}

t.test('the client runs in emulator mode over gRPC', async (t) => {
  t.equal(pubsub.isEmulator, true);
  const config = await pubsub.getClientConfig();
  t.equal(`${config.servicePath}:${config.port}`, broker.host);
  t.notOk((config as { fallback?: unknown }).fallback, 'no REST fallback: gRPC');
});

t.test('admin: topics', async (t) => {
  const topicId = unique('admin-topic');
  const [topic] = await pubsub.createTopic({
    name: topicId,
    labels: { team: 'grpc' },
    messageRetentionDuration: { seconds: 3600 },
  });
  t.equal(topic.name, topicPath(topicId));
  const [metadata] = await pubsub.topic(topicId).getMetadata();
  t.equal(metadata.name, topicPath(topicId));
  t.same(metadata.labels, { team: 'grpc' });
  t.match(metadata.messageRetentionDuration, { seconds: '3600' }, 'a Duration comes back as a Duration');
  t.same(await pubsub.topic(topicId).exists(), [true]);

  // setMetadata sends UpdateTopic with the mask of the fields given.
  const [updated] = await topic.setMetadata({ labels: { team: 'grpc', stage: 'two' } });
  t.same(updated.labels, { team: 'grpc', stage: 'two' });
  t.match(updated.messageRetentionDuration, { seconds: '3600' }, 'a field outside the mask is kept');
  const [retention] = await topic.setMetadata({ messageRetentionDuration: { seconds: 7200, nanos: 500_000_000 } });
  t.match(retention.messageRetentionDuration, { seconds: '7200', nanos: 500_000_000 });
  t.same(retention.labels, { team: 'grpc', stage: 'two' });
  const [reread] = await topic.getMetadata();
  t.match(reread, { labels: { stage: 'two' }, messageRetentionDuration: { seconds: '7200', nanos: 500_000_000 } });

  await topic.delete();
  t.same(await topic.exists(), [false]);
});

t.test('admin: subscriptions, their settings and update masks', async (t) => {
  const topicId = unique('admin-subs-topic');
  const [topic] = await pubsub.createTopic(topicId);
  t.teardown(() => topic.delete());

  const plainId = unique('plain');
  const [plain] = await topic.createSubscription(plainId, {
    ackDeadlineSeconds: 30,
    labels: { kind: 'plain' },
    messageRetentionDuration: 3600,
    retainAckedMessages: true,
    expirationPolicy: { ttl: { seconds: 86_400 } },
  });
  t.equal(plain.name, subscriptionPath(plainId));
  const [plainMeta] = await plain.getMetadata();
  t.match(plainMeta, {
    name: subscriptionPath(plainId),
    topic: topicPath(topicId),
    ackDeadlineSeconds: 30,
    labels: { kind: 'plain' },
    messageRetentionDuration: { seconds: '3600' },
    retainAckedMessages: true,
    expirationPolicy: { ttl: { seconds: '86400' } },
    enableExactlyOnceDelivery: false,
    enableMessageOrdering: false,
  });

  const eodId = unique('eod');
  const [eod] = await pubsub.createSubscription(topicId, eodId, { enableExactlyOnceDelivery: true });
  const [eodMeta] = await eod.getMetadata();
  t.equal(eodMeta.enableExactlyOnceDelivery, true);
  t.equal(eodMeta.ackDeadlineSeconds, 60, 'exactly-once subscriptions default to a 60 s deadline');

  const orderedId = unique('ordered');
  const [ordered] = await topic.createSubscription(orderedId, { enableMessageOrdering: true });
  const [orderedMeta] = await ordered.getMetadata();
  t.equal(orderedMeta.enableMessageOrdering, true);
  t.equal(orderedMeta.ackDeadlineSeconds, 10);

  // The mask names exactly the fields given; the others are kept.
  const [updated] = await plain.setMetadata({
    ackDeadlineSeconds: 45,
    labels: { kind: 'updated' },
    expirationPolicy: { ttl: { seconds: 172_800 } },
  });
  t.match(updated, {
    ackDeadlineSeconds: 45,
    labels: { kind: 'updated' },
    expirationPolicy: { ttl: { seconds: '172800' } },
    messageRetentionDuration: { seconds: '3600' },
    retainAckedMessages: true,
  });
  const [retention] = await plain.setMetadata({ messageRetentionDuration: { seconds: 1200 } });
  t.match(retention.messageRetentionDuration, { seconds: '1200' });
  t.equal(retention.ackDeadlineSeconds, 45);
  // Exactly-once delivery can be switched on and off.
  const [switched] = await plain.setMetadata({ enableExactlyOnceDelivery: true });
  t.equal(switched.enableExactlyOnceDelivery, true);
  const [switchedBack] = await plain.setMetadata({ enableExactlyOnceDelivery: false });
  t.equal(switchedBack.enableExactlyOnceDelivery, false);
  // Message ordering is set at creation only.
  const immutable = await rejection(() => plain.setMetadata({ enableMessageOrdering: true }));
  t.equal(immutable.code, 3, 'INVALID_ARGUMENT for a mask naming an immutable field');
  const [reread] = await plain.getMetadata();
  t.match(reread, {
    ackDeadlineSeconds: 45,
    labels: { kind: 'updated' },
    messageRetentionDuration: { seconds: '1200' },
    expirationPolicy: { ttl: { seconds: '172800' } },
    enableExactlyOnceDelivery: false,
    enableMessageOrdering: false,
  });

  const [all] = await pubsub.getSubscriptions();
  t.same(
    all.map((s) => s.name).sort(),
    [plainId, eodId, orderedId].map(subscriptionPath).sort(),
    'getSubscriptions lists the three',
  );
  const [ofTopic] = await topic.getSubscriptions();
  t.same(ofTopic.map((s) => s.name).sort(), [plainId, eodId, orderedId].map(subscriptionPath).sort());

  for (const subscription of [plain, eod, ordered]) {
    await subscription.delete();
    t.same(await subscription.exists(), [false], `${subscription.name} is gone`);
  }
  const [none] = await topic.getSubscriptions();
  t.same(none, []);
});

t.test('admin: listing in pages', async (t) => {
  const ids = Array.from({ length: 5 }, (_, i) => unique(`page-${i}`));
  for (const id of ids) await pubsub.createTopic(id);
  t.teardown(async () => {
    for (const id of ids) await pubsub.topic(id).delete();
  });
  const expected = ids.map(topicPath).sort();

  // One page of two at a time, following nextPageToken.
  type PageQuery = { pageSize: number; pageToken?: string; autoPaginate: false };
  const pages: string[][] = [];
  let query: PageQuery | null = { pageSize: 2, autoPaginate: false };
  while (query) {
    const [topics, next] = (await pubsub.getTopics(query)) as unknown as [{ name: string }[], PageQuery | null];
    pages.push(topics.map((x) => x.name));
    query = next ? { ...next, pageSize: 2, autoPaginate: false } : null;
  }
  t.same(
    pages.map((page) => page.length),
    [2, 2, 1],
    'three pages',
  );
  t.same(pages.flat().sort(), expected, 'every topic once, in pages');

  // The stream follows the page tokens itself (with maxResults set, the Node client sends
  // pageSize as the page size; alone, it takes it as the number of results wanted).
  const getTopicsStream = pubsub.getTopicsStream.bind(pubsub) as unknown as (query: object) => Readable;
  const stream = async (query: object) => {
    const names: string[] = [];
    await new Promise<void>((resolve, reject) => {
      getTopicsStream(query)
        .on('data', (topic: { name: string }) => names.push(topic.name))
        .on('error', reject)
        .on('end', resolve);
    });
    return names;
  };
  t.same((await stream({ pageSize: 2, maxResults: 100 })).sort(), expected, 'getTopicsStream lists them all');
  t.equal((await stream({ pageSize: 2, maxResults: 100, maxApiCalls: 2 })).length, 4, 'two pages of two');
  const [all] = await pubsub.getTopics();
  t.same(all.map((x) => x.name).sort(), expected, 'getTopics lists them all');
});

t.test('admin errors carry the canonical gRPC codes', async (t) => {
  t.same(await pubsub.topic(unique('never-created')).exists(), [false], 'exists() is false for a missing topic');
  const missing = await rejection(() => pubsub.topic(unique('missing')).get());
  t.equal(missing.code, 5, 'NOT_FOUND');
  t.match(missing.message, /not found/i);
  const missingSub = await rejection(() => pubsub.subscription(unique('missing-sub')).getMetadata());
  t.equal(missingSub.code, 5, 'NOT_FOUND for a subscription');
  t.same(await pubsub.subscription(unique('missing-sub')).exists(), [false]);

  const topicId = unique('dup-topic');
  await pubsub.createTopic(topicId);
  t.teardown(() => pubsub.topic(topicId).delete());
  const duplicate = await rejection(() => pubsub.createTopic(topicId));
  t.equal(duplicate.code, 6, 'ALREADY_EXISTS');
  const subId = unique('dup-sub');
  await pubsub.topic(topicId).createSubscription(subId);
  t.teardown(() => pubsub.subscription(subId).delete());
  const duplicateSub = await rejection(() => pubsub.topic(topicId).createSubscription(subId));
  t.equal(duplicateSub.code, 6, 'ALREADY_EXISTS for a subscription');
  const orphan = await rejection(() => pubsub.topic(unique('gone')).createSubscription(unique('orphan')));
  t.equal(orphan.code, 5, 'a subscription of a missing topic is NOT_FOUND');

  const badName = await rejection(() => pubsub.createTopic('no spaces allowed'));
  t.equal(badName.code, 3, 'INVALID_ARGUMENT for a bad topic name');
  const googName = await rejection(() => pubsub.createTopic('goog-reserved'));
  t.equal(googName.code, 3, 'INVALID_ARGUMENT for a name starting with goog');
  const badDeadline = await rejection(() =>
    pubsub.topic(topicId).createSubscription(unique('bad-deadline'), { ackDeadlineSeconds: 5 }),
  );
  t.equal(badDeadline.code, 3, 'INVALID_ARGUMENT for an ack deadline under 10 s');

  const subscription = pubsub.subscription(subId);
  const snapshotId = unique('dup-snap');
  const [snapshot] = await subscription.createSnapshot(snapshotId);
  t.teardown(() => snapshot.delete());
  const duplicateSnapshot = await rejection(() => subscription.createSnapshot(snapshotId));
  t.equal(duplicateSnapshot.code, 6, 'ALREADY_EXISTS for a snapshot');
  const orphanSnapshot = await rejection(() => pubsub.subscription(unique('gone')).createSnapshot(unique('snap')));
  t.equal(orphanSnapshot.code, 5, 'a snapshot of a missing subscription is NOT_FOUND');
  const badSnapshotName = await rejection(() => subscription.createSnapshot('no spaces allowed'));
  t.equal(badSnapshotName.code, 3, 'INVALID_ARGUMENT for a bad snapshot name');
  const missingSnapshot = await rejection(() => pubsub.snapshot(unique('missing-snap')).delete());
  t.equal(missingSnapshot.code, 5, 'NOT_FOUND for a snapshot');
  const [snapshots] = await pubsub.getSnapshots();
  t.ok(
    snapshots.some((s) => s.name === snapshot.name),
    'getSnapshots lists the snapshot that was made',
  );
});

/** The Publish calls that reach the broker from now until the test ends: their message counts. */
function countPublishCalls(t: Test): number[] {
  const delivery = broker.app.broker.delivery;
  const publish = delivery.publish;
  const counts: number[] = [];
  delivery.publish = (caller, name, request) => {
    counts.push(request.messages.length);
    return publish.call(delivery, caller, name, request);
  };
  t.teardown(() => {
    delivery.publish = publish;
  });
  return counts;
}

/** Collects the messages a subscription emits; `onMessage` decides what to do with each. */
function collect(subscription: import('@google-cloud/pubsub').Subscription, onMessage: (m: Message) => void) {
  const errors: Error[] = [];
  subscription.on('message', onMessage);
  subscription.on('error', (error) => errors.push(error));
  return errors;
}

t.test('publishMessage with default batching, received by the streaming subscriber and acked', async (t) => {
  const { topic, subscription, subId } = await topicWithSubscription(t, 'batched');
  const sent = Array.from({ length: 200 }, (_, i) => ({
    data: Buffer.from(`message ${i}`),
    attributes: { n: String(i), ...(i % 2 ? { odd: 'yes' } : {}) },
  }));
  const publishCalls = countPublishCalls(t);
  // Published together: the client batches them (at most 100 messages per Publish).
  const ids = await Promise.all(sent.map((message) => topic.publishMessage(message)));
  t.equal(new Set(ids).size, sent.length, 'distinct message IDs');

  const received = new Map<string, Message>();
  let duplicates = 0;
  const errors = collect(subscription, (message) => {
    if (received.has(message.id)) duplicates++;
    received.set(message.id, message);
    message.ack();
  });
  t.ok(await waitUntil(() => received.size === sent.length, 15_000), `every message received (${received.size})`);
  const wrong = ids.flatMap((id, i) => {
    const message = received.get(id);
    if (!message) return [`message ${i} (${id}) missing`];
    const problems = [];
    if (message.data.toString() !== `message ${i}`) problems.push(`${id}: data ${message.data.toString()}`);
    if (JSON.stringify(message.attributes) !== JSON.stringify(sent[i].attributes))
      problems.push(`${id}: attributes ${JSON.stringify(message.attributes)}`);
    if (!(message.publishTime.getTime() > Date.now() - 60_000))
      problems.push(`${id}: publishTime ${message.publishTime}`);
    if (!message.ackId) problems.push(`${id}: no ack ID`);
    return problems;
  });
  t.same(wrong, [], 'each message with its data, attributes, a recent publishTime and an ack ID');
  t.ok(publishCalls.length < sent.length / 10, `batched into ${publishCalls.length} Publish calls`);
  t.ok(
    await waitUntil(async () => (await backlog(broker.app, subId)) === 0, 10_000),
    'the acks reached the broker: nothing unacknowledged',
  );
  t.equal(duplicates, 0, 'nothing redelivered');
  t.same(errors, []);
});

t.test('nack(): the message comes back, with a new ack ID', async (t) => {
  const { topic, subscription, subId } = await topicWithSubscription(t, 'nack');
  const id = await topic.publishMessage({ data: Buffer.from('again') });
  const deliveries: Message[] = [];
  const errors = collect(subscription, (message) => {
    deliveries.push(message);
    if (deliveries.length === 1) message.nack();
    else message.ack();
  });
  t.ok(await waitUntil(() => deliveries.length >= 2, 10_000), 'delivered twice');
  t.equal(deliveries[0].id, id);
  t.equal(deliveries[1].id, id, 'the nacked message is redelivered');
  t.not(deliveries[1].ackId, deliveries[0].ackId, 'a redelivery has its own ack ID');
  t.equal(deliveries[1].data.toString(), 'again');
  t.ok(await waitUntil(async () => (await backlog(broker.app, subId)) === 0, 10_000), 'then acked');
  t.equal(deliveries.length, 2, 'not delivered a third time');
  t.same(errors, []);
});

t.test(
  'a dead-letter policy: deliveryAttempt counts the nacks, then the message is on the dead-letter topic',
  async (t) => {
    const deadTopicId = unique('dead-topic');
    const [deadTopic] = await pubsub.createTopic(deadTopicId);
    const [deadSubscription] = await deadTopic.createSubscription(unique('dead-sub'));
    t.teardown(async () => {
      await deadSubscription.close();
      await deadSubscription.delete();
      await deadTopic.delete();
    });
    const { topic, subscription, subId } = await topicWithSubscription(t, 'dead-letters', {
      deadLetterPolicy: { deadLetterTopic: topicPath(deadTopicId), maxDeliveryAttempts: 5 },
      retryPolicy: { minimumBackoff: { seconds: 0 }, maximumBackoff: { seconds: 1 } },
    });
    const [metadata] = await subscription.getMetadata();
    t.match(metadata.deadLetterPolicy, { deadLetterTopic: topicPath(deadTopicId), maxDeliveryAttempts: 5 });
    t.match(metadata.retryPolicy, { minimumBackoff: { seconds: '0' }, maximumBackoff: { seconds: '1' } });

    await topic.publishMessage({ data: Buffer.from('poison'), attributes: { kind: 'order' } });
    const attempts: number[] = [];
    const errors = collect(subscription, (message) => {
      attempts.push(message.deliveryAttempt);
      message.nack();
    });
    const forwarded: Message[] = [];
    const deadErrors = collect(deadSubscription, (message) => {
      forwarded.push(message);
      message.ack();
    });
    t.ok(await waitUntil(() => forwarded.length > 0, 15_000), 'forwarded to the dead-letter topic');
    t.same(attempts, [1, 2, 3, 4, 5], 'delivered five times, deliveryAttempt counting');
    const [copy] = forwarded;
    t.equal(copy.data.toString(), 'poison');
    t.match(copy.attributes, {
      kind: 'order',
      CloudPubSubDeadLetterSourceDeliveryCount: '5',
      CloudPubSubDeadLetterSourceSubscription: subId,
      CloudPubSubDeadLetterSourceSubscriptionProject: 'grpc-project',
      CloudPubSubDeadLetterSourceTopicPublishTime: /^\d{4}-\d\d-\d\dT/,
    });
    t.ok(
      await waitUntil(async () => (await backlog(broker.app, subId)) === 0, 10_000),
      'and gone from its subscription',
    );
    t.same(attempts.length, 5, 'never delivered again');
    t.same([...errors, ...deadErrors], []);
  },
);

t.test('ordering keys: each key in publish order, complete, through 5 streams', async (t) => {
  const KEYS = 6;
  const PER_KEY = 100;
  const topicId = unique('ordered-topic');
  const subId = unique('ordered-sub');
  await pubsub.createTopic(topicId);
  const topic = pubsub.topic(topicId, { messageOrdering: true, batching: { maxMessages: 20 } });
  const [subscription] = await topic.createSubscription(subId, { enableMessageOrdering: true });
  t.teardown(async () => {
    await subscription.close();
    await subscription.delete();
    await pubsub.topic(topicId).delete();
  });

  const firstArrivals = Array.from({ length: KEYS }, () => [] as number[]);
  const seen = new Set<string>();
  const problems: string[] = [];
  let redeliveries = 0;
  const errors = collect(subscription, (message) => {
    const [key, index] = message.data.toString().split(':');
    if (message.orderingKey !== key) problems.push(`${message.id}: orderingKey ${message.orderingKey}, data ${key}`);
    if (seen.has(message.id)) redeliveries++;
    else firstArrivals[Number(key.slice(1))].push(Number(index));
    seen.add(message.id);
    // Acked a little later, so that several messages of a key are outstanding at once.
    setTimeout(() => message.ack(), Math.random() * 20);
  });

  // Keys interleaved; the client publishes each key's messages in order, one batch at a time.
  const publishes: Promise<string>[] = [];
  for (let i = 0; i < PER_KEY; i++) {
    for (let k = 0; k < KEYS; k++) {
      publishes.push(topic.publishMessage({ data: Buffer.from(`k${k}:${i}`), orderingKey: `k${k}` }));
    }
  }
  const ids = await Promise.all(publishes);
  t.equal(new Set(ids).size, KEYS * PER_KEY, 'every message published');

  t.ok(await waitUntil(() => seen.size === KEYS * PER_KEY, 20_000), `every message received (${seen.size})`);
  const inOrder = Array.from({ length: PER_KEY }, (_, i) => i);
  for (let k = 0; k < KEYS; k++) t.same(firstArrivals[k], inOrder, `key k${k}: in publish order, none missing`);
  t.same(problems, []);
  t.ok(await waitUntil(async () => (await backlog(broker.app, subId)) === 0, 10_000), 'all acked');
  t.comment(`${redeliveries} redeliveries`);
  t.same(errors, []);
});

t.test('a 10 MB message over gRPC, both ways', async (t) => {
  const { topic, subscription, subId } = await topicWithSubscription(t, 'large');
  const data = randomBytes(10_000_000);
  const digest = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
  const id = await topic.publishMessage({ data });
  let received: Message | undefined;
  const errors = collect(subscription, (message) => {
    received = message;
    message.ack();
  });
  t.ok(await waitUntil(() => received !== undefined, 20_000), 'received');
  t.equal(received?.id, id);
  t.equal(received?.data.length, 10_000_000, 'all 10,000,000 bytes');
  t.equal(received && digest(received.data), digest(data), 'byte for byte');
  t.ok(await waitUntil(async () => (await backlog(broker.app, subId)) === 0, 10_000), 'acked');
  t.same(errors, []);
});

t.test('the client used gRPC only: no HTTP/1 request, no metadata server', async (t) => {
  t.same(broker.http1, [], 'no HTTP/1 request reached the broker');
  t.same(outgoing, [], 'the process started no HTTP/1 request at all');
});
