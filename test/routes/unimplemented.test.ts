// Pub/Sub REST methods the broker does not implement yet (googleapis' google/pubsub/v1/pubsub.proto
// and schema.proto, and the IAM mixin of pubsub_v1.yaml) answer 501 UNIMPLEMENTED with a message
// naming the method and its HTTP binding, never 404 NOT_FOUND (which official clients report as
// a missing topic or subscription), whether or not the resource exists, change nothing, and
// are not logged as failures. Snapshot methods are implemented, and answer as Pub/Sub's do
// (only the IAM methods of snapshots are unimplemented).

import t from 'tap';
import { buildApp } from '../../src/app.ts';
import { jsonApi } from '../helpers/app.ts';
import { redisTargets, uniquePrefix } from '../helpers/redis.ts';
import { client, errorBody, noRoute, notFound, subscriptionBody, topicBody } from './_support.ts';

const P = 'un-project';
const TOPIC = `projects/${P}/topics/un-topic`;

/** [HTTP method, path as Pub/Sub's reference writes it, RPC]. */
const METHODS: [string, string, string][] = [
  ['POST', '/v1/projects/{project}/schemas', 'SchemaService.CreateSchema'],
  ['GET', '/v1/projects/{project}/schemas', 'SchemaService.ListSchemas'],
  ['POST', '/v1/projects/{project}/schemas:validate', 'SchemaService.ValidateSchema'],
  ['POST', '/v1/projects/{project}/schemas:validateMessage', 'SchemaService.ValidateMessage'],
  ['GET', '/v1/projects/{project}/schemas/{schema}', 'SchemaService.GetSchema'],
  ['DELETE', '/v1/projects/{project}/schemas/{schema}', 'SchemaService.DeleteSchema'],
  ['GET', '/v1/projects/{project}/schemas/{schema}:listRevisions', 'SchemaService.ListSchemaRevisions'],
  ['POST', '/v1/projects/{project}/schemas/{schema}:commit', 'SchemaService.CommitSchema'],
  ['POST', '/v1/projects/{project}/schemas/{schema}:rollback', 'SchemaService.RollbackSchema'],
  ['DELETE', '/v1/projects/{project}/schemas/{schema}:deleteRevision', 'SchemaService.DeleteSchemaRevision'],
  // The IAM methods of schemas (those of the other resources are served: test/auth/authorization.test.ts).
  ['GET', '/v1/projects/{project}/schemas/{schema}:getIamPolicy', 'IAMPolicy.GetIamPolicy'],
  ['POST', '/v1/projects/{project}/schemas/{schema}:getIamPolicy', 'IAMPolicy.GetIamPolicy'],
  ['POST', '/v1/projects/{project}/schemas/{schema}:setIamPolicy', 'IAMPolicy.SetIamPolicy'],
  ['POST', '/v1/projects/{project}/schemas/{schema}:testIamPermissions', 'IAMPolicy.TestIamPermissions'],
];

const unimplementedMethod = (method: string, path: string, rpc: string) =>
  errorBody(501, 'UNIMPLEMENTED', `The method ${rpc} (${method} ${path}) is not implemented by this broker yet.`);

/** The path with each {name} filled in: an existing topic and subscription, or missing ones. */
const fill = (path: string, existing: boolean) =>
  path
    .replace('{project}', P)
    .replace('{topic}', existing ? 'un-topic' : 'no-topic')
    .replace('{subscription}', existing ? 'un-sub' : 'no-sub')
    .replace('{snapshot}', 'un-snapshot')
    .replace('{schema}', 'un-schema');

t.test('methods the broker does not implement answer 501 UNIMPLEMENTED', async (t) => {
  const redis = redisTargets()[0].connect();
  const prefix = uniquePrefix('unimplemented');
  const logged: { level: number; msg: string }[] = [];
  const app = await buildApp({
    redis,
    keyPrefix: prefix,
    pullWaitMs: 200,
    logger: { level: 'warn', stream: { write: (line: string) => void logged.push(JSON.parse(line)) } },
  });
  t.teardown(async () => {
    await app.close();
    redis.disconnect();
  });
  const { api } = client({ app, redis, prefix, api: jsonApi(app) });
  t.strictSame(await api('PUT', `/v1/projects/${P}/topics/un-topic`, {}), {
    status: 200,
    body: topicBody(P, 'un-topic'),
  });
  t.strictSame(await api('PUT', `/v1/projects/${P}/subscriptions/un-sub`, { topic: TOPIC }), {
    status: 200,
    body: subscriptionBody(P, 'un-sub', TOPIC),
  });
  t.equal(
    (await api('POST', `/v1/projects/${P}/topics/un-topic:publish`, { messages: [{ data: 'eA==' }] })).status,
    200,
  );
  const leased = await api('POST', `/v1/projects/${P}/subscriptions/un-sub:pull`, { maxMessages: 1 });
  t.equal(leased.body.receivedMessages?.length, 1, 'a leased message');

  // Bodies as the official clients would send them, where the method takes one.
  const bodies: Record<string, unknown> = {
    'IAMPolicy.SetIamPolicy': { policy: { bindings: [] } },
    'IAMPolicy.TestIamPermissions': { permissions: ['pubsub.topics.get'] },
  };
  for (const existing of [true, false]) {
    for (const [method, path, rpc] of METHODS) {
      const url = fill(path, existing);
      t.strictSame(
        await api(method, url, method === 'GET' || method === 'DELETE' ? undefined : (bodies[rpc] ?? {})),
        { status: 501, body: unimplementedMethod(method, path, rpc) },
        `${method} ${url}`,
      );
    }
  }

  // Nothing changed: the subscription is as created, with no push endpoint, and
  // the message is still leased.
  t.strictSame(
    await api('GET', `/v1/projects/${P}/subscriptions/un-sub`),
    { status: 200, body: subscriptionBody(P, 'un-sub', TOPIC) },
    'the subscription is unchanged',
  );
  t.strictSame(
    await api('POST', `/v1/projects/${P}/subscriptions/un-sub:pull`, { maxMessages: 1, returnImmediately: true }),
    { status: 200, body: {} },
    'the leased message is still leased',
  );

  t.strictSame(logged, [], 'an unimplemented method is no error of the broker: nothing logged at warn or above');

  // Only Pub/Sub's own bindings: another HTTP method on the same path is still no route.
  for (const [method, url] of [
    ['GET', `/v1/projects/${P}/subscriptions/un-sub:seek`],
    ['POST', `/v1/projects/${P}/snapshots/un-snapshot`],
    ['PUT', `/v1/projects/${P}/schemas/un-schema`],
    ['DELETE', `/v1/projects/${P}/topics/un-topic:testIamPermissions`],
  ]) {
    t.strictSame(await api(method, url), { status: 404, body: noRoute(method, url) }, `${method} ${url}`);
  }

  // Snapshots are implemented: their methods answer as Pub/Sub's do (here: none exists), never 501.
  const snapshot = `/v1/projects/${P}/snapshots/un-snapshot`;
  for (const [method, url, body, expected] of [
    ['GET', `/v1/projects/${P}/snapshots`, undefined, { status: 200, body: {} }],
    ['GET', `/v1/projects/${P}/topics/un-topic/snapshots`, undefined, { status: 200, body: {} }],
    ['GET', snapshot, undefined, { status: 404, body: notFound('un-snapshot') }],
    [
      'PUT',
      snapshot,
      { subscription: `projects/${P}/subscriptions/no-sub` },
      { status: 404, body: notFound('no-sub') },
    ],
    [
      'PATCH',
      snapshot,
      { snapshot: { labels: { a: 'b' } }, updateMask: 'labels' },
      { status: 404, body: notFound('un-snapshot') },
    ],
    ['DELETE', snapshot, undefined, { status: 404, body: notFound('un-snapshot') }],
  ] as const) {
    t.strictSame(await api(method, url, body), expected, `${method} ${url}`);
  }
});
