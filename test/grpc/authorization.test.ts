// Authorization through the gRPC front end: every RPC of Publisher, Subscriber and IAMPolicy ×
// each of Pub/Sub's roles on the project → answered (allowed) or PERMISSION_DENIED (code 7),
// StreamingPull included. The principals, roles and fixtures are those of the REST matrix
// (test/helpers/iam.ts, test/auth/authorization.test.ts). Standalone Redis.

import * as grpc from '@grpc/grpc-js';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { packageDefinition } from '../../src/grpc/protos.ts';
import {
  authorizingBroker,
  type Fixture,
  fixture,
  holds,
  P,
  PRINCIPALS,
  snapshotName,
  subName,
  token,
  topicName,
  type Who,
} from '../helpers/iam.ts';
import { PullStream, rpc } from './_client.ts';

type ServiceName = 'Publisher' | 'Subscriber' | 'IAMPolicy';

interface GooglePackages {
  google: {
    pubsub: { v1: Record<'Publisher' | 'Subscriber', grpc.ServiceClientConstructor> };
    iam: { v1: Record<'IAMPolicy', grpc.ServiceClientConstructor> };
  };
}
const { google } = grpc.loadPackageDefinition(packageDefinition) as unknown as GooglePackages;
const SERVICES: Record<ServiceName, grpc.ServiceClientConstructor> = {
  Publisher: google.pubsub.v1.Publisher,
  Subscriber: google.pubsub.v1.Subscriber,
  IAMPolicy: google.iam.v1.IAMPolicy,
};

interface RpcCase {
  service: ServiceName;
  method: string;
  needs: string[];
  request(f: Fixture): object;
}

const labels = { a: 'b' };
const RPCS: RpcCase[] = [
  {
    service: 'Publisher',
    method: 'CreateTopic',
    needs: ['pubsub.topics.create'],
    request: (f) => ({ name: topicName(f.spare) }),
  },
  {
    service: 'Publisher',
    method: 'GetTopic',
    needs: ['pubsub.topics.get'],
    request: (f) => ({ topic: topicName(f.topic) }),
  },
  {
    service: 'Publisher',
    method: 'UpdateTopic',
    needs: ['pubsub.topics.update'],
    request: (f) => ({ topic: { name: topicName(f.topic), labels }, updateMask: { paths: ['labels'] } }),
  },
  {
    service: 'Publisher',
    method: 'Publish',
    needs: ['pubsub.topics.publish'],
    request: (f) => ({ topic: topicName(f.topic), messages: [{ data: Buffer.from('hi') }] }),
  },
  {
    service: 'Publisher',
    method: 'ListTopics',
    needs: ['pubsub.topics.list'],
    request: () => ({ project: `projects/${P}` }),
  },
  {
    service: 'Publisher',
    method: 'ListTopicSubscriptions',
    needs: ['pubsub.topics.get'],
    request: (f) => ({ topic: topicName(f.topic) }),
  },
  {
    service: 'Publisher',
    method: 'ListTopicSnapshots',
    needs: ['pubsub.topics.get'],
    request: (f) => ({ topic: topicName(f.topic) }),
  },
  {
    service: 'Publisher',
    method: 'DeleteTopic',
    needs: ['pubsub.topics.delete'],
    request: (f) => ({ topic: topicName(f.topic) }),
  },
  {
    service: 'Publisher',
    method: 'DetachSubscription',
    needs: ['pubsub.topics.detachSubscription'],
    request: (f) => ({ subscription: subName(f.sub) }),
  },
  {
    service: 'Subscriber',
    method: 'CreateSubscription',
    needs: ['pubsub.subscriptions.create', 'pubsub.topics.attachSubscription'],
    request: (f) => ({ name: subName(f.spare), topic: topicName(f.topic) }),
  },
  {
    service: 'Subscriber',
    method: 'GetSubscription',
    needs: ['pubsub.subscriptions.get'],
    request: (f) => ({ subscription: subName(f.sub) }),
  },
  {
    service: 'Subscriber',
    method: 'UpdateSubscription',
    needs: ['pubsub.subscriptions.update'],
    request: (f) => ({
      subscription: { name: subName(f.sub), ackDeadlineSeconds: 30 },
      updateMask: { paths: ['ack_deadline_seconds'] },
    }),
  },
  {
    service: 'Subscriber',
    method: 'ListSubscriptions',
    needs: ['pubsub.subscriptions.list'],
    request: () => ({ project: `projects/${P}` }),
  },
  {
    service: 'Subscriber',
    method: 'DeleteSubscription',
    needs: ['pubsub.subscriptions.delete'],
    request: (f) => ({ subscription: subName(f.sub) }),
  },
  {
    service: 'Subscriber',
    method: 'ModifyAckDeadline',
    needs: ['pubsub.subscriptions.consume'],
    request: (f) => ({ subscription: subName(f.sub), ackIds: [f.ackId], ackDeadlineSeconds: 0 }),
  },
  {
    service: 'Subscriber',
    method: 'Acknowledge',
    needs: ['pubsub.subscriptions.consume'],
    request: (f) => ({ subscription: subName(f.sub), ackIds: [f.ackId] }),
  },
  {
    service: 'Subscriber',
    method: 'Pull',
    needs: ['pubsub.subscriptions.consume'],
    request: (f) => ({ subscription: subName(f.sub), maxMessages: 1, returnImmediately: true }),
  },
  {
    service: 'Subscriber',
    method: 'ModifyPushConfig',
    needs: ['pubsub.subscriptions.update'],
    request: (f) => ({ subscription: subName(f.sub), pushConfig: {} }),
  },
  {
    service: 'Subscriber',
    method: 'GetSnapshot',
    needs: ['pubsub.snapshots.get'],
    request: (f) => ({ snapshot: snapshotName(f.snapshot) }),
  },
  {
    service: 'Subscriber',
    method: 'ListSnapshots',
    needs: ['pubsub.snapshots.list'],
    request: () => ({ project: `projects/${P}` }),
  },
  {
    service: 'Subscriber',
    method: 'CreateSnapshot',
    needs: ['pubsub.snapshots.create', 'pubsub.subscriptions.consume'],
    request: (f) => ({ name: snapshotName(f.spare), subscription: subName(f.sub) }),
  },
  {
    service: 'Subscriber',
    method: 'UpdateSnapshot',
    needs: ['pubsub.snapshots.update'],
    request: (f) => ({ snapshot: { name: snapshotName(f.snapshot), labels }, updateMask: { paths: ['labels'] } }),
  },
  {
    service: 'Subscriber',
    method: 'DeleteSnapshot',
    needs: ['pubsub.snapshots.delete'],
    request: (f) => ({ snapshot: snapshotName(f.snapshot) }),
  },
  {
    service: 'Subscriber',
    method: 'Seek',
    needs: ['pubsub.subscriptions.consume'],
    request: (f) => ({ subscription: subName(f.sub), time: { seconds: '1577836800' } }),
  },
  {
    service: 'Subscriber',
    method: 'Seek',
    needs: ['pubsub.subscriptions.consume', 'pubsub.snapshots.seek'],
    request: (f) => ({ subscription: subName(f.sub), snapshot: snapshotName(f.snapshot) }),
  },
  ...(['topics', 'subscriptions', 'snapshots', 'projects'] as const).flatMap((kind): RpcCase[] => {
    const resource = (f: Fixture) =>
      kind === 'topics'
        ? topicName(f.topic)
        : kind === 'subscriptions'
          ? subName(f.sub)
          : kind === 'snapshots'
            ? snapshotName(f.snapshot)
            : `projects/${P}`;
    const prefix = kind === 'projects' ? 'resourcemanager.projects' : `pubsub.${kind}`;
    return [
      {
        service: 'IAMPolicy',
        method: 'GetIamPolicy',
        needs: [`${prefix}.getIamPolicy`],
        request: (f) => ({ resource: resource(f) }),
      },
      {
        service: 'IAMPolicy',
        method: 'SetIamPolicy',
        needs: [`${prefix}.setIamPolicy`],
        request: (f) => ({ resource: resource(f), policy: { bindings: [] } }),
      },
    ];
  }),
];

t.test('every RPC × each role: answered exactly when the role grants every permission it needs', async (t) => {
  const { app, api } = await authorizingBroker(t, { grpc: true });
  const address = `127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const clients: grpc.Client[] = [];
  const streams: PullStream[] = [];
  t.teardown(() => {
    for (const stream of streams) if (!stream.status) stream.cancel();
    for (const client of clients) client.close();
  });
  const clientsOf = new Map<string, Record<ServiceName, grpc.Client>>();
  const client = (who: string, service: ServiceName) => {
    if (!clientsOf.has(who)) {
      const withToken: grpc.Interceptor = (options, next) =>
        new grpc.InterceptingCall(next(options), {
          start: (metadata, listener, start) => {
            metadata.set('authorization', `Bearer ${token(who)}`);
            start(metadata, listener);
          },
        });
      const made = Object.fromEntries(
        Object.entries(SERVICES).map(([name, Service]) => {
          const each = new Service(address, grpc.credentials.createInsecure(), { interceptors: [withToken] });
          clients.push(each);
          return [name, each];
        }),
      ) as unknown as Record<ServiceName, grpc.Client>;
      clientsOf.set(who, made);
    }
    return clientsOf.get(who)![service];
  };
  const codeOf = async (call: Promise<unknown>) =>
    call.then(
      () => 0,
      (error: grpc.ServiceError) => error.code,
    );

  for (const testCase of RPCS) {
    for (const who of Object.keys(PRINCIPALS) as Who[]) {
      const f = await fixture(api);
      const allowed = testCase.needs.every((permission) => holds(who, permission));
      const code = await codeOf(rpc(client(who, testCase.service), testCase.method, testCase.request(f)));
      t.equal(code, allowed ? 0 : 7, `${who}: ${testCase.service}.${testCase.method} (${testCase.needs.join(', ')})`);
    }
  }

  for (const who of Object.keys(PRINCIPALS) as Who[]) {
    const f = await fixture(api);
    const stream = new PullStream(client(who, 'Subscriber'));
    streams.push(stream);
    if (holds(who, 'pubsub.subscriptions.consume')) {
      await stream.start({ subscription: subName(f.sub), streamAckDeadlineSeconds: 60 });
      t.pass(`${who}: StreamingPull opens`);
      stream.cancel();
    } else {
      stream.write({ subscription: subName(f.sub), streamAckDeadlineSeconds: 60 });
      t.equal((await stream.waitEnd()).code, 7, `${who}: StreamingPull ends with PERMISSION_DENIED`);
    }
  }
});
