// google.iam.v1.IAMPolicy over gRPC, and authorization of the gRPC front end. The official Node
// client's `topic.iam` and `subscription.iam` (configured as for the emulator, without
// authentication: policies are kept and shown, every permission is held); then raw grpc-js
// clients carrying bearer tokens against a broker that authorizes: unary RPCs and StreamingPull
// refused with PERMISSION_DENIED (code 7), allowed with the grant, TestIamPermissions and the
// project policy. Standalone Redis.

import * as grpc from '@grpc/grpc-js';
import { writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { buildApp } from '../../src/app.ts';
import { packageDefinition } from '../../src/grpc/protos.ts';
import { tokenAuthentication } from '../helpers/auth.ts';
import { tempDir } from '../helpers/processes.ts';
import { redisTargets, uniquePrefix } from '../helpers/redis.ts';
import { PullStream, rpc } from './_client.ts';
import { listeningBroker, pubsubFor, rejection, unique } from './_official.ts';

t.test('the official client: topic.iam and subscription.iam over gRPC', async (t) => {
  const broker = await listeningBroker(t, 'grpc-iam');
  const pubsub = pubsubFor(broker.host);
  t.teardown(() => pubsub.close());
  const [topic] = await pubsub.createTopic(unique('iam-topic'));
  const [subscription] = await topic.createSubscription(unique('iam-sub'));

  const [empty] = await topic.iam.getPolicy();
  t.same(empty.bindings ?? [], [], 'a new topic has no bindings');
  const binding = { role: 'roles/pubsub.publisher', members: ['serviceAccount:shop@example.com'] };
  const [set] = await topic.iam.setPolicy({ bindings: [binding], etag: empty.etag });
  t.same(
    set.bindings?.map((b) => ({ role: b.role, members: b.members })),
    [binding],
    'setPolicy answers the policy',
  );
  const [read] = await topic.iam.getPolicy();
  t.same(
    read.bindings?.map((b) => ({ role: b.role, members: b.members })),
    [binding],
    'getPolicy reads it back',
  );
  t.same(Buffer.from(read.etag as Uint8Array), Buffer.from(set.etag as Uint8Array), 'with the etag of the write');

  const stale = await rejection(() => topic.iam.setPolicy({ bindings: [], etag: empty.etag }));
  t.equal(stale.code, 10, 'a write from a stale read: ABORTED');
  const badRole = await rejection(() =>
    topic.iam.setPolicy({ bindings: [{ role: 'roles/owner', members: ['allUsers'] }] }),
  );
  t.equal(badRole.code, 3, 'an unknown role: INVALID_ARGUMENT');

  // Nobody is authenticated: every permission is held.
  const [held] = await subscription.iam.testPermissions(['pubsub.subscriptions.consume', 'pubsub.subscriptions.get']);
  t.same(held, { 'pubsub.subscriptions.consume': true, 'pubsub.subscriptions.get': true });
  const [subscriptionPolicy] = await subscription.iam.setPolicy({
    bindings: [{ role: 'roles/pubsub.subscriber', members: ['allAuthenticatedUsers'] }],
  });
  t.equal(subscriptionPolicy.bindings?.[0]?.role, 'roles/pubsub.subscriber', 'a subscription policy too');

  const missing = await rejection(() => pubsub.topic(unique('no-topic')).iam.getPolicy());
  t.equal(missing.code, 5, 'the policy of a missing topic: NOT_FOUND');
  await subscription.delete();
  await topic.delete();
});

const P = 'grpc-iam';
const who = ['admin', 'publisher', 'subscriber'];
const principal = (name: string) => `user:${name}@example.com`;
const token = (name: string) => `${name}-token-0123456789`;

interface GooglePackages {
  google: {
    pubsub: { v1: Record<'Publisher' | 'Subscriber', grpc.ServiceClientConstructor> };
    iam: { v1: Record<'IAMPolicy', grpc.ServiceClientConstructor> };
  };
}
const { google } = grpc.loadPackageDefinition(packageDefinition) as unknown as GooglePackages;

t.test('raw gRPC with bearer tokens: every service refuses what the caller may not do', async (t) => {
  const policyFile = join(tempDir(t, 'grpc-iam'), 'policy.json');
  writeFileSync(
    policyFile,
    JSON.stringify({
      [P]: {
        bindings: [
          { role: 'roles/pubsub.admin', members: [principal('admin')] },
          { role: 'roles/pubsub.publisher', members: [principal('publisher')] },
        ],
      },
    }),
  );
  const authentication = tokenAuthentication(t, {
    text: who.map((name) => `${principal(name)} ${token(name)}`).join('\n'),
    env: { IAM_POLICY_FILE: policyFile },
  });
  const redis = redisTargets()[0].connect();
  const app = await buildApp({ redis, keyPrefix: uniquePrefix('grpc-iam'), authentication, pullWaitMs: 100 });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = `127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const clients: grpc.Client[] = [];
  const streams: PullStream[] = [];
  t.teardown(async () => {
    for (const stream of streams) if (!stream.status) stream.cancel();
    for (const client of clients) client.close();
    await app.close();
    redis.disconnect();
  });
  /** Clients of the three services whose every call carries `name`'s token. */
  const clientsOf = (name: string) => {
    const withToken: grpc.Interceptor = (options, next) =>
      new grpc.InterceptingCall(next(options), {
        start: (metadata, listener, start) => {
          metadata.set('authorization', `Bearer ${token(name)}`);
          start(metadata, listener);
        },
      });
    const make = (Service: grpc.ServiceClientConstructor) => {
      const client = new Service(address, grpc.credentials.createInsecure(), { interceptors: [withToken] });
      clients.push(client);
      return client;
    };
    return {
      publisher: make(google.pubsub.v1.Publisher),
      subscriber: make(google.pubsub.v1.Subscriber),
      iam: make(google.iam.v1.IAMPolicy),
    };
  };
  const admin = clientsOf('admin');
  const publisher = clientsOf('publisher');
  const subscriber = clientsOf('subscriber');
  const topic = `projects/${P}/topics/orders`;
  const subscription = `projects/${P}/subscriptions/orders-sub`;
  const code = async (call: Promise<unknown>) => {
    try {
      await call;
      return 0;
    } catch (error) {
      return (error as grpc.ServiceError).code;
    }
  };

  await rpc(admin.publisher, 'CreateTopic', { name: topic });
  await rpc(admin.subscriber, 'CreateSubscription', { name: subscription, topic });
  const publish = (client: grpc.Client) => rpc(client, 'Publish', { topic, messages: [{ data: Buffer.from('hi') }] });
  t.equal(await code(publish(publisher.publisher)), 0, 'the publisher publishes');
  t.equal(await code(publish(subscriber.publisher)), 7, 'the subscriber (no grant yet) may not: PERMISSION_DENIED');
  t.equal(await code(rpc(publisher.publisher, 'DeleteTopic', { topic })), 7, 'the publisher may not delete the topic');
  t.equal(await code(rpc(publisher.publisher, 'ListTopics', { project: `projects/${P}` })), 7, 'nor list topics');
  const pull = (client: grpc.Client) => rpc(client, 'Pull', { subscription, maxMessages: 10 });
  t.equal(await code(pull(subscriber.subscriber)), 7, 'the subscriber may not pull before its grant');

  const refusedStream = new PullStream(subscriber.subscriber);
  streams.push(refusedStream);
  refusedStream.write({ subscription, streamAckDeadlineSeconds: 60 });
  t.equal((await refusedStream.waitEnd()).code, 7, 'nor stream: StreamingPull ends with PERMISSION_DENIED');

  const held = await rpc(subscriber.iam, 'TestIamPermissions', {
    resource: subscription,
    permissions: ['pubsub.subscriptions.consume', 'pubsub.subscriptions.get'],
  });
  t.same(held.permissions ?? [], [], 'TestIamPermissions: nothing held yet');
  t.equal(
    await code(rpc(subscriber.iam, 'SetIamPolicy', { resource: subscription, policy: { bindings: [] } })),
    7,
    'the subscriber may not grant itself',
  );
  await rpc(admin.iam, 'SetIamPolicy', {
    resource: subscription,
    policy: { bindings: [{ role: 'roles/pubsub.subscriber', members: [principal('subscriber')] }] },
  });
  const after = await rpc(subscriber.iam, 'TestIamPermissions', {
    resource: subscription,
    permissions: ['pubsub.subscriptions.consume', 'pubsub.subscriptions.get'],
  });
  t.same(after.permissions, ['pubsub.subscriptions.consume'], 'TestIamPermissions: consume, once granted');

  const stream = new PullStream(subscriber.subscriber);
  streams.push(stream);
  await stream.start({ subscription, streamAckDeadlineSeconds: 60 });
  const [received] = await stream.takeMessages(1);
  t.equal(received.message.data?.toString(), 'hi', 'the granted subscriber streams the message');
  stream.write({ ackIds: [received.ackId] });

  // The project's policy through the IAM service: the admin may set it, the others may not.
  t.equal(
    await code(rpc(publisher.iam, 'GetIamPolicy', { resource: `projects/${P}` })),
    7,
    'only an admin reads the project policy',
  );
  await rpc(admin.iam, 'SetIamPolicy', {
    resource: `projects/${P}`,
    policy: { bindings: [{ role: 'roles/pubsub.viewer', members: [principal('subscriber')] }] },
  });
  t.equal(
    await code(rpc(subscriber.publisher, 'ListTopics', { project: `projects/${P}` })),
    0,
    'a project grant applies',
  );
  t.equal(await code(rpc(subscriber.iam, 'GetIamPolicy', { resource: 'projects/a/b' })), 3, 'a malformed resource');
});
