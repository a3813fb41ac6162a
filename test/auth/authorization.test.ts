// Authorization (Pub/Sub's IAM model) through the REST front end: every route × each role of
// Pub/Sub, granted on the project by IAM_POLICY_FILE → allowed or refused (403
// PERMISSION_DENIED, nothing changed); grants on one topic, subscription or snapshot reach that
// resource alone; the WebSocket upgrade; :testIamPermissions answers; ack IDs stay bound to their
// subscription; the policy file. Standalone Redis. The gRPC front end's matrix is in
// test/grpc/authorization.test.ts.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { buildApp } from '../../src/app.ts';
import { loadConfig } from '../../src/config.ts';
import { tokenAuthentication } from '../helpers/auth.ts';
import {
  type Api,
  authorizingBroker,
  type Fixture,
  fixture,
  holds,
  P,
  PRINCIPALS,
  principal,
  ROLE_PERMISSIONS,
  snapshotName,
  snapshotPath,
  subName,
  subPath,
  token,
  topicName,
  topicPath,
  type Who,
} from '../helpers/iam.ts';
import { tempDir } from '../helpers/processes.ts';
import { redisTargets, uniquePrefix } from '../helpers/redis.ts';

const OTHER = 'authz-other';

interface Case {
  what: string;
  /** Every permission the call needs (Pub/Sub's access control table). */
  needs: string[];
  call(f: Fixture): [method: string, url: string, body?: unknown];
  /** What an allowed call answers, when not 200 (a refusal must still be 403 first). */
  allowedStatus?: number;
}

const CASES: Case[] = [
  { what: 'CreateTopic', needs: ['pubsub.topics.create'], call: (f) => ['PUT', topicPath(f.spare), {}] },
  { what: 'GetTopic', needs: ['pubsub.topics.get'], call: (f) => ['GET', topicPath(f.topic)] },
  {
    what: 'UpdateTopic',
    needs: ['pubsub.topics.update'],
    call: (f) => ['PATCH', topicPath(f.topic), { topic: { labels: { a: 'b' } }, updateMask: 'labels' }],
  },
  { what: 'ListTopics', needs: ['pubsub.topics.list'], call: () => ['GET', `/v1/projects/${P}/topics`] },
  {
    what: 'ListTopicSubscriptions',
    needs: ['pubsub.topics.get'],
    call: (f) => ['GET', `${topicPath(f.topic)}/subscriptions`],
  },
  { what: 'ListTopicSnapshots', needs: ['pubsub.topics.get'], call: (f) => ['GET', `${topicPath(f.topic)}/snapshots`] },
  {
    what: 'Publish',
    needs: ['pubsub.topics.publish'],
    call: (f) => ['POST', `${topicPath(f.topic)}:publish`, { messages: [{ data: 'aGk=' }] }],
  },
  { what: 'DeleteTopic', needs: ['pubsub.topics.delete'], call: (f) => ['DELETE', topicPath(f.topic)] },
  {
    what: 'CreateSubscription',
    needs: ['pubsub.subscriptions.create', 'pubsub.topics.attachSubscription'],
    call: (f) => ['PUT', subPath(f.spare), { topic: topicName(f.topic) }],
  },
  { what: 'GetSubscription', needs: ['pubsub.subscriptions.get'], call: (f) => ['GET', subPath(f.sub)] },
  {
    what: 'UpdateSubscription',
    needs: ['pubsub.subscriptions.update'],
    call: (f) => [
      'PATCH',
      subPath(f.sub),
      { subscription: { ackDeadlineSeconds: 30 }, updateMask: 'ackDeadlineSeconds' },
    ],
  },
  {
    what: 'ModifyPushConfig',
    needs: ['pubsub.subscriptions.update'],
    call: (f) => ['POST', `${subPath(f.sub)}:modifyPushConfig`, { pushConfig: {} }],
  },
  {
    what: 'ListSubscriptions',
    needs: ['pubsub.subscriptions.list'],
    call: () => ['GET', `/v1/projects/${P}/subscriptions`],
  },
  { what: 'DeleteSubscription', needs: ['pubsub.subscriptions.delete'], call: (f) => ['DELETE', subPath(f.sub)] },
  {
    what: 'DetachSubscription',
    needs: ['pubsub.topics.detachSubscription'],
    call: (f) => ['POST', `${subPath(f.sub)}:detach`],
  },
  {
    what: 'Pull',
    needs: ['pubsub.subscriptions.consume'],
    call: (f) => ['POST', `${subPath(f.sub)}:pull`, { maxMessages: 1, returnImmediately: true }],
  },
  {
    what: 'Acknowledge',
    needs: ['pubsub.subscriptions.consume'],
    call: (f) => ['POST', `${subPath(f.sub)}:acknowledge`, { ackIds: [f.ackId] }],
  },
  {
    what: 'ModifyAckDeadline',
    needs: ['pubsub.subscriptions.consume'],
    call: (f) => ['POST', `${subPath(f.sub)}:modifyAckDeadline`, { ackIds: [f.ackId], ackDeadlineSeconds: 0 }],
  },
  {
    what: 'Seek to a time',
    needs: ['pubsub.subscriptions.consume'],
    call: (f) => ['POST', `${subPath(f.sub)}:seek`, { time: '2020-01-01T00:00:00Z' }],
  },
  {
    what: 'Seek to a snapshot',
    needs: ['pubsub.subscriptions.consume', 'pubsub.snapshots.seek'],
    call: (f) => ['POST', `${subPath(f.sub)}:seek`, { snapshot: snapshotName(f.snapshot) }],
  },
  {
    what: 'CreateSnapshot',
    needs: ['pubsub.snapshots.create', 'pubsub.subscriptions.consume'],
    call: (f) => ['PUT', snapshotPath(f.spare), { subscription: subName(f.sub) }],
  },
  { what: 'GetSnapshot', needs: ['pubsub.snapshots.get'], call: (f) => ['GET', snapshotPath(f.snapshot)] },
  {
    what: 'UpdateSnapshot',
    needs: ['pubsub.snapshots.update'],
    call: (f) => ['PATCH', snapshotPath(f.snapshot), { snapshot: { labels: { a: 'b' } }, updateMask: 'labels' }],
  },
  { what: 'ListSnapshots', needs: ['pubsub.snapshots.list'], call: () => ['GET', `/v1/projects/${P}/snapshots`] },
  { what: 'DeleteSnapshot', needs: ['pubsub.snapshots.delete'], call: (f) => ['DELETE', snapshotPath(f.snapshot)] },
  // The queryable backlog (the broker's extension): counts are metadata, messages are for consumers.
  { what: 'backlog counts', needs: ['pubsub.subscriptions.get'], call: (f) => ['GET', `${subPath(f.sub)}/backlog`] },
  {
    what: 'backlog messages',
    needs: ['pubsub.subscriptions.consume'],
    call: (f) => ['GET', `${subPath(f.sub)}/messages`],
  },
  {
    what: 'a topic message',
    needs: ['pubsub.topics.attachSubscription'],
    call: (f) => ['GET', `${topicPath(f.topic)}/messages/${f.messageId}`],
  },
  // IAM methods: reading and writing a policy need their own permissions, on every kind of resource.
  ...(['topics', 'subscriptions', 'snapshots'] as const).flatMap((kind): Case[] => {
    const path = (f: Fixture) =>
      kind === 'topics' ? topicPath(f.topic) : kind === 'subscriptions' ? subPath(f.sub) : snapshotPath(f.snapshot);
    return [
      {
        what: `GetIamPolicy on ${kind}`,
        needs: [`pubsub.${kind}.getIamPolicy`],
        call: (f) => ['GET', `${path(f)}:getIamPolicy`],
      },
      {
        what: `GetIamPolicy by POST on ${kind}`,
        needs: [`pubsub.${kind}.getIamPolicy`],
        call: (f) => ['POST', `${path(f)}:getIamPolicy`, {}],
      },
      {
        what: `SetIamPolicy on ${kind}`,
        needs: [`pubsub.${kind}.setIamPolicy`],
        call: (f) => ['POST', `${path(f)}:setIamPolicy`, { policy: { bindings: [] } }],
      },
    ];
  }),
  {
    what: 'GetIamPolicy on the project',
    needs: ['resourcemanager.projects.getIamPolicy'],
    call: () => ['GET', `/v1/projects/${P}:getIamPolicy`],
  },
  {
    what: 'SetIamPolicy on the project',
    needs: ['resourcemanager.projects.setIamPolicy'],
    call: () => ['POST', `/v1/projects/${P}:setIamPolicy`, { policy: { bindings: [] } }],
  },
];

t.test('every route × each role: allowed exactly when the role grants every permission the call needs', async (t) => {
  const { api } = await authorizingBroker(t);
  for (const testCase of CASES) {
    for (const who of Object.keys(PRINCIPALS) as Who[]) {
      const f = await fixture(api);
      const [method, url, body] = testCase.call(f);
      const before = await snapshotOf(api, f);
      const { status, body: answer } = await api(who, method, url, body);
      const allowed = testCase.needs.every((permission) => holds(who, permission));
      if (allowed) {
        t.equal(
          status,
          testCase.allowedStatus ?? 200,
          `${who}: ${testCase.what} is allowed (${JSON.stringify(answer)})`,
        );
      } else {
        t.equal(status, 403, `${who}: ${testCase.what} is refused`);
        t.equal(answer?.error?.status, 'PERMISSION_DENIED', `${who}: ${testCase.what} answers PERMISSION_DENIED`);
        t.same(await snapshotOf(api, f), before, `${who}: a refused ${testCase.what} changes nothing`);
      }
    }
  }
});

/** What a case could change, as the admin sees it: resources, their settings and policies, the messages. */
async function snapshotOf(api: Api, f: Fixture) {
  const read = async (url: string) => (await api('admin', 'GET', url)).body;
  return {
    topic: await read(topicPath(f.topic)),
    spareTopic: await read(topicPath(f.spare)),
    sub: await read(subPath(f.sub)),
    spareSub: await read(subPath(f.spare)),
    snapshot: await read(snapshotPath(f.snapshot)),
    spareSnapshot: await read(snapshotPath(f.spare)),
    policies: await Promise.all(
      [topicPath(f.topic), subPath(f.sub), snapshotPath(f.snapshot), `/v1/projects/${P}`].map((path) =>
        read(`${path}:getIamPolicy`),
      ),
    ),
    // Its messages and their state; their age grows meanwhile.
    backlog: { ...(await read(`${subPath(f.sub)}/backlog`)), oldestUnackedMessageAge: undefined },
  };
}

t.test('grants on one resource reach that resource alone', async (t) => {
  const { api } = await authorizingBroker(t);
  const granted = await fixture(api);
  const other = await fixture(api);
  const grant = async (path: string, role: string) => {
    const { status } = await api('admin', 'POST', `${path}:setIamPolicy`, {
      policy: { bindings: [{ role, members: [principal('grantee')] }] },
    });
    t.equal(status, 200, `granted ${role} on ${path}`);
  };
  await grant(topicPath(granted.topic), 'roles/pubsub.publisher');
  await grant(subPath(granted.sub), 'roles/pubsub.subscriber');
  await grant(snapshotPath(granted.snapshot), 'roles/pubsub.viewer');

  const publish = (f: Fixture) =>
    api('grantee', 'POST', `${topicPath(f.topic)}:publish`, { messages: [{ data: 'aGk=' }] });
  const pull = (f: Fixture) =>
    api('grantee', 'POST', `${subPath(f.sub)}:pull`, { maxMessages: 5, returnImmediately: true });
  t.equal((await publish(granted)).status, 200, 'publishes to the topic it was granted');
  t.equal((await publish(other)).status, 403, 'not to another topic');
  t.equal((await pull(granted)).status, 200, 'pulls from the subscription it was granted');
  t.equal((await pull(other)).status, 403, 'not from another subscription');
  t.equal(
    (await api('grantee', 'GET', snapshotPath(granted.snapshot))).status,
    200,
    'reads the snapshot it was granted',
  );
  t.equal((await api('grantee', 'GET', snapshotPath(other.snapshot))).status, 403, 'not another snapshot');
  t.equal((await api('grantee', 'GET', topicPath(granted.topic))).status, 403, 'publisher does not grant get');
  const seekTo = (snapshot: string) =>
    api('grantee', 'POST', `${subPath(granted.sub)}:seek`, { snapshot: snapshotName(snapshot) });
  t.equal(
    (await seekTo(granted.snapshot)).status,
    403,
    'consuming is not enough to seek to a snapshot it may only view',
  );
  await grant(snapshotPath(other.snapshot), 'roles/pubsub.subscriber');
  const ofAnotherTopic = await seekTo(other.snapshot);
  t.equal(
    ofAnotherTopic.status,
    400,
    'with seek on the snapshot, the seek is judged (here: the snapshot is of another topic)',
  );
  t.equal((await api('grantee', 'GET', `/v1/projects/${P}/topics`)).status, 403, 'no listing without a project grant');
  // A resource grant says nothing about another project.
  t.equal(
    (await api('admin', 'GET', `/v1/projects/${OTHER}/topics`)).status,
    403,
    'the admin of P is nobody in another project',
  );

  // Deleting a topic deletes its policy: a topic made again under the name starts without one.
  t.equal((await api('admin', 'DELETE', topicPath(granted.topic))).status, 200);
  t.equal((await api('admin', 'PUT', topicPath(granted.topic), {})).status, 200);
  t.equal((await publish(granted)).status, 403, 'the new topic does not inherit the old one’s grants');
  t.same((await api('admin', 'GET', `${topicPath(granted.topic)}:getIamPolicy`)).body, { version: 1, etag: 'ACAB' });

  // Project policies set through the API apply to every resource of the project.
  const project = await api('admin', 'POST', `/v1/projects/${OTHER}:setIamPolicy`, { policy: { bindings: [] } });
  t.equal(project.status, 403, 'the admin of P cannot set the policy of another project');
  const set = await api('admin', 'POST', `/v1/projects/${P}:setIamPolicy`, {
    policy: { bindings: [{ role: 'roles/pubsub.viewer', members: [principal('stranger')] }] },
  });
  t.equal(set.status, 200);
  t.equal(
    (await api('stranger', 'GET', `/v1/projects/${P}/topics`)).status,
    200,
    'a project grant lets the stranger list',
  );
  t.equal(
    (await api('stranger', 'POST', `${topicPath(other.topic)}:publish`, { messages: [{ data: 'aGk=' }] })).status,
    403,
  );
});

t.test(
  'testIamPermissions answers what the caller holds, and nothing for a resource that does not exist',
  async (t) => {
    const { api, redis } = await authorizingBroker(t);
    const f = await fixture(api);
    await api('admin', 'POST', `${subPath(f.sub)}:setIamPolicy`, {
      policy: { bindings: [{ role: 'roles/pubsub.subscriber', members: [principal('grantee')] }] },
    });
    const asked = ROLE_PERMISSIONS['roles/pubsub.admin'].filter((permission) =>
      permission.startsWith('pubsub.subscriptions.'),
    );
    for (const who of [...(Object.keys(PRINCIPALS) as Who[]), 'grantee']) {
      const { status, body } = await api(who, 'POST', `${subPath(f.sub)}:testIamPermissions`, { permissions: asked });
      t.equal(status, 200, `${who} may always test`);
      const expected =
        who === 'grantee'
          ? ['pubsub.subscriptions.consume']
          : asked.filter((permission) => holds(who as Who, permission));
      t.same(body.permissions ?? [], expected, `${who} holds ${expected.join(', ') || 'nothing'}`);
    }
    // The subscription's record (and its policy) is read once, however many permissions are tested.
    let recordReads = 0;
    const hget = redis.hget.bind(redis);
    redis.hget = ((key: string, field: string) => {
      if (field === subName(f.sub)) recordReads++;
      return hget(key, field);
    }) as typeof redis.hget;
    t.teardown(() => {
      redis.hget = hget;
    });
    await api('grantee', 'POST', `${subPath(f.sub)}:testIamPermissions`, { permissions: asked });
    redis.hget = hget;
    t.equal(recordReads, 1, `testing ${asked.length} permissions reads the record once`);
    const missing = await api('admin', 'POST', `${subPath('no-such-sub')}:testIamPermissions`, { permissions: asked });
    t.same(missing, { status: 200, body: {} }, 'a missing subscription: no permissions, not NOT_FOUND');
    const wrongKind = await api('admin', 'POST', `${subPath(f.sub)}:testIamPermissions`, {
      permissions: ['pubsub.topics.publish'],
    });
    t.equal(wrongKind.status, 400, 'a permission of another kind of resource is INVALID_ARGUMENT');
    const onProject = await api('subscriber', 'POST', `/v1/projects/${P}:testIamPermissions`, {
      permissions: ['pubsub.topics.publish', 'pubsub.subscriptions.consume'],
    });
    t.same(
      onProject.body,
      { permissions: ['pubsub.subscriptions.consume'] },
      'any permission may be tested on a project',
    );
  },
);

t.test('the WebSocket upgrade of streaming pull is refused with 403 without the right to consume', async (t) => {
  const { api, app } = await authorizingBroker(t);
  const f = await fixture(api);
  const upgrade = (who: string) =>
    app.inject({
      method: 'GET',
      url: `${subPath(f.sub)}:streamingPull`,
      headers: {
        authorization: `Bearer ${token(who)}`,
        connection: 'Upgrade',
        upgrade: 'websocket',
        'sec-websocket-version': '13',
        'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==',
      },
    });
  for (const who of ['viewer', 'publisher', 'nobody']) {
    const refused = await upgrade(who);
    t.equal(refused.statusCode, 403, `${who} is refused before the upgrade`);
    t.equal(JSON.parse(refused.body).error.status, 'PERMISSION_DENIED');
  }
  // inject cannot complete an upgrade: an allowed caller gets past the check to the upgrade itself.
  for (const who of ['subscriber', 'editor', 'admin']) {
    t.not((await upgrade(who)).statusCode, 403, `${who} passes the check`);
  }
});

t.test('ack IDs stay bound to their subscription', async (t) => {
  const { api } = await authorizingBroker(t);
  const mine = await fixture(api);
  const theirs = await fixture(api);
  await api('admin', 'POST', `${subPath(mine.sub)}:setIamPolicy`, {
    policy: { bindings: [{ role: 'roles/pubsub.subscriber', members: [principal('grantee')] }] },
  });
  // The grantee holds another subscription's ack ID (leaked, say) and may consume only its own.
  const direct = await api('grantee', 'POST', `${subPath(theirs.sub)}:acknowledge`, { ackIds: [theirs.ackId] });
  t.equal(direct.status, 403, 'acking on the other subscription is refused');
  const through = await api('grantee', 'POST', `${subPath(mine.sub)}:acknowledge`, { ackIds: [theirs.ackId] });
  t.equal(through.status, 400, 'through its own subscription the foreign ack ID is invalid');
  const nack = await api('grantee', 'POST', `${subPath(mine.sub)}:modifyAckDeadline`, {
    ackIds: [theirs.ackId],
    ackDeadlineSeconds: 0,
  });
  t.equal(nack.status, 400, 'and cannot change its deadline either');
  const counts = await api('admin', 'GET', `${subPath(theirs.sub)}/backlog`);
  t.equal(counts.body.leasedMessageCount, 1, "the other subscription's message is still leased, unacknowledged");
});

t.test('setIamPolicy: etag concurrency and bad policies change nothing', async (t) => {
  const { api } = await authorizingBroker(t);
  const f = await fixture(api);
  const url = `${topicPath(f.topic)}:setIamPolicy`;
  const first = await api('admin', 'GET', `${topicPath(f.topic)}:getIamPolicy`);
  t.same(first.body, { version: 1, etag: 'ACAB' }, 'a resource without a policy');
  const binding = { role: 'roles/pubsub.publisher', members: [principal('grantee')] };
  const set = await api('admin', 'POST', url, { policy: { bindings: [binding], etag: first.body.etag } });
  t.equal(set.status, 200);
  t.not(set.body.etag, 'ACAB', 'a new etag');
  // The etag is bytes: sent back in the URL-safe alphabet without padding (as gcloud does), it is the same.
  const urlSafe = (etag: string) => etag.replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
  const again = await api('admin', 'POST', url, { policy: { bindings: [binding], etag: urlSafe(set.body.etag) } });
  t.equal(again.status, 200, 'the current etag in another spelling is the current etag');
  set.body = again.body;
  const stale = await api('admin', 'POST', url, { policy: { bindings: [], etag: first.body.etag } });
  t.equal(stale.status, 409, 'a write from a stale read is refused');
  t.equal(stale.body.error.status, 'ABORTED');
  for (const [policy, problem] of [
    [{ bindings: [{ role: 'roles/owner', members: [principal('grantee')] }] }, 'an unknown role'],
    [{ bindings: [{ role: 'roles/pubsub.viewer', members: ['grantee'] }] }, 'a member without a type'],
    [{ bindings: [{ role: 'roles/pubsub.viewer', members: ['group:team@example.com'] }] }, 'a group'],
    [
      { bindings: [{ role: 'roles/pubsub.viewer', members: [principal('x')], condition: { expression: 'true' } }] },
      'a condition',
    ],
  ] as const) {
    const refused = await api('admin', 'POST', url, { policy });
    t.equal(refused.status, 400, `${problem} is INVALID_ARGUMENT`);
  }
  t.equal((await api('admin', 'POST', url, { policy: { bindings: [] }, updateMask: 'auditConfigs' })).status, 400);
  const after = await api('admin', 'GET', `${topicPath(f.topic)}:getIamPolicy`);
  t.same(after.body, set.body, 'the refused writes changed nothing');
  // Without the etag in the mask a stale etag does not matter; without bindings in it they stay.
  const etagOnly = await api('admin', 'POST', url, { policy: { bindings: [], etag: 'stale' }, updateMask: 'etag' });
  t.equal(etagOnly.status, 409, 'an etag in the mask is checked');
  const bindingsOnly = await api('admin', 'POST', url, {
    policy: { bindings: [], etag: 'stale' },
    updateMask: 'bindings',
  });
  t.equal(bindingsOnly.status, 200, 'an etag outside the mask is not');
  t.same(bindingsOnly.body.bindings, undefined, 'the bindings were replaced');
});

let created = 0;

t.test('the policy file: reloaded when it changes, refused when malformed or without authentication', async (t) => {
  const policyFile = join(tempDir(t, 'iam-reload'), 'policy.json');
  const grant = (role: string) =>
    writeFileSync(policyFile, JSON.stringify({ '*': { bindings: [{ role, members: [principal('stranger')] }] } }));
  grant('roles/pubsub.viewer');
  const authentication = tokenAuthentication(t, {
    text: `${principal('stranger')} ${token('stranger')}`,
    env: { IAM_POLICY_FILE: policyFile },
  });
  const redis = redisTargets()[0].connect();
  const app = await buildApp({ redis, keyPrefix: uniquePrefix('authz-reload'), authentication, grpc: false });
  t.teardown(async () => {
    await app.close();
    redis.disconnect();
  });
  const create = async () =>
    (
      await app.inject({
        method: 'PUT',
        url: `/v1/projects/any-project/topics/reloaded-${++created}`,
        headers: { authorization: `Bearer ${token('stranger')}` },
      })
    ).statusCode;
  t.equal(await create(), 403, 'a viewer of every project creates nothing');
  grant('roles/pubsub.editor');
  authentication.reload();
  t.equal(await create(), 200, 'the file reloaded: an editor of every project creates topics');
  writeFileSync(policyFile, '{"*": {"bindings": [{"role": "roles/nope", "members": []}]}}');
  authentication.reload();
  t.equal(await create(), 200, 'a malformed file is not loaded: the previous bindings stay');

  t.throws(
    () => tokenAuthentication(t, { env: { IAM_POLICY_FILE: policyFile } }),
    /IAM_POLICY_FILE .*roles\/nope/,
    'a malformed file at start stops the broker, naming the setting',
  );
  t.throws(
    () => loadConfig({ IAM_POLICY_FILE: policyFile }),
    /IAM_POLICY_FILE grants roles to authenticated principals/,
    'a policy file without authentication is refused',
  );
});

t.test(
  'without a policy file every authenticated principal is an admin; without authentication, everyone may',
  async (t) => {
    const redis = redisTargets()[0].connect();
    const authenticated = await buildApp({
      redis,
      keyPrefix: uniquePrefix('authz-default'),
      authentication: tokenAuthentication(t, { text: `${principal('anyone')} ${token('anyone')}` }),
      grpc: false,
    });
    const open = await buildApp({ redis, keyPrefix: uniquePrefix('authz-open'), grpc: false });
    t.teardown(async () => {
      await authenticated.close();
      await open.close();
      redis.disconnect();
    });
    const permissions = ['resourcemanager.projects.setIamPolicy', 'pubsub.topics.create'];
    for (const [app, headers] of [
      [authenticated, { authorization: `Bearer ${token('anyone')}` }],
      [open, {}],
    ] as const) {
      const answer = await app.inject({
        method: 'POST',
        url: `/v1/projects/${P}:testIamPermissions`,
        headers,
        payload: { permissions },
      });
      t.same(JSON.parse(answer.body), { permissions }, 'holds every permission');
    }
  },
);
