// The route matrix: every route x {valid, invalid name, unknown resource, duplicate (creates),
// bad body}, each with the whole response body asserted, and after every rejected request a
// read-back showing that nothing changed. Runs against standalone Redis and Redis Cluster.
// Also: unknown routes and custom verbs, health/readiness/OpenAPI, and transport details
// (malformed JSON, non-object bodies, empty bodies with a JSON content type, form encoding).
//
// Detailed per-area cases live in topics.test.ts, subscriptions.test.ts,
// publish-validation.test.ts and pull-ack.test.ts beside this file.

import t from 'tap';
import { parse } from 'yaml';
import { readFile } from 'node:fs/promises';
import { redisTargets } from '../helpers/redis.ts';
import {
  alreadyExists,
  b64,
  badProject,
  badResourceName,
  checkMessageIds,
  failedPrecondition,
  invalid,
  invalidValue,
  MIXED_ORDERING_KEYS,
  noRoute,
  normalisePull,
  notAnObject,
  notFound,
  openClient,
  received,
  subscriptionBody,
  topicBody,
  unimplemented,
  unknownField,
  runRows,
} from './_support.ts';

const P = 'mx-project';
const T = `/v1/projects/${P}/topics`;
const S = `/v1/projects/${P}/subscriptions`;
const TOPIC = `projects/${P}/topics/mx-topic`;

for (const target of redisTargets()) {
  t.test(`route matrix (${target.name})`, async (t) => {
    const { api } = await openClient(t, target, `matrix-${target.name}`);
    const mxTopic = topicBody(P, 'mx-topic');
    const mxSub = subscriptionBody(P, 'mx-sub', TOPIC);

    await t.test('topics: PUT / GET / PATCH / DELETE', (t) =>
      runRows(t, api, [
        { name: 'create', method: 'PUT', url: `${T}/mx-topic`, body: {}, status: 200, expected: mxTopic },
        {
          name: 'create with labels',
          method: 'PUT',
          url: `${T}/mx-labeled`,
          body: { labels: { env: 'prod' } },
          status: 200,
          expected: topicBody(P, 'mx-labeled', { labels: { env: 'prod' } }),
        },
        {
          name: 'create to delete',
          method: 'PUT',
          url: `${T}/mx-doomed`,
          body: {},
          status: 200,
          expected: topicBody(P, 'mx-doomed'),
        },
        {
          name: 'create, invalid name',
          method: 'PUT',
          url: `${T}/ab`,
          body: {},
          status: 400,
          expected: badResourceName('topics', P, 'ab'),
          after: [
            [
              'GET',
              `${T}`,
              200,
              { topics: [topicBody(P, 'mx-doomed'), topicBody(P, 'mx-labeled', { labels: { env: 'prod' } }), mxTopic] },
            ],
          ],
        },
        {
          name: 'create, duplicate',
          method: 'PUT',
          url: `${T}/mx-topic`,
          body: { labels: { changed: 'yes' } },
          status: 409,
          expected: alreadyExists('mx-topic'),
          after: [['GET', `${T}/mx-topic`, 200, mxTopic]],
        },
        {
          name: 'create, unknown body field',
          method: 'PUT',
          url: `${T}/mx-bad`,
          body: { bogus: 1 },
          status: 400,
          expected: unknownField('bogus'),
          after: [['GET', `${T}/mx-bad`, 404, notFound('mx-bad')]],
        },
        {
          name: 'create, wrongly typed field',
          method: 'PUT',
          url: `${T}/mx-bad`,
          body: { labels: 'env=prod' },
          status: 400,
          expected: invalidValue('labels', 'Invalid input: expected record, received string'),
          after: [['GET', `${T}/mx-bad`, 404, notFound('mx-bad')]],
        },
        {
          name: 'create, unsupported field',
          method: 'PUT',
          url: `${T}/mx-bad`,
          body: { kmsKeyName: 'projects/p/locations/l/keyRings/r/cryptoKeys/k' },
          status: 501,
          expected: unimplemented('kmsKeyName'),
          after: [['GET', `${T}/mx-bad`, 404, notFound('mx-bad')]],
        },
        { name: 'get', method: 'GET', url: `${T}/mx-topic`, status: 200, expected: mxTopic },
        {
          name: 'get, invalid name',
          method: 'GET',
          url: `${T}/1abc`,
          status: 400,
          expected: badResourceName('topics', P, '1abc'),
        },
        { name: 'get, unknown', method: 'GET', url: `${T}/mx-none`, status: 404, expected: notFound('mx-none') },
        {
          name: 'patch',
          method: 'PATCH',
          url: `${T}/mx-labeled`,
          body: { topic: { labels: { env: 'dev' } }, updateMask: 'labels' },
          status: 200,
          expected: topicBody(P, 'mx-labeled', { labels: { env: 'dev' } }),
          after: [['GET', `${T}/mx-labeled`, 200, topicBody(P, 'mx-labeled', { labels: { env: 'dev' } })]],
        },
        {
          name: 'patch, invalid name',
          method: 'PATCH',
          url: `${T}/goog-topic`,
          body: { topic: { labels: { env: 'dev' } }, updateMask: 'labels' },
          status: 400,
          expected: badResourceName('topics', P, 'goog-topic'),
        },
        {
          name: 'patch, unknown',
          method: 'PATCH',
          url: `${T}/mx-none`,
          body: { topic: { labels: { env: 'dev' } }, updateMask: 'labels' },
          status: 404,
          expected: notFound('mx-none'),
          after: [['GET', `${T}/mx-none`, 404, notFound('mx-none')]],
        },
        {
          name: 'patch, no updateMask',
          method: 'PATCH',
          url: `${T}/mx-labeled`,
          body: { topic: { labels: { env: 'qa' } } },
          status: 400,
          expected: invalid('The UpdateTopicRequest must have a non-empty update_mask.'),
          after: [['GET', `${T}/mx-labeled`, 200, topicBody(P, 'mx-labeled', { labels: { env: 'dev' } })]],
        },
        {
          name: 'delete',
          method: 'DELETE',
          url: `${T}/mx-doomed`,
          status: 200,
          expected: {},
          after: [['GET', `${T}/mx-doomed`, 404, notFound('mx-doomed')]],
        },
        { name: 'delete again', method: 'DELETE', url: `${T}/mx-doomed`, status: 404, expected: notFound('mx-doomed') },
        {
          name: 'delete, invalid name',
          method: 'DELETE',
          url: `${T}/a`,
          status: 400,
          expected: badResourceName('topics', P, 'a'),
        },
        { name: 'delete, unknown', method: 'DELETE', url: `${T}/mx-none`, status: 404, expected: notFound('mx-none') },
      ]),
    );

    await t.test('topics: list, list subscriptions', (t) =>
      runRows(t, api, [
        {
          name: 'list',
          method: 'GET',
          url: T,
          status: 200,
          expected: { topics: [topicBody(P, 'mx-labeled', { labels: { env: 'dev' } }), mxTopic] },
        },
        {
          name: 'list, invalid project',
          method: 'GET',
          url: '/v1/projects/bad!project/topics',
          status: 400,
          expected: badProject('bad!project'),
        },
        { name: 'list, unknown project', method: 'GET', url: '/v1/projects/nobody/topics', status: 200, expected: {} },
        {
          name: 'list, bad pageSize',
          method: 'GET',
          url: `${T}?pageSize=abc`,
          status: 400,
          expected: invalid('Invalid pageSize: "abc" is not a non-negative integer.'),
        },
        {
          name: 'list, bad pageToken',
          method: 'GET',
          url: `${T}?pageToken=garbage`,
          status: 400,
          expected: invalid('Invalid pageToken.'),
        },
        {
          name: 'list subscriptions (none yet)',
          method: 'GET',
          url: `${T}/mx-topic/subscriptions`,
          status: 200,
          expected: {},
        },
        {
          name: 'list subscriptions, invalid name',
          method: 'GET',
          url: `${T}/-abc/subscriptions`,
          status: 400,
          expected: badResourceName('topics', P, '-abc'),
        },
        {
          name: 'list subscriptions, unknown',
          method: 'GET',
          url: `${T}/mx-none/subscriptions`,
          status: 404,
          expected: notFound('mx-none'),
        },
        {
          name: 'list subscriptions, bad pageSize',
          method: 'GET',
          url: `${T}/mx-topic/subscriptions?pageSize=-1`,
          status: 400,
          expected: invalid('Invalid pageSize: "-1" is not a non-negative integer.'),
        },
      ]),
    );

    await t.test('subscriptions: PUT / GET / PATCH / DELETE / list', (t) =>
      runRows(t, api, [
        { name: 'create', method: 'PUT', url: `${S}/mx-sub`, body: { topic: TOPIC }, status: 200, expected: mxSub },
        {
          name: 'create to delete',
          method: 'PUT',
          url: `${S}/mx-doomed`,
          body: { topic: TOPIC },
          status: 200,
          expected: subscriptionBody(P, 'mx-doomed', TOPIC),
        },
        {
          name: 'create, invalid name',
          method: 'PUT',
          url: `${S}/ab`,
          body: { topic: TOPIC },
          status: 400,
          expected: badResourceName('subscriptions', P, 'ab'),
        },
        {
          name: 'create, unknown topic',
          method: 'PUT',
          url: `${S}/mx-sub2`,
          body: { topic: `projects/${P}/topics/mx-none` },
          status: 404,
          expected: notFound('mx-none'),
          after: [['GET', `${S}/mx-sub2`, 404, notFound('mx-sub2')]],
        },
        {
          name: 'create, duplicate',
          method: 'PUT',
          url: `${S}/mx-sub`,
          body: { topic: TOPIC, ackDeadlineSeconds: 30 },
          status: 409,
          expected: alreadyExists('mx-sub'),
          after: [['GET', `${S}/mx-sub`, 200, mxSub]],
        },
        {
          name: 'create, unknown body field',
          method: 'PUT',
          url: `${S}/mx-sub2`,
          body: { topic: TOPIC, bogus: true },
          status: 400,
          expected: unknownField('bogus'),
          after: [['GET', `${S}/mx-sub2`, 404, notFound('mx-sub2')]],
        },
        {
          name: 'create, no topic',
          method: 'PUT',
          url: `${S}/mx-sub2`,
          body: {},
          status: 400,
          expected: invalid('The subscription needs a topic (field "topic").'),
          after: [['GET', `${S}/mx-sub2`, 404, notFound('mx-sub2')]],
        },
        {
          name: 'create, unsupported bigqueryConfig',
          method: 'PUT',
          url: `${S}/mx-sub2`,
          body: { topic: TOPIC, bigqueryConfig: { table: 'p.d.t' } },
          status: 501,
          expected: unimplemented('bigqueryConfig'),
          after: [['GET', `${S}/mx-sub2`, 404, notFound('mx-sub2')]],
        },
        { name: 'get', method: 'GET', url: `${S}/mx-sub`, status: 200, expected: mxSub },
        {
          name: 'get, invalid name',
          method: 'GET',
          url: `${S}/9abc`,
          status: 400,
          expected: badResourceName('subscriptions', P, '9abc'),
        },
        { name: 'get, unknown', method: 'GET', url: `${S}/mx-none`, status: 404, expected: notFound('mx-none') },
        {
          name: 'patch',
          method: 'PATCH',
          url: `${S}/mx-doomed`,
          body: { subscription: { ackDeadlineSeconds: 42 }, updateMask: 'ackDeadlineSeconds' },
          status: 200,
          expected: subscriptionBody(P, 'mx-doomed', TOPIC, { ackDeadlineSeconds: 42 }),
        },
        {
          name: 'patch, invalid name',
          method: 'PATCH',
          url: `${S}/googsub`,
          body: { subscription: { ackDeadlineSeconds: 42 }, updateMask: 'ackDeadlineSeconds' },
          status: 400,
          expected: badResourceName('subscriptions', P, 'googsub'),
        },
        {
          name: 'patch, unknown',
          method: 'PATCH',
          url: `${S}/mx-none`,
          body: { subscription: { ackDeadlineSeconds: 42 }, updateMask: 'ackDeadlineSeconds' },
          status: 404,
          expected: notFound('mx-none'),
          after: [['GET', `${S}/mx-none`, 404, notFound('mx-none')]],
        },
        {
          name: 'patch, immutable path',
          method: 'PATCH',
          url: `${S}/mx-sub`,
          body: { subscription: { enableMessageOrdering: true }, updateMask: 'enableMessageOrdering' },
          status: 400,
          expected: invalid(
            "Invalid update_mask provided in the UpdateSubscriptionRequest: the 'enableMessageOrdering' field in the Subscription is not mutable.",
          ),
          after: [['GET', `${S}/mx-sub`, 200, mxSub]],
        },
        {
          name: 'patch, out-of-range value',
          method: 'PATCH',
          url: `${S}/mx-sub`,
          body: { subscription: { ackDeadlineSeconds: 601 }, updateMask: 'ackDeadlineSeconds' },
          status: 400,
          expected: invalid('Invalid ackDeadlineSeconds: 601. It must be between 10 and 600 seconds.'),
          after: [['GET', `${S}/mx-sub`, 200, mxSub]],
        },
        {
          name: 'list',
          method: 'GET',
          url: S,
          status: 200,
          expected: { subscriptions: [subscriptionBody(P, 'mx-doomed', TOPIC, { ackDeadlineSeconds: 42 }), mxSub] },
        },
        {
          name: 'list topic subscriptions',
          method: 'GET',
          url: `${T}/mx-topic/subscriptions`,
          status: 200,
          expected: { subscriptions: [`projects/${P}/subscriptions/mx-doomed`, `projects/${P}/subscriptions/mx-sub`] },
        },
        {
          name: 'list, invalid project',
          method: 'GET',
          url: '/v1/projects/a%20b/subscriptions',
          status: 400,
          expected: badProject('a b'),
        },
        {
          name: 'list, unknown project',
          method: 'GET',
          url: '/v1/projects/nobody/subscriptions',
          status: 200,
          expected: {},
        },
        {
          name: 'list, bad pageSize',
          method: 'GET',
          url: `${S}?pageSize=1e3`,
          status: 400,
          expected: invalid('Invalid pageSize: "1e3" is not a non-negative integer.'),
        },
        {
          name: 'list, bad pageToken',
          method: 'GET',
          url: `${S}?pageToken=%21%21`,
          status: 400,
          expected: invalid('Invalid pageToken.'),
        },
        {
          name: 'delete',
          method: 'DELETE',
          url: `${S}/mx-doomed`,
          status: 200,
          expected: {},
          after: [
            ['GET', `${S}/mx-doomed`, 404, notFound('mx-doomed')],
            ['GET', `${T}/mx-topic/subscriptions`, 200, { subscriptions: [`projects/${P}/subscriptions/mx-sub`] }],
          ],
        },
        { name: 'delete again', method: 'DELETE', url: `${S}/mx-doomed`, status: 404, expected: notFound('mx-doomed') },
        {
          name: 'delete, invalid name',
          method: 'DELETE',
          url: `${S}/x`,
          status: 400,
          expected: badResourceName('subscriptions', P, 'x'),
        },
        { name: 'delete, unknown', method: 'DELETE', url: `${S}/mx-none`, status: 404, expected: notFound('mx-none') },
      ]),
    );

    await t.test('data path: publish / pull / modifyAckDeadline / acknowledge', async (t) => {
      // Publish.
      const published = await api('POST', `${T}/mx-topic:publish`, {
        messages: [{ data: b64('hello'), attributes: { k: 'v' } }],
      });
      const [messageId] = checkMessageIds(published, 1);
      t.pass(`publish -> 200 {"messageIds":["${messageId}"]}`);
      await runRows(t, api, [
        {
          name: 'publish, invalid name',
          method: 'POST',
          url: `${T}/ab:publish`,
          body: { messages: [{ data: b64('x') }] },
          status: 400,
          expected: badResourceName('topics', P, 'ab'),
        },
        {
          name: 'publish, unknown topic',
          method: 'POST',
          url: `${T}/mx-none:publish`,
          body: { messages: [{ data: b64('x') }] },
          status: 404,
          expected: notFound('mx-none'),
        },
        {
          name: 'publish, no messages',
          method: 'POST',
          url: `${T}/mx-topic:publish`,
          body: { messages: [] },
          status: 400,
          expected: invalid('The publish request must contain at least one message.'),
        },
        {
          name: 'publish, mixed ordering keys',
          method: 'POST',
          url: `${T}/mx-topic:publish`,
          body: {
            messages: [
              { data: b64('a'), orderingKey: 'k1' },
              { data: b64('b'), orderingKey: 'k2' },
            ],
          },
          status: 400,
          expected: failedPrecondition(MIXED_ORDERING_KEYS),
        },
      ]);

      // Pull: exactly the one valid message arrives (rejected publishes stored nothing).
      const pulled = await api('POST', `${S}/mx-sub:pull`, { maxMessages: 10, returnImmediately: true });
      const { body, ackIds, messageIds } = normalisePull(pulled.body);
      t.strictSame(
        { status: pulled.status, body },
        { status: 200, body: { receivedMessages: [received({ data: b64('hello'), attributes: { k: 'v' } })] } },
        'pull -> 200, the one published message',
      );
      t.strictSame(messageIds, [messageId], 'pulled messageId is the published one');
      const [ackId] = ackIds;

      await runRows(t, api, [
        {
          name: 'pull again (leased)',
          method: 'POST',
          url: `${S}/mx-sub:pull`,
          body: { maxMessages: 10, returnImmediately: true },
          status: 200,
          expected: {},
        },
        {
          name: 'pull, invalid name',
          method: 'POST',
          url: `${S}/ab:pull`,
          body: { maxMessages: 1 },
          status: 400,
          expected: badResourceName('subscriptions', P, 'ab'),
        },
        {
          name: 'pull, unknown',
          method: 'POST',
          url: `${S}/mx-none:pull`,
          body: { maxMessages: 1, returnImmediately: true },
          status: 404,
          expected: notFound('mx-none'),
        },
        {
          name: 'pull, bad body',
          method: 'POST',
          url: `${S}/mx-sub:pull`,
          body: { maxMessages: 0 },
          status: 400,
          expected: invalidValue('maxMessages', 'maxMessages must be a positive integer'),
        },
        {
          name: 'modack',
          method: 'POST',
          url: `${S}/mx-sub:modifyAckDeadline`,
          body: { ackIds: [ackId], ackDeadlineSeconds: 120 },
          status: 200,
          expected: {},
        },
        {
          name: 'modack, invalid name',
          method: 'POST',
          url: `${S}/ab:modifyAckDeadline`,
          body: { ackIds: [ackId], ackDeadlineSeconds: 0 },
          status: 400,
          expected: badResourceName('subscriptions', P, 'ab'),
        },
        {
          name: 'modack, unknown',
          method: 'POST',
          url: `${S}/mx-none:modifyAckDeadline`,
          body: { ackIds: [ackId], ackDeadlineSeconds: 0 },
          status: 404,
          expected: notFound('mx-none'),
        },
        {
          name: 'modack, bad body (nack with 601 s)',
          method: 'POST',
          url: `${S}/mx-sub:modifyAckDeadline`,
          body: { ackIds: [ackId], ackDeadlineSeconds: 601 },
          status: 400,
          expected: invalidValue('ackDeadlineSeconds', 'ackDeadlineSeconds must be between 0 and 600'),
        },
        {
          name: 'ack, invalid name',
          method: 'POST',
          url: `${S}/ab:acknowledge`,
          body: { ackIds: [ackId] },
          status: 400,
          expected: badResourceName('subscriptions', P, 'ab'),
        },
        {
          name: 'ack, unknown',
          method: 'POST',
          url: `${S}/mx-none:acknowledge`,
          body: { ackIds: [ackId] },
          status: 404,
          expected: notFound('mx-none'),
        },
        {
          name: 'ack, bad body',
          method: 'POST',
          url: `${S}/mx-sub:acknowledge`,
          body: { ackIds: [] },
          status: 400,
          expected: invalidValue('ackIds', 'at least one ack ID is required'),
        },
        {
          name: 'ack',
          method: 'POST',
          url: `${S}/mx-sub:acknowledge`,
          body: { ackIds: [ackId] },
          status: 200,
          expected: {},
        },
      ]);
      // The rejected nack (601 s) did not release the lease, and after the ack the message is gone.
      const after = await api('POST', `${S}/mx-sub:pull`, { maxMessages: 10, returnImmediately: true });
      t.strictSame(after, { status: 200, body: {} }, 'nothing left to pull after the ack');
    });

    await t.test('operations routes', async (t) => {
      t.strictSame(await api('GET', '/healthz'), { status: 200, body: { status: 'ok' } }, 'GET /healthz');
      t.strictSame(await api('GET', '/readyz'), { status: 200, body: { status: 'ready', redis: 'ok' } }, 'GET /readyz');
    });
  });
}

t.test('unknown routes and custom verbs -> 404 NOT_FOUND envelope', async (t) => {
  const { api } = await openClient(t, redisTargets()[0], 'matrix-routes');
  await api('PUT', `${T}/mx-topic`, {});
  await api('PUT', `${S}/mx-sub`, { topic: TOPIC });
  const cases: [string, string, unknown?][] = [
    ['GET', '/'],
    ['GET', '/v1'],
    ['GET', '/v1/projects'],
    ['GET', `/v1/projects/${P}`],
    ['GET', '/v2/projects/p/topics'],
    ['POST', `${T}/mx-topic:frobnicate`, {}],
    ['POST', `${T}/mx-topic:pull`, { maxMessages: 1 }],
    ['GET', `${T}/mx-topic:publish`],
    ['PUT', `${T}/mx-topic:publish`, {}],
    ['POST', `${S}/mx-sub:publish`, { messages: [{ data: 'eA==' }] }],
    ['POST', `${S}/mx-sub:frobnicate`, {}],
    ['PUT', `${S}/mx-sub:seek`, {}],
    ['GET', `${S}/mx-sub:setIamPolicy`],
    ['POST', `/v1/projects/${P}/snapshots`, {}],
    ['GET', `/v1/projects/${P}/schemas:validate`],
    ['POST', `${T}/mx-topic`, {}],
    ['POST', T, {}],
    ['DELETE', T],
    ['PUT', S, {}],
    ['GET', `${T}/mx-topic/subscriptions/extra`],
    ['GET', '/healthz/extra'],
  ];
  for (const [method, url, body] of cases) {
    t.strictSame(await api(method, url, body), { status: 404, body: noRoute(method, url) }, `${method} ${url}`);
  }
  // The query string is not echoed.
  t.strictSame(
    await api('GET', '/v1/nowhere?secret=1'),
    { status: 404, body: noRoute('GET', '/v1/nowhere') },
    'query string not echoed',
  );
});

t.test('URLs the router itself refuses still answer the error envelope', async (t) => {
  const { api } = await openClient(t, redisTargets()[0], 'matrix-badurl');
  const cases: [string, string][] = [
    ['malformed percent-encoding in a topic ID', `${T}/ab%ZZcd`],
    ['truncated percent-encoding in a subscription ID', `${S}/abc%E0%A4%A`],
    ['an ID of 2000 characters', `${T}/${'a'.repeat(2000)}`],
    ['a project of 2000 characters', `/v1/projects/${'p'.repeat(2000)}/topics`],
  ];
  for (const [why, url] of cases) {
    const reply = await api('GET', url);
    // The message is free; the status, the canonical code and the envelope are not.
    t.strictSame(
      {
        status: reply.status,
        code: reply.body?.error?.code,
        status_: reply.body?.error?.status,
        invariant: reply.invariant,
      },
      { status: 400, code: 400, status_: 'INVALID_ARGUMENT', invariant: undefined },
      `${why}: 400 INVALID_ARGUMENT envelope`,
    );
  }
});

t.test('GET /openapi.yaml serves the document as text/yaml', async (t) => {
  const { broker } = await openClient(t, redisTargets()[0], 'matrix-openapi');
  const response = await broker.app.inject({ method: 'GET', url: '/openapi.yaml' });
  t.equal(response.statusCode, 200);
  t.match(response.headers['content-type'], /^text\/yaml/);
  t.strictSame(parse(response.body), parse(await readFile(new URL('../../openapi.yaml', import.meta.url), 'utf8')));
});

t.test('transport: JSON parsing, content types, empty bodies', async (t) => {
  const { api, raw } = await openClient(t, redisTargets()[0], 'matrix-transport');
  const JSON_CT = { 'content-type': 'application/json' };
  t.strictSame(await api('PUT', `${T}/tr-topic`, {}), { status: 200, body: topicBody(P, 'tr-topic') }, 'fixture topic');
  t.strictSame(
    await api('PUT', `${S}/tr-sub`, { topic: `projects/${P}/topics/tr-topic` }),
    { status: 200, body: subscriptionBody(P, 'tr-sub', `projects/${P}/topics/tr-topic`) },
    'fixture subscription',
  );
  const MALFORMED = invalid('Invalid JSON payload received. Body is not valid JSON.');

  await t.test('malformed JSON -> 400 INVALID_ARGUMENT, nothing created', async (t) => {
    for (const payload of ['{bad', '{"labels":', '{"a":1}}', "{'a':1}", 'nul']) {
      t.strictSame(
        await raw({ method: 'PUT', url: `${T}/tr-bad`, payload, headers: JSON_CT }),
        { status: 400, body: MALFORMED },
        `PUT topic ${payload}`,
      );
    }
    t.strictSame(await api('GET', `${T}/tr-bad`), { status: 404, body: notFound('tr-bad') }, 'topic not created');
    t.strictSame(
      await raw({
        method: 'POST',
        url: `${T}/tr-topic:publish`,
        payload: '{"messages":[{"data":"eA=="}',
        headers: JSON_CT,
      }),
      { status: 400, body: MALFORMED },
      'publish, truncated JSON',
    );
    t.strictSame(
      await raw({ method: 'POST', url: `${S}/tr-sub:pull`, payload: '{"maxMessages":', headers: JSON_CT }),
      { status: 400, body: MALFORMED },
      'pull, truncated JSON',
    );
    t.strictSame(
      await raw({ method: 'PUT', url: `${T}/tr-bad`, payload: '{"__proto__":{"x":1}}', headers: JSON_CT }),
      { status: 400, body: MALFORMED },
      '__proto__ key refused',
    );
    t.strictSame(await api('GET', `${T}/tr-bad`), { status: 404, body: notFound('tr-bad') }, 'still not created');
    t.strictSame(
      await api('POST', `${S}/tr-sub:pull`, { maxMessages: 10, returnImmediately: true }),
      { status: 200, body: {} },
      'nothing was published',
    );
  });

  await t.test('malformed JSON sent without a JSON content type', async (t) => {
    // curl -d sends application/x-www-form-urlencoded; the body is still read as JSON.
    const reply = await raw({
      method: 'POST',
      url: `${T}/tr-topic:publish`,
      payload: '{"messages":',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    t.equal(reply.status, 400);
    t.equal(reply.body.error.status, 'INVALID_ARGUMENT');
    // The message should not claim a content type the client did not send.
    t.strictSame(
      reply.body,
      invalid('Invalid JSON payload received. Body is not valid JSON.'),
      'message names the real problem',
    );
  });

  await t.test('JSON that is not an object -> 400 INVALID_ARGUMENT', async (t) => {
    const cases: [string, string, string][] = [
      ['PUT', `${T}/tr-bad`, 'topic'],
      ['PATCH', `${T}/tr-topic`, 'request'],
      ['POST', `${T}/tr-topic:publish`, 'publish request'],
      ['PUT', `${S}/tr-bad`, 'subscription'],
      ['PATCH', `${S}/tr-sub`, 'request'],
      ['POST', `${S}/tr-sub:pull`, 'pull request'],
      ['POST', `${S}/tr-sub:acknowledge`, 'acknowledge request'],
      ['POST', `${S}/tr-sub:modifyAckDeadline`, 'modifyAckDeadline request'],
    ];
    for (const [method, url, what] of cases) {
      for (const payload of ['[]', '[{"maxMessages":1}]', '"text"', '42', 'true']) {
        t.strictSame(
          await raw({ method, url, payload, headers: JSON_CT }),
          { status: 400, body: notAnObject(what) },
          `${method} ${url} ${payload}`,
        );
      }
    }
    t.strictSame(await api('GET', `${T}/tr-bad`), { status: 404, body: notFound('tr-bad') }, 'topic not created');
    t.strictSame(
      await api('GET', `${S}/tr-bad`),
      { status: 404, body: notFound('tr-bad') },
      'subscription not created',
    );
  });

  await t.test('a JSON null body is not an object either', async (t) => {
    // Own project, so that a wrongly created topic cannot disturb the listings below.
    const url = '/v1/projects/mx-null/topics/tr-null';
    t.strictSame(
      await raw({ method: 'PUT', url, payload: 'null', headers: JSON_CT }),
      { status: 400, body: notAnObject('topic') },
      'PUT topic null',
    );
    t.strictSame(await api('GET', url), { status: 404, body: notFound('tr-null') }, 'topic not created');
    t.strictSame(
      await raw({
        method: 'PUT',
        url: `/v1/projects/mx-null/subscriptions/tr-null`,
        payload: 'null',
        headers: JSON_CT,
      }),
      { status: 400, body: notAnObject('subscription') },
      'PUT subscription null',
    );
    t.strictSame(
      await raw({ method: 'POST', url: `${S}/tr-sub:pull`, payload: 'null', headers: JSON_CT }),
      { status: 400, body: notAnObject('pull request') },
      'POST pull null',
    );
  });

  await t.test('content-type application/json with an empty body (official clients on GET/DELETE)', async (t) => {
    const empty = (method: string, url: string) => raw({ method, url, payload: '', headers: JSON_CT });
    const noPayload = (method: string, url: string) => raw({ method, url, headers: JSON_CT });
    t.strictSame(
      await empty('GET', `${T}/tr-topic`),
      { status: 200, body: topicBody(P, 'tr-topic') },
      'GET topic, empty body',
    );
    t.strictSame(
      await noPayload('GET', `${T}/tr-topic`),
      { status: 200, body: topicBody(P, 'tr-topic') },
      'GET topic, no payload',
    );
    t.strictSame(await empty('GET', T), { status: 200, body: { topics: [topicBody(P, 'tr-topic')] } }, 'GET topics');
    t.strictSame(
      await empty('GET', `${T}/tr-topic/subscriptions`),
      { status: 200, body: { subscriptions: [`projects/${P}/subscriptions/tr-sub`] } },
      'GET topic subscriptions',
    );
    t.strictSame(
      await empty('GET', `${S}/tr-sub`),
      { status: 200, body: subscriptionBody(P, 'tr-sub', `projects/${P}/topics/tr-topic`) },
      'GET subscription',
    );
    t.strictSame(await empty('GET', `/healthz`), { status: 200, body: { status: 'ok' } }, 'GET /healthz');
    t.strictSame(
      await empty('PUT', `${T}/tr-empty`),
      { status: 200, body: topicBody(P, 'tr-empty') },
      'PUT topic, empty body = {}',
    );
    t.strictSame(await empty('DELETE', `${T}/tr-empty`), { status: 200, body: {} }, 'DELETE topic, empty body');
    t.strictSame(
      await noPayload('DELETE', `${T}/tr-empty`),
      { status: 404, body: notFound('tr-empty') },
      'DELETE again',
    );
    t.strictSame(
      await empty('PUT', `${S}/tr-empty`),
      { status: 400, body: invalid('The subscription needs a topic (field "topic").') },
      'PUT subscription, empty body',
    );
    t.strictSame(
      await raw({ method: 'PUT', url: `${S}/tr-empty`, payload: '   \n', headers: JSON_CT }),
      { status: 400, body: invalid('The subscription needs a topic (field "topic").') },
      'whitespace-only body',
    );
    await api('PUT', `${S}/tr-empty`, { topic: `projects/${P}/topics/tr-topic` });
    t.strictSame(await empty('DELETE', `${S}/tr-empty`), { status: 200, body: {} }, 'DELETE subscription, empty body');
    t.strictSame(
      await empty('POST', `${S}/tr-sub:pull`),
      { status: 400, body: invalidValue('maxMessages', 'Invalid input: expected number, received undefined') },
      'POST pull, empty body = {}',
    );
  });

  await t.test('POST without a JSON content type still parses JSON', async (t) => {
    const publishBody = JSON.stringify({ messages: [{ data: b64('form') }] });
    for (const headers of [
      {} as Record<string, string>,
      { 'content-type': 'application/x-www-form-urlencoded' },
      { 'content-type': 'text/plain' },
      { 'content-type': 'application/json; charset=utf-8' },
    ]) {
      const reply = await raw({ method: 'POST', url: `${T}/tr-topic:publish`, payload: publishBody, headers });
      checkMessageIds(reply, 1);
      t.pass(`publish with headers ${JSON.stringify(headers)} -> 200`);
    }
    const pulled = await raw({
      method: 'POST',
      url: `${S}/tr-sub:pull`,
      payload: '{"maxMessages":10,"returnImmediately":true}',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    const { body, ackIds } = normalisePull(pulled.body);
    t.strictSame(
      { status: pulled.status, body },
      { status: 200, body: { receivedMessages: Array(4).fill(received({ data: b64('form') })) } },
      'pull (form-encoded) gets all four',
    );
    t.strictSame(
      await raw({ method: 'POST', url: `${S}/tr-sub:acknowledge`, payload: JSON.stringify({ ackIds }) }),
      { status: 200, body: {} },
      'acknowledge without content type',
    );
    t.strictSame(
      await raw({
        method: 'PUT',
        url: `${T}/tr-form`,
        payload: '{"labels":{"via":"curl"}}',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
      }),
      { status: 200, body: topicBody(P, 'tr-form', { labels: { via: 'curl' } }) },
      'PUT topic with form content type',
    );
  });

  await t.test('non-publish bodies over 1 MiB -> 400 INVALID_ARGUMENT', async (t) => {
    const ackIds = Array.from({ length: 40_000 }, (_, i) => `ack-${i}-${'x'.repeat(20)}`);
    t.strictSame(
      await api('POST', `${S}/tr-sub:acknowledge`, { ackIds }),
      { status: 400, body: invalid('Request payload size exceeds the limit.') },
      'acknowledge with a 1.2 MB body',
    );
  });

  await t.test('snake_case field names are accepted', async (t) => {
    t.strictSame(
      await api('PUT', `${S}/tr-snake`, {
        topic: `projects/${P}/topics/tr-topic`,
        ack_deadline_seconds: 25,
        enable_message_ordering: true,
        retain_acked_messages: true,
      }),
      {
        status: 200,
        body: subscriptionBody(P, 'tr-snake', `projects/${P}/topics/tr-topic`, {
          ackDeadlineSeconds: 25,
          retainAckedMessages: true,
          enableMessageOrdering: true,
        }),
      },
      'create with snake_case fields',
    );
    t.strictSame(
      await api('POST', `${S}/tr-snake:pull`, { max_messages: 1, return_immediately: true }),
      { status: 200, body: {} },
      'pull with snake_case fields',
    );
  });

  t.strictSame(await api('GET', '/healthz'), { status: 200, body: { status: 'ok' } }, 'still healthy');
});

t.test('the process is still fine afterwards', async (t) => {
  for (const target of redisTargets()) {
    const { api } = await openClient(t, target, `matrix-final-${target.name}`);
    t.strictSame(await api('GET', '/healthz'), { status: 200, body: { status: 'ok' } }, `${target.name}: GET /healthz`);
    t.strictSame(
      await api('GET', '/readyz'),
      { status: 200, body: { status: 'ready', redis: 'ok' } },
      `${target.name}: GET /readyz`,
    );
  }
});
