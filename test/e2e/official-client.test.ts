// End to end with the official Node client (@google-cloud/pubsub 5.x) talking to the broker over
// its REST transport (google-gax "fallback" mode), over plain HTTP, with no credentials.
//
// The configuration that works (what `clientConfig` and `subscriber` below do):
//
//   process.env.METADATA_SERVER_DETECTION = 'none';        // set before the client is loaded
//   const { PubSub, v1 } = await import('@google-cloud/pubsub');
//   const { PassThroughClient } = await import('google-auth-library');
//   const authClient = new PassThroughClient({              // no Authorization header, no token
//     transporterOptions: { validateStatus: () => true },   // let gax decode error bodies (below)
//   });
//   const pubsub = new PubSub({
//     projectId: 'test-project',
//     apiEndpoint: '127.0.0.1:8085',   // host:port; PubSub splits it into servicePath + port
//     fallback: 'rest',                // HTTP/1.1 + JSON instead of gRPC
//     protocol: 'http',                // gax defaults to https
//     authClient,
//   });
//   const subscriber = new v1.SubscriberClient({
//     servicePath: '127.0.0.1', port: 8085,   // apart: a v1 client keeps port 443 for 'host:port'
//     fallback: 'rest', protocol: 'http', authClient,
//   });
//
// In TypeScript, `fallback` and `protocol` are not in PubSub's ClientConfig type (they are passed
// through to the v1 clients all the same) and PassThroughClient is not in the AnyAuthClient union,
// hence the casts below.
//
// Why validateStatus: google-gax 5.0.8's REST transport sends requests through the auth client's
// gaxios, which by default throws a GaxiosError on any non-2xx status before gax can decode the
// Google error envelope. The client then sees `code` = HTTP status (404, not 5), no ErrorInfo
// (no reason / errorInfoMetadata), gax retries on UNAVAILABLE never fire (503 is not 14), and
// `topic.exists()` throws instead of resolving false. See the "without validateStatus" test.
//
// The high-level Subscription 'message' listener uses StreamingPull, a bidi gRPC stream that the
// REST transport cannot carry, so messages are received with the unary v1 pull / acknowledge /
// modifyAckDeadline calls.
//
// A diagnostics_channel guard records every outgoing HTTP request of this process and the last
// test fails if any of them went anywhere but the broker (no token endpoint, no metadata server).

process.env.METADATA_SERVER_DETECTION = 'none';

import { randomBytes } from 'node:crypto';
import diagnosticsChannel from 'node:diagnostics_channel';
import type { ClientRequest } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import type { ClientConfig } from '@google-cloud/pubsub';
import { Redis } from 'ioredis';
import { buildApp } from '../../src/app.ts';
import { LIFT_ABOVE_BYTES } from '../../src/json-body.ts';
import { deleteSnapshotAndCheck, rejection } from '../helpers/official-client.ts';
import { testRedisUrl, uniquePrefix } from '../helpers/redis.ts';

const outgoing: string[] = [];
const onRequestStart = (message: unknown) => {
  const request = (message as { request: ClientRequest }).request;
  outgoing.push(
    `${request.method} ${request.protocol}//${String(request.getHeader('host') ?? request.host)}${request.path}`,
  );
};
diagnosticsChannel.subscribe('http.client.request.start', onRequestStart);

// Loaded after METADATA_SERVER_DETECTION is set (static imports would be hoisted above it).
const { PubSub, v1 } = await import('@google-cloud/pubsub');
const { PassThroughClient } = await import('google-auth-library');
type GoogleError = import('google-gax').GoogleError;
type PullResponse = import('@google-cloud/pubsub').protos.google.pubsub.v1.IPullResponse;
// The library's own classifier for exactly-once ack errors (what ackWithResponse() reports).
const require = createRequire(import.meta.url);
const { processAckErrorInfo } = require('@google-cloud/pubsub/build/src/ack-metadata.js') as {
  processAckErrorInfo: (
    error: GoogleError,
  ) => Map<string, { transient: boolean; response?: string; rawErrorCode?: string }>;
};

const PROJECT = 'test-project';
const redis = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1 });
const app = await buildApp({ redis, keyPrefix: uniquePrefix('official'), pullWaitMs: 2000 });
// What reached the broker, to check the wire format the client really uses.
const wire: { method: string; url: string; authorization?: string; body: unknown; bytes: number }[] = [];
app.addHook('preHandler', async (request) => {
  const bytes = Number(request.headers['content-length'] ?? 0);
  wire.push({
    method: request.method,
    url: request.url,
    authorization: request.headers.authorization,
    body: request.body,
    bytes,
  });
});
await app.listen({ port: 0, host: '127.0.0.1' });
const port = (app.server.address() as AddressInfo).port;

// Configured as in the header comment (casts explained there).
const noCredentials = new PassThroughClient({ transporterOptions: { validateStatus: () => true } });
const clientConfig: ClientConfig & { fallback: 'rest'; protocol: string } = {
  projectId: PROJECT,
  apiEndpoint: `127.0.0.1:${port}`,
  fallback: 'rest',
  protocol: 'http',
  authClient: noCredentials as unknown as ClientConfig['authClient'],
};
const pubsub = new PubSub(clientConfig);
const subscriber = new v1.SubscriberClient({
  servicePath: '127.0.0.1',
  port,
  fallback: 'rest',
  protocol: 'http',
  authClient: clientConfig.authClient,
});

t.teardown(async () => {
  await subscriber.close();
  await pubsub.close();
  await app.close();
  redis.disconnect();
  diagnosticsChannel.unsubscribe('http.client.request.start', onRequestStart);
});

const topicPath = (id: string) => `projects/${PROJECT}/topics/${id}`;
const subscriptionPath = (id: string) => `projects/${PROJECT}/subscriptions/${id}`;
const unique = (name: string) => `${name}-${Math.random().toString(36).slice(2, 10)}`;

/** Pulls until `count` messages arrived (or a few long polls came back short). */
async function pullMessages(subscription: string, count: number) {
  const received = [];
  for (let attempt = 0; attempt < 5 && received.length < count; attempt++) {
    const [response]: [PullResponse, ...unknown[]] = await subscriber.pull({
      subscription,
      maxMessages: count - received.length,
    });
    received.push(...(response.receivedMessages ?? []));
  }
  return received;
}

t.test('the client is configured for REST over plain HTTP', async (t) => {
  const config = await pubsub.getClientConfig();
  t.equal(config.servicePath, '127.0.0.1');
  t.equal(config.port, port);
  t.equal(pubsub.isEmulator, true, 'a non-googleapis endpoint counts as an emulator');
});

t.test('admin: topics and subscriptions through the high-level client', async (t) => {
  const topicId = unique('admin-topic');
  const [topic] = await pubsub.createTopic({ name: topicId, labels: { team: 'e2e' } });
  t.equal(topic.name, topicPath(topicId));

  const [fetched] = await pubsub.topic(topicId).get();
  t.equal(fetched.metadata?.name, topicPath(topicId));
  t.same(fetched.metadata?.labels, { team: 'e2e' });
  t.same(await pubsub.topic(topicId).exists(), [true]);
  t.same(await pubsub.topic(unique('never-created')).exists(), [false]);

  const [topics] = await pubsub.getTopics();
  t.ok(
    topics.some((x) => x.name === topicPath(topicId)),
    'getTopics lists the new topic',
  );

  const plainId = unique('admin-plain');
  const eodId = unique('admin-eod');
  const [plain] = await topic.createSubscription(plainId, { ackDeadlineSeconds: 30 });
  t.equal(plain.name, subscriptionPath(plainId));
  const [eod] = await pubsub.createSubscription(topicId, eodId, { enableExactlyOnceDelivery: true });
  t.equal(eod.name, subscriptionPath(eodId));

  const [plainMeta] = await plain.getMetadata();
  t.equal(plainMeta.topic, topicPath(topicId));
  t.equal(plainMeta.ackDeadlineSeconds, 30);
  t.equal(plainMeta.enableExactlyOnceDelivery, false);
  const [eodMeta] = await eod.getMetadata();
  t.equal(eodMeta.enableExactlyOnceDelivery, true);
  t.equal(eodMeta.ackDeadlineSeconds, 60, 'exactly-once subscriptions default to a 60 s deadline');

  const [allSubscriptions] = await pubsub.getSubscriptions();
  const names = allSubscriptions.map((x) => x.name);
  t.ok(
    names.includes(subscriptionPath(plainId)) && names.includes(subscriptionPath(eodId)),
    'getSubscriptions lists both',
  );
  const [topicSubscriptions] = await topic.getSubscriptions();
  t.same(topicSubscriptions.map((x) => x.name).sort(), [subscriptionPath(plainId), subscriptionPath(eodId)].sort());

  // setMetadata sends updateSubscription with snake_case FieldMask paths, joined into one string.
  const [updated] = await plain.setMetadata({ ackDeadlineSeconds: 45, labels: { stage: 'two' } });
  t.equal(updated.ackDeadlineSeconds, 45);
  t.same(updated.labels, { stage: 'two' });
  const patch = wire.filter((x) => x.method === 'PATCH').at(-1);
  t.match(
    patch,
    {
      url: `/v1/projects/${PROJECT}/subscriptions/${plainId}?$alt=json%3Benum-encoding=int`,
      body: {
        updateMask: 'ack_deadline_seconds,labels',
        subscription: { ackDeadlineSeconds: 45, labels: { stage: 'two' } },
      },
    },
    'the PATCH the client sent',
  );
  // The v1 client with an explicit lowerCamelCase-equivalent mask.
  const [viaV1] = await subscriber.updateSubscription({
    subscription: { name: subscriptionPath(plainId), retainAckedMessages: true },
    updateMask: { paths: ['retain_acked_messages'] },
  });
  t.equal(viaV1.retainAckedMessages, true);
  t.equal(viaV1.ackDeadlineSeconds, 45, 'fields outside the mask are kept');
  const [reread] = await plain.getMetadata();
  t.equal(reread.ackDeadlineSeconds, 45);
  t.equal(reread.retainAckedMessages, true);
  t.same(reread.labels, { stage: 'two' });

  await plain.delete();
  await eod.delete();
  t.same(await plain.exists(), [false]);
  await topic.delete();
  t.same(await topic.exists(), [false]);
});

t.test('admin errors map to gRPC codes', async (t) => {
  const missing = await rejection(() => pubsub.topic(unique('missing')).get());
  t.equal(missing.code, 5, 'NOT_FOUND');
  t.match(missing.message, /Resource not found/);

  const missingSub = await rejection(() => pubsub.subscription(unique('missing-sub')).getMetadata());
  t.equal(missingSub.code, 5, 'NOT_FOUND for a subscription');

  const topicId = unique('dup-topic');
  await pubsub.createTopic(topicId);
  t.teardown(() => pubsub.topic(topicId).delete());
  const duplicate = await rejection(() => pubsub.createTopic(topicId));
  t.equal(duplicate.code, 6, 'ALREADY_EXISTS');
  t.match(duplicate.message, /already exists/);

  const subId = unique('dup-sub');
  await pubsub.topic(topicId).createSubscription(subId);
  t.teardown(() => pubsub.subscription(subId).delete());
  const duplicateSub = await rejection(() => pubsub.topic(topicId).createSubscription(subId));
  t.equal(duplicateSub.code, 6, 'ALREADY_EXISTS for a subscription');

  const noTopic = await rejection(() => pubsub.topic(unique('gone')).createSubscription(unique('orphan')));
  t.equal(noTopic.code, 5, 'creating a subscription on a missing topic is NOT_FOUND');
});

t.test('publish, pull, acknowledge, modifyAckDeadline', async (t) => {
  const topicId = unique('flow-topic');
  const subId = unique('flow-sub');
  const [topic] = await pubsub.createTopic(topicId);
  await topic.createSubscription(subId, { ackDeadlineSeconds: 10 });
  t.teardown(async () => {
    await pubsub.subscription(subId).delete();
    await topic.delete();
  });
  const subscription = subscriptionPath(subId);

  const sent: { data: Buffer; attributes?: Record<string, string> }[] = [
    { data: Buffer.from('first'), attributes: { n: '1', kind: 'greeting' } },
    { data: Buffer.from('second'), attributes: { n: '2' } },
    { data: Buffer.from('third') },
  ];
  const ids = await Promise.all(sent.map((message) => topic.publishMessage(message)));
  t.equal(new Set(ids).size, 3, 'three distinct message IDs');
  for (const id of ids) t.match(id, /^\S+$/);

  const received = await pullMessages(subscription, 3);
  t.equal(received.length, 3);
  const byData = new Map(received.map((r) => [Buffer.from(r.message!.data as Uint8Array).toString(), r]));
  t.same([...byData.keys()].sort(), ['first', 'second', 'third']);
  const first = byData.get('first')!;
  t.same(first.message!.attributes, { n: '1', kind: 'greeting' });
  t.equal(first.message!.messageId, ids[0]);
  t.ok(Number(first.message!.publishTime?.seconds) > 0, 'publishTime decodes as a Timestamp');
  t.same(byData.get('third')!.message!.attributes, {});
  for (const r of received) t.ok(r.ackId, 'every message has an ack ID');

  // Extend one, nack one (deadline 0), ack the rest.
  await subscriber.modifyAckDeadline({ subscription, ackIds: [first.ackId!], ackDeadlineSeconds: 60 });
  const second = byData.get('second')!;
  await subscriber.modifyAckDeadline({ subscription, ackIds: [second.ackId!], ackDeadlineSeconds: 0 });
  await subscriber.acknowledge({ subscription, ackIds: [byData.get('third')!.ackId!] });

  const [again] = await subscriber.pull({ subscription, maxMessages: 10 });
  const redelivered = again.receivedMessages ?? [];
  t.equal(redelivered.length, 1, 'only the nacked message comes back');
  t.equal(redelivered[0]?.message?.messageId, second.message!.messageId);
  t.equal(Buffer.from(redelivered[0]!.message!.data as Uint8Array).toString(), 'second');
  t.not(redelivered[0]?.ackId, second.ackId, 'a redelivery has a new ack ID');

  await subscriber.acknowledge({ subscription, ackIds: [first.ackId!, redelivered[0]!.ackId!] });
  // Non-exactly-once: acking again is a silent success.
  await subscriber.acknowledge({ subscription, ackIds: [first.ackId!] });
  const [empty] = await subscriber.pull({ subscription, maxMessages: 10, returnImmediately: true });
  t.same(empty.receivedMessages ?? [], [], 'nothing left after the acks');
});

t.test('a batch over 128 KB (parsed with its data lifted out) arrives intact', async (t) => {
  const topicId = unique('big-topic');
  const subId = unique('big-sub');
  const [topic] = await pubsub.createTopic(topicId);
  await topic.createSubscription(subId);
  t.teardown(async () => {
    await pubsub.subscription(subId).delete();
    await topic.delete();
  });
  const sent = Array.from({ length: 150 }, (_, i) => ({
    data: randomBytes(1200),
    attributes: { n: String(i), data: `attribute ${i}` },
  }));
  const ids = await Promise.all(sent.map((message) => topic.publishMessage(message)));
  t.equal(new Set(ids).size, sent.length, 'every message published');
  const publishes = wire.filter((request) => request.url.includes(topicId) && request.url.includes('publish'));
  t.ok(
    publishes.some((request) => request.bytes > LIFT_ABOVE_BYTES),
    `a publish request over 128 KB (${publishes.map((r) => r.bytes).join(', ')} bytes)`,
  );
  const received = await pullMessages(subscriptionPath(subId), sent.length);
  t.equal(received.length, sent.length, 'every message pulled');
  const byN = new Map(received.map((r) => [r.message!.attributes!.n, r.message!]));
  const mismatches = sent.filter(
    (message) =>
      !Buffer.from(byN.get(message.attributes.n)?.data as Uint8Array).equals(message.data) ||
      byN.get(message.attributes.n)?.attributes?.data !== message.attributes.data,
  );
  t.equal(mismatches.length, 0, 'data and attributes as sent');
  await subscriber.acknowledge({ subscription: subscriptionPath(subId), ackIds: received.map((r) => r.ackId!) });
});

t.test('exactly-once ack failures are decoded by the client', async (t) => {
  const topicId = unique('eod-topic');
  const subId = unique('eod-sub');
  const [topic] = await pubsub.createTopic(topicId);
  await topic.createSubscription(subId, { enableExactlyOnceDelivery: true });
  t.teardown(async () => {
    await pubsub.subscription(subId).delete();
    await topic.delete();
  });
  const subscription = subscriptionPath(subId);

  const checkInvalidAckId = (t: Test, error: GoogleError, ackId: string) => {
    t.equal(error.code, 3, 'INVALID_ARGUMENT');
    t.equal(error.reason, 'EXACTLY_ONCE_ACKID_FAILURE');
    t.equal(error.domain, 'pubsub.googleapis.com');
    t.same(error.errorInfoMetadata, { [ackId]: 'PERMANENT_FAILURE_INVALID_ACK_ID' });
    t.match(error.message, /acknowledgement ids in the request were invalid/);
    t.match(error.statusDetails, [{ reason: 'EXACTLY_ONCE_ACKID_FAILURE' }], 'the ErrorInfo is in statusDetails');
    const classified = processAckErrorInfo(error);
    t.same(
      classified.get(ackId),
      {
        transient: false,
        response: 'INVALID',
        rawErrorCode: 'PERMANENT_FAILURE_INVALID_ACK_ID',
      },
      'the library classifies it as AckResponses.Invalid',
    );
  };

  t.test('acking the same ack ID twice', async (t) => {
    await topic.publishMessage({ data: Buffer.from('once') });
    const [message] = await pullMessages(subscription, 1);
    t.ok(message?.ackId);
    // Receipt modack, as the client does for every exactly-once delivery.
    await subscriber.modifyAckDeadline({ subscription, ackIds: [message.ackId!], ackDeadlineSeconds: 60 });
    await subscriber.acknowledge({ subscription, ackIds: [message.ackId!] });
    const error = await rejection(() => subscriber.acknowledge({ subscription, ackIds: [message.ackId!] }));
    checkInvalidAckId(t, error, message.ackId!);
  });

  t.test('a stale ack ID after a nack and redelivery', async (t) => {
    await topic.publishMessage({ data: Buffer.from('nacked') });
    const [first] = await pullMessages(subscription, 1);
    await subscriber.modifyAckDeadline({ subscription, ackIds: [first.ackId!], ackDeadlineSeconds: 0 });
    const [second] = await pullMessages(subscription, 1);
    t.equal(second?.message?.messageId, first.message!.messageId, 'the nacked message is redelivered');
    t.not(second.ackId, first.ackId);

    const staleAck = await rejection(() => subscriber.acknowledge({ subscription, ackIds: [first.ackId!] }));
    checkInvalidAckId(t, staleAck, first.ackId!);
    const staleModack = await rejection(() =>
      subscriber.modifyAckDeadline({ subscription, ackIds: [first.ackId!], ackDeadlineSeconds: 30 }),
    );
    checkInvalidAckId(t, staleModack, first.ackId!);

    // A mixed request fails as a whole but lists only the bad ID; the good one is applied.
    const mixed = await rejection(() =>
      subscriber.acknowledge({ subscription, ackIds: [first.ackId!, second.ackId!] }),
    );
    checkInvalidAckId(t, mixed, first.ackId!);
    const [left] = await subscriber.pull({ subscription, maxMessages: 10, returnImmediately: true });
    t.same(left.receivedMessages ?? [], [], 'the valid ack ID in the failed request was acknowledged');
  });
});

t.test('seek over REST: a time before the publishes replays, a later one purges', async (t) => {
  const topicId = unique('seek-topic');
  const subId = unique('seek-sub');
  const [topic] = await pubsub.createTopic(topicId);
  const [subscription] = await topic.createSubscription(subId, { retainAckedMessages: true });
  const before = new Date(Date.now() - 1000);
  for (const text of ['a', 'b']) await topic.publishMessage({ data: Buffer.from(text) });
  const first = await pullMessages(subscriptionPath(subId), 2);
  await subscriber.acknowledge({ subscription: subscriptionPath(subId), ackIds: first.map((m) => m.ackId!) });

  t.strictSame((await subscription.seek(before))[0], {}, 'seek answers {}');
  const replayed = await pullMessages(subscriptionPath(subId), 2);
  t.same(
    replayed.map((m) => Buffer.from(m.message!.data as Uint8Array).toString()).sort(),
    ['a', 'b'],
    'both come back',
  );
  await subscription.seek(new Date(Date.now() + 1000));
  const [empty]: [PullResponse, ...unknown[]] = await subscriber.pull({
    subscription: subscriptionPath(subId),
    maxMessages: 10,
    returnImmediately: true,
  });
  t.same(empty.receivedMessages ?? [], [], 'a seek to a later time leaves nothing to pull');
  await subscription.delete();
  await topic.delete();
});

t.test('snapshots over REST: create, seek to one, list, delete', async (t) => {
  const topicId = unique('snap-topic');
  const subId = unique('snap-sub');
  const [topic] = await pubsub.createTopic(topicId);
  const [subscription] = await topic.createSubscription(subId);
  t.teardown(async () => {
    await subscription.delete();
    await topic.delete();
  });
  const publishedAt = Date.now();
  for (const text of ['a', 'b']) await topic.publishMessage({ data: Buffer.from(text) });

  const snapshotId = unique('snap');
  const snapshotName = `projects/${PROJECT}/snapshots/${snapshotId}`;
  const [snapshot] = await subscription.createSnapshot(snapshotId);
  t.equal(snapshot.name, snapshotName, 'createSnapshot answers the snapshot');
  t.equal(snapshot.metadata?.topic, topicPath(topicId), 'of the topic of the subscription');
  const expireMs = Number(snapshot.metadata?.expireTime?.seconds) * 1000;
  const weekMs = 7 * 24 * 3600 * 1000;
  t.ok(
    expireMs >= publishedAt + weekMs - 2000 && expireMs <= Date.now() + weekMs,
    'expireTime, decoded as a Timestamp: seven days after the oldest unacknowledged message',
  );
  t.match(
    wire.find((x) => x.method === 'PUT' && x.url.split('?')[0] === `/v1/${snapshotName}`),
    { body: { subscription: subscriptionPath(subId) } },
    'sent as PUT /v1/{name} with the subscription in the body',
  );

  await topic.publishMessage({ data: Buffer.from('c') });
  const first = await pullMessages(subscriptionPath(subId), 3);
  await subscriber.acknowledge({ subscription: subscriptionPath(subId), ackIds: first.map((m) => m.ackId!) });
  t.strictSame((await subscription.seek(snapshotId))[0], {}, 'a seek to the snapshot answers {}');
  t.strictSame(
    wire
      .filter((x) => x.url.split('?')[0] === `/v1/${subscriptionPath(subId)}:seek`)
      .map(({ method, body }) => ({ method, body })),
    [{ method: 'POST', body: { snapshot: snapshotName } }],
    'sent once, with the full snapshot name',
  );
  const replayed = await pullMessages(subscriptionPath(subId), 3);
  t.same(
    replayed.map((m) => Buffer.from(m.message!.data as Uint8Array).toString()).sort(),
    ['a', 'b', 'c'],
    "the snapshot's messages and the one published after it come back",
  );
  if (replayed.length > 0) {
    await subscriber.acknowledge({ subscription: subscriptionPath(subId), ackIds: replayed.map((m) => m.ackId!) });
  }

  const [snapshots] = await pubsub.getSnapshots();
  const listed = snapshots.find((s) => s.name === snapshotName);
  t.equal(listed?.metadata?.topic, topicPath(topicId), 'getSnapshots lists it, with its topic');
  t.equal(
    String(listed?.metadata?.expireTime?.seconds),
    String(snapshot.metadata?.expireTime?.seconds),
    'and expireTime',
  );

  await deleteSnapshotAndCheck(t, pubsub, subscription, snapshot);
});

t.test('without validateStatus, gax 5 hands back raw GaxiosErrors (why the config sets it)', async (t) => {
  // Documents a client-side limitation, not broker behaviour: the same broker answer (404 with
  // "status": "NOT_FOUND") is decoded only when the auth client's gaxios does not throw first.
  const stock = new PubSub({
    ...clientConfig,
    authClient: new PassThroughClient() as unknown as ClientConfig['authClient'],
  });
  t.teardown(() => stock.close());
  const error = (await rejection(() => stock.topic(unique('missing')).get())) as unknown as Record<string, unknown>;
  t.equal(error.constructor.name, 'GaxiosError');
  t.equal(error.code, 404, 'the HTTP status, not the gRPC code 5');
  t.match(String(error.message), /"status":"NOT_FOUND"/, 'the message is the raw JSON body');
  await t.rejects(stock.topic(unique('missing')).exists(), 'so topic.exists() throws instead of resolving false');
});

t.test('no request left for anywhere but the broker', async (t) => {
  t.same(
    wire.filter((x) => x.authorization !== undefined),
    [],
    'no Authorization header was ever sent',
  );
  const elsewhere = outgoing.filter((line) => !line.includes(`//127.0.0.1:${port}/`));
  t.same(elsewhere, [], 'no token endpoint, no metadata server, no googleapis.com');
  t.ok(outgoing.length > 0, 'the guard saw the client requests');
});
