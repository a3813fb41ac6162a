// Topic routes in detail: resource-name rules, stored fields, PATCH with update masks,
// pagination of ListTopics and ListTopicSubscriptions. Every response is compared whole, and
// every rejected request is followed by a read-back showing that nothing changed.
// Control plane only, so it runs on standalone Redis (the matrix covers both targets).

import t from 'tap';
import { redisTargets } from '../helpers/redis.ts';
import {
  badResourceName,
  invalid,
  invalidValue,
  notFound,
  openClient,
  runRows,
  subscriptionBody,
  topicBody,
  unimplemented,
  unknownField,
  type Client,
} from './_support.ts';

const target = redisTargets()[0];
const P = 'tp-project';
const T = `/v1/projects/${P}/topics`;

const NAME_RULES_OK: [string, string][] = [
  // [URL segment, decoded ID]
  ['abc', 'abc'],
  [`a${'b'.repeat(254)}`, `a${'b'.repeat(254)}`],
  ['A12', 'A12'],
  ['a.b~c+d%25e_f-g', 'a.b~c+d%e_f-g'],
  [`x${'%25'.repeat(254)}`, `x${'%'.repeat(254)}`],
  ['a+b', 'a+b'],
  ['Goog-upper', 'Goog-upper'],
  ['go0g', 'go0g'],
  ['xgoog', 'xgoog'],
  ['z--', 'z--'],
];

const NAME_RULES_BAD: [string, string, string][] = [
  // [why, URL segment, decoded ID]
  ['2 characters', 'ab', 'ab'],
  ['1 character', 'a', 'a'],
  ['256 characters', `a${'b'.repeat(255)}`, `a${'b'.repeat(255)}`],
  ['starts with a digit', '1abc', '1abc'],
  ['starts with a dash', '-abc', '-abc'],
  ['starts with an underscore', '_abc', '_abc'],
  ['starts with a period', '.abc', '.abc'],
  ['starts with a tilde', '~abc', '~abc'],
  ['starts with a plus', '+abc', '+abc'],
  ['starts with a percent sign', '%25abc', '%abc'],
  ['starts with goog', 'googtopic', 'googtopic'],
  ['is goog plus one', 'goog1', 'goog1'],
  ['holds a space', 'ab%20c', 'ab c'],
  ['holds a dollar', 'ab%24c', 'ab$c'],
  ['holds an asterisk', 'ab*c', 'ab*c'],
  ['holds an at sign', 'ab@c', 'ab@c'],
  ['holds a non-ASCII letter', 'ab%C3%A4', 'abä'],
  ['holds a comma', 'ab,c', 'ab,c'],
];

t.test('topic names', async (t) => {
  const { api } = await openClient(t, target, 'topics-names');
  for (const [segment, id] of NAME_RULES_OK) {
    const label = id.length > 40 ? `${id.slice(0, 12)}... (${id.length} chars)` : id;
    const expected = topicBody(P, id);
    t.strictSame(await api('PUT', `${T}/${segment}`, {}), { status: 200, body: expected }, `create ${label}`);
    t.strictSame(await api('GET', `${T}/${segment}`), { status: 200, body: expected }, `get ${label}`);
  }
  const listed = await api('GET', `${T}?pageSize=1000`);
  t.strictSame(
    listed,
    {
      status: 200,
      body: {
        topics: NAME_RULES_OK.map(([, id]) => `projects/${P}/topics/${id}`)
          .sort()
          .map((name) => ({ name, state: 'ACTIVE' })),
      },
    },
    'all valid names are listed, sorted',
  );
  for (const [why, segment, id] of NAME_RULES_BAD) {
    t.strictSame(
      await api('PUT', `${T}/${segment}`, {}),
      { status: 400, body: badResourceName('topics', P, id) },
      `create: ${why}`,
    );
    t.strictSame(
      await api('GET', `${T}/${segment}`),
      { status: 400, body: badResourceName('topics', P, id) },
      `get: ${why}`,
    );
    t.strictSame(
      await api('POST', `${T}/${segment}:publish`, { messages: [{ data: 'eA==' }] }),
      { status: 400, body: badResourceName('topics', P, id) },
      `publish: ${why}`,
    );
  }
  t.strictSame(await api('GET', `${T}?pageSize=1000`), listed, 'rejected names created nothing');
  t.strictSame(await api('DELETE', `${T}/a.b~c+d%25e_f-g`), { status: 200, body: {} }, 'delete the punctuated name');
  t.strictSame(
    await api('GET', `${T}/a.b~c+d%25e_f-g`),
    { status: 404, body: notFound('a.b~c+d%e_f-g') },
    'gone (404 names the decoded ID)',
  );
});

t.test('topic fields on create', async (t) => {
  const { api } = await openClient(t, target, 'topics-fields');
  const full = {
    labels: { env: 'prod', team_a: 'x-1', empty: '' },
    messageRetentionDuration: '86400s',
    messageStoragePolicy: { allowedPersistenceRegions: ['europe-west1', 'us-east1'], enforceInTransit: true },
  };
  await runRows(t, api, [
    {
      name: 'all stored fields',
      method: 'PUT',
      url: `${T}/full`,
      body: full,
      status: 200,
      expected: topicBody(P, 'full', full),
    },
    { name: 'read back', method: 'GET', url: `${T}/full`, status: 200, expected: topicBody(P, 'full', full) },
    {
      name: 'snake_case fields',
      method: 'PUT',
      url: `${T}/snake`,
      body: {
        message_retention_duration: '600s',
        message_storage_policy: { allowed_persistence_regions: ['asia-east1'] },
      },
      status: 200,
      expected: topicBody(P, 'snake', {
        messageRetentionDuration: '600s',
        messageStoragePolicy: { allowedPersistenceRegions: ['asia-east1'] },
      }),
    },
    {
      name: 'maximum retention',
      method: 'PUT',
      url: `${T}/ret-max`,
      body: { messageRetentionDuration: '2678400s' },
      status: 200,
      expected: topicBody(P, 'ret-max', { messageRetentionDuration: '2678400s' }),
    },
    {
      name: 'fractional retention is normalised',
      method: 'PUT',
      url: `${T}/ret-frac`,
      body: { messageRetentionDuration: '3600.500s' },
      status: 200,
      expected: topicBody(P, 'ret-frac', { messageRetentionDuration: '3600.5s' }),
    },
    {
      name: 'empty labels are omitted',
      method: 'PUT',
      url: `${T}/no-labels`,
      body: { labels: {} },
      status: 200,
      expected: topicBody(P, 'no-labels'),
    },
    {
      name: 'name in the body equal to the URL',
      method: 'PUT',
      url: `${T}/named`,
      body: { name: `projects/${P}/topics/named` },
      status: 200,
      expected: topicBody(P, 'named'),
    },
    {
      name: 'output-only fields are tolerated',
      method: 'PUT',
      url: `${T}/echo`,
      body: { name: `projects/${P}/topics/echo`, state: 'ACTIVE', satisfiesPzs: false },
      status: 200,
      expected: topicBody(P, 'echo'),
    },
    {
      name: 'empty kmsKeyName is no kmsKeyName',
      method: 'PUT',
      url: `${T}/kms-empty`,
      body: { kmsKeyName: '' },
      status: 200,
      expected: topicBody(P, 'kms-empty'),
    },
  ]);

  const rejected: [string, unknown, number, unknown][] = [
    [
      'retention 599s',
      { messageRetentionDuration: '599s' },
      400,
      invalid('Invalid messageRetentionDuration: 599s is outside the allowed range 600s to 2678400s.'),
    ],
    [
      'retention 2678401s',
      { messageRetentionDuration: '2678401s' },
      400,
      invalid('Invalid messageRetentionDuration: 2678401s is outside the allowed range 600s to 2678400s.'),
    ],
    [
      'retention "10m"',
      { messageRetentionDuration: '10m' },
      400,
      invalidValue('messageRetentionDuration', 'expected a duration such as "600s"'),
    ],
    [
      'retention "-600s"',
      { messageRetentionDuration: '-600s' },
      400,
      invalidValue('messageRetentionDuration', 'expected a duration such as "600s"'),
    ],
    [
      'retention as a number',
      { messageRetentionDuration: 600 },
      400,
      invalidValue('messageRetentionDuration', 'Invalid input: expected string, received number'),
    ],
    [
      'empty allowedPersistenceRegions',
      { messageStoragePolicy: { allowedPersistenceRegions: [] } },
      400,
      invalid('Invalid messageStoragePolicy: allowedPersistenceRegions must list at least one region.'),
    ],
    [
      'storage policy without regions',
      { messageStoragePolicy: { enforceInTransit: true } },
      400,
      invalid('Invalid messageStoragePolicy: allowedPersistenceRegions must list at least one region.'),
    ],
    [
      'unknown storage policy field',
      { messageStoragePolicy: { allowedPersistenceRegions: ['us-east1'], bogus: 1 } },
      400,
      unknownField('bogus', 'messageStoragePolicy'),
    ],
    [
      'name in the body differs from the URL',
      { name: `projects/${P}/topics/other` },
      400,
      invalid(
        `The name in the body (projects/${P}/topics/other) does not match the name in the URL (projects/${P}/topics/rejected).`,
      ),
    ],
    [
      'name in the body from another project',
      { name: `projects/elsewhere/topics/rejected` },
      400,
      invalid(
        `The name in the body (projects/elsewhere/topics/rejected) does not match the name in the URL (projects/${P}/topics/rejected).`,
      ),
    ],
    ['unknown field', { bogus: 1 }, 400, unknownField('bogus')],
    ['unknown field with a known one', { labels: { a: 'b' }, nope: true }, 400, unknownField('nope')],
    ['unknown snake_case field is named as sent', { foo_bar: 1 }, 400, unknownField('foo_bar')],
    ['upper-case label key', { labels: { Env: 'prod' } }, 400, invalidValue('labels.Env', 'Invalid key in record')],
    [
      'upper-case label value',
      { labels: { env: 'Prod' } },
      400,
      invalidValue('labels.env', 'label values hold at most 63 lowercase letters, digits, "_" or "-"'),
    ],
    [
      '65 labels',
      { labels: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v'])) },
      400,
      invalidValue('labels', 'at most 64 labels are allowed'),
    ],
    ['kmsKeyName', { kmsKeyName: 'projects/p/locations/l/keyRings/r/cryptoKeys/k' }, 501, unimplemented('kmsKeyName')],
    [
      'schemaSettings',
      { schemaSettings: { schema: 'projects/p/schemas/s', encoding: 'JSON' } },
      501,
      unimplemented('schemaSettings'),
    ],
    [
      'ingestionDataSourceSettings',
      { ingestionDataSourceSettings: { awsKinesis: {} } },
      501,
      unimplemented('ingestionDataSourceSettings'),
    ],
    ['messageTransforms', { messageTransforms: [{ javascriptUdf: {} }] }, 501, unimplemented('messageTransforms')],
    ['tags', { tags: { 'tagKeys/1': 'tagValues/2' } }, 501, unimplemented('tags')],
  ];
  for (const [why, body, status, expected] of rejected) {
    t.strictSame(await api('PUT', `${T}/rejected`, body), { status, body: expected }, `${why}: ${status}`);
    t.strictSame(
      await api('GET', `${T}/rejected`),
      { status: 404, body: notFound('rejected') },
      `  after "${why}": not created`,
    );
  }
  t.strictSame(
    await api('PUT', `${T}/sixty-four`, {
      labels: Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, 'v'])),
    }),
    {
      status: 200,
      body: topicBody(P, 'sixty-four', {
        labels: Object.fromEntries(Array.from({ length: 64 }, (_, i) => [`k${i}`, 'v'])),
      }),
    },
    '64 labels are fine',
  );
});

t.test('PATCH topic', async (t) => {
  const { api } = await openClient(t, target, 'topics-patch');
  const url = `${T}/patched`;
  let current: Record<string, unknown> = {
    labels: { a: '1' },
    messageRetentionDuration: '86400s',
    messageStoragePolicy: { allowedPersistenceRegions: ['us-east1'] },
  };
  t.strictSame(await api('PUT', url, current), { status: 200, body: topicBody(P, 'patched', current) }, 'fixture');

  const accepted: [string, unknown, Record<string, unknown>][] = [
    [
      'labels',
      { topic: { labels: { b: '2' }, messageRetentionDuration: '7200s' }, updateMask: 'labels' },
      { labels: { b: '2' } },
    ],
    [
      'messageRetentionDuration',
      {
        topic: { labels: { ignored: 'x' }, messageRetentionDuration: '7200s' },
        updateMask: 'messageRetentionDuration',
      },
      { messageRetentionDuration: '7200s' },
    ],
    [
      'snake_case path',
      { topic: { messageRetentionDuration: '3600s' }, updateMask: 'message_retention_duration' },
      { messageRetentionDuration: '3600s' },
    ],
    [
      'snake_case body',
      { topic: { message_retention_duration: '1800s' }, update_mask: 'messageRetentionDuration' },
      { messageRetentionDuration: '1800s' },
    ],
    [
      'two paths, with spaces',
      {
        topic: {
          labels: { c: '3' },
          messageStoragePolicy: { allowedPersistenceRegions: ['eu-west1'], enforceInTransit: true },
        },
        updateMask: ' labels , messageStoragePolicy ',
      },
      { labels: { c: '3' }, messageStoragePolicy: { allowedPersistenceRegions: ['eu-west1'], enforceInTransit: true } },
    ],
    [
      'messageStoragePolicy in the mask, absent from the body: reset',
      { topic: {}, updateMask: 'messageStoragePolicy' },
      { messageStoragePolicy: undefined },
    ],
    [
      'messageRetentionDuration in the mask, absent: unset',
      { topic: {}, updateMask: 'messageRetentionDuration' },
      { messageRetentionDuration: undefined },
    ],
    [
      'labels in the mask, absent: cleared',
      { topic: { name: `projects/${P}/topics/patched` }, updateMask: 'labels' },
      { labels: undefined },
    ],
    ['labels back', { topic: { labels: { d: '4' } }, updateMask: 'labels' }, { labels: { d: '4' } }],
  ];
  for (const [why, body, change] of accepted) {
    current = Object.fromEntries(Object.entries({ ...current, ...change }).filter(([, value]) => value !== undefined));
    const expected = topicBody(P, 'patched', current);
    t.strictSame(await api('PATCH', url, body), { status: 200, body: expected }, `patch ${why}`);
    t.strictSame(await api('GET', url), { status: 200, body: expected }, `  read back ${why}`);
  }

  const unchanged = topicBody(P, 'patched', current);
  const rejected: [string, unknown, number, unknown][] = [
    [
      'no updateMask',
      { topic: { labels: { e: '5' } } },
      400,
      invalid('The UpdateTopicRequest must have a non-empty update_mask.'),
    ],
    [
      'empty updateMask',
      { topic: { labels: { e: '5' } }, updateMask: '' },
      400,
      invalid('The UpdateTopicRequest must have a non-empty update_mask.'),
    ],
    [
      'updateMask of commas',
      { topic: { labels: { e: '5' } }, updateMask: ' , ' },
      400,
      invalid('The UpdateTopicRequest must have a non-empty update_mask.'),
    ],
    [
      'unknown path',
      { topic: { labels: { e: '5' } }, updateMask: 'bogus' },
      400,
      invalid('Invalid update_mask provided in the UpdateTopicRequest: unknown field name "bogus".'),
    ],
    [
      'known and unknown paths',
      { topic: { labels: { e: '5' } }, updateMask: 'labels,bogus' },
      400,
      invalid('Invalid update_mask provided in the UpdateTopicRequest: unknown field name "bogus".'),
    ],
    [
      'name path',
      { topic: { name: `projects/${P}/topics/patched` }, updateMask: 'name' },
      400,
      invalid('Invalid update_mask provided in the UpdateTopicRequest: unknown field name "name".'),
    ],
    [
      'state path',
      { topic: { state: 'ACTIVE' }, updateMask: 'state' },
      400,
      invalid('Invalid update_mask provided in the UpdateTopicRequest: unknown field name "state".'),
    ],
    ['kmsKeyName path', { topic: { kmsKeyName: 'k' }, updateMask: 'kmsKeyName' }, 501, unimplemented('kmsKeyName')],
    ['schemaSettings path', { topic: {}, updateMask: 'schemaSettings' }, 501, unimplemented('schemaSettings')],
    [
      'updateMask not a string',
      { topic: { labels: { e: '5' } }, updateMask: ['labels'] },
      400,
      invalidValue('updateMask', 'Invalid input: expected string, received array'),
    ],
    [
      'no topic',
      { updateMask: 'labels' },
      400,
      invalidValue('topic', 'Invalid input: expected object, received undefined'),
    ],
    ['unknown field in topic', { topic: { bogus: 1 }, updateMask: 'labels' }, 400, unknownField('bogus', 'topic')],
    ['unknown top-level field', { topic: {}, updateMask: 'labels', extra: 1 }, 400, unknownField('extra')],
    [
      'retention out of range',
      { topic: { messageRetentionDuration: '599s' }, updateMask: 'messageRetentionDuration' },
      400,
      invalid('Invalid messageRetentionDuration: 599s is outside the allowed range 600s to 2678400s.'),
    ],
    [
      'empty allowedPersistenceRegions',
      { topic: { messageStoragePolicy: { allowedPersistenceRegions: [] } }, updateMask: 'messageStoragePolicy' },
      400,
      invalid('Invalid messageStoragePolicy: allowedPersistenceRegions must list at least one region.'),
    ],
    [
      'name in the body differs from the URL',
      { topic: { name: `projects/${P}/topics/other`, labels: { e: '5' } }, updateMask: 'labels' },
      400,
      invalid(
        `The name in the body (projects/${P}/topics/other) does not match the name in the URL (projects/${P}/topics/patched).`,
      ),
    ],
  ];
  for (const [why, body, status, expected] of rejected) {
    t.strictSame(await api('PATCH', url, body), { status, body: expected }, `${why}: ${status}`);
    t.strictSame(await api('GET', url), { status: 200, body: unchanged }, `  after "${why}": unchanged`);
  }
  t.strictSame(
    await api('PATCH', `${T}/absent`, { topic: { labels: { a: 'b' } }, updateMask: 'labels' }),
    { status: 404, body: notFound('absent') },
    'unknown topic -> 404',
  );
  t.strictSame(await api('GET', `${T}/absent`), { status: 404, body: notFound('absent') }, '  and it was not created');
});

t.test('ListTopics pagination', async (t) => {
  const { api } = await openClient(t, target, 'topics-pages');
  const ids = ['t-00', 't-01', 't-02', 't-03', 't-04'];
  for (const id of [...ids].reverse()) await api('PUT', `${T}/${id}`, {});
  // Neighbours whose names share a prefix must not leak into the project's listing.
  await api('PUT', `/v1/projects/${P}2/topics/t-99`, {});
  await api('PUT', `/v1/projects/tp/topics/t-98`, {});
  await api('PUT', `/v1/projects/${P}/subscriptions/t-97`, { topic: `projects/${P}/topics/t-00` });
  const page = (...names: string[]) => names.map((id) => topicBody(P, id));

  t.strictSame(await api('GET', T), { status: 200, body: { topics: page(...ids) } }, 'no pageSize: everything, sorted');
  t.strictSame(
    await api('GET', `${T}?pageSize=0`),
    { status: 200, body: { topics: page(...ids) } },
    'pageSize=0: server default',
  );
  t.strictSame(
    await api('GET', `${T}?pageSize=5`),
    { status: 200, body: { topics: page(...ids) } },
    'pageSize = count: no nextPageToken',
  );
  t.strictSame(
    await api('GET', `${T}?pageSize=5000`),
    { status: 200, body: { topics: page(...ids) } },
    'pageSize above the maximum is capped, not refused',
  );
  t.strictSame(
    await api('GET', `${T}?pageSize=`),
    { status: 200, body: { topics: page(...ids) } },
    'empty pageSize: server default',
  );

  const first = await api('GET', `${T}?pageSize=2`);
  const token1 = first.body.nextPageToken;
  t.type(token1, 'string', 'first page has a nextPageToken');
  t.strictSame(first, { status: 200, body: { topics: page('t-00', 't-01'), nextPageToken: token1 } }, 'page 1');
  const second = await api('GET', `${T}?pageSize=2&pageToken=${encodeURIComponent(token1)}`);
  const token2 = second.body.nextPageToken;
  t.strictSame(second, { status: 200, body: { topics: page('t-02', 't-03'), nextPageToken: token2 } }, 'page 2');
  t.strictSame(
    await api('GET', `${T}?pageSize=2&pageToken=${encodeURIComponent(token2)}`),
    { status: 200, body: { topics: page('t-04') } },
    'page 3, last: no token',
  );
  t.strictSame(
    await api('GET', `${T}?pageToken=${encodeURIComponent(token1)}`),
    { status: 200, body: { topics: page('t-02', 't-03', 't-04') } },
    'a token with the default page size',
  );

  // A token stays valid when the item it points after is deleted.
  t.strictSame(await api('DELETE', `${T}/t-01`), { status: 200, body: {} }, 'delete t-01');
  t.strictSame(
    await api('GET', `${T}?pageSize=2&pageToken=${encodeURIComponent(token1)}`),
    { status: 200, body: { topics: page('t-02', 't-03'), nextPageToken: token2 } },
    'token after a deleted item still works',
  );

  t.strictSame(
    await api('GET', `/v1/projects/${P}2/topics?pageSize=1`),
    { status: 200, body: { topics: [topicBody(`${P}2`, 't-99')] } },
    'neighbour project alone',
  );
  t.strictSame(
    await api('GET', `/v1/projects/nothing/topics?pageSize=1`),
    { status: 200, body: {} },
    'empty project: {}',
  );

  const badPageSize = (raw: string) => invalid(`Invalid pageSize: "${raw}" is not a non-negative integer.`);
  const otherProjectToken = (await api('GET', `/v1/projects/tp/topics?pageSize=0`)).body;
  t.strictSame(otherProjectToken, { topics: [topicBody('tp', 't-98')] }, 'tp project listing');
  const foreignToken = Buffer.from('projects/tp/topics/t-98').toString('base64url');
  const rejected: [string, string, unknown][] = [
    ['pageSize=abc', 'pageSize=abc', badPageSize('abc')],
    ['pageSize=-1', 'pageSize=-1', badPageSize('-1')],
    ['pageSize=1.5', 'pageSize=1.5', badPageSize('1.5')],
    ['pageSize=0x10', 'pageSize=0x10', badPageSize('0x10')],
    ['pageSize twice', 'pageSize=1&pageSize=2', badPageSize('1,2')],
    ['pageToken garbage', 'pageToken=garbage', invalid('Invalid pageToken.')],
    [
      'pageToken with base64 padding noise',
      `pageToken=${encodeURIComponent(`${token1}==`)}`,
      invalid('Invalid pageToken.'),
    ],
    ['pageToken of another project', `pageToken=${foreignToken}`, invalid('Invalid pageToken.')],
    [
      'pageToken of ListSubscriptions',
      `pageToken=${Buffer.from(`projects/${P}/subscriptions/t-97`).toString('base64url')}`,
      invalid('Invalid pageToken.'),
    ],
  ];
  for (const [why, query, expected] of rejected) {
    t.strictSame(await api('GET', `${T}?${query}`), { status: 400, body: expected }, `${why} -> 400`);
  }
});

t.test('ListTopicSubscriptions', async (t) => {
  const { api } = await openClient(t, target, 'topics-subs');
  const topic = `projects/${P}/topics/lts`;
  await api('PUT', `${T}/lts`, {});
  await api('PUT', `${T}/lts-empty`, {});
  await api('PUT', `${T}/lts-other`, {});
  const subs: [string, string][] = [
    [P, 's-b'],
    [P, 's-a'],
    ['other-project', 's-c'],
    [P, 's-d'],
  ];
  for (const [project, id] of subs) {
    t.strictSame(
      await api('PUT', `/v1/projects/${project}/subscriptions/${id}`, { topic }),
      { status: 200, body: subscriptionBody(project, id, topic) },
      `create ${project}/${id}`,
    );
  }
  await api('PUT', `/v1/projects/${P}/subscriptions/s-other`, { topic: `projects/${P}/topics/lts-other` });
  const names = [
    `projects/${P}/subscriptions/s-a`,
    `projects/${P}/subscriptions/s-b`,
    `projects/${P}/subscriptions/s-d`,
    'projects/other-project/subscriptions/s-c',
  ].sort();

  t.strictSame(
    await api('GET', `${T}/lts/subscriptions`),
    { status: 200, body: { subscriptions: names } },
    'names only, sorted, all projects',
  );
  t.strictSame(await api('GET', `${T}/lts-empty/subscriptions`), { status: 200, body: {} }, 'no subscriptions: {}');
  t.strictSame(
    await api('GET', `${T}/lts-other/subscriptions`),
    { status: 200, body: { subscriptions: [`projects/${P}/subscriptions/s-other`] } },
    'another topic',
  );
  const first = await api('GET', `${T}/lts/subscriptions?pageSize=3`);
  const token = first.body.nextPageToken;
  t.strictSame(first, { status: 200, body: { subscriptions: names.slice(0, 3), nextPageToken: token } }, 'page 1');
  t.type(token, 'string');
  t.strictSame(
    await api('GET', `${T}/lts/subscriptions?pageSize=3&pageToken=${encodeURIComponent(token)}`),
    { status: 200, body: { subscriptions: names.slice(3) } },
    'page 2, last',
  );
  t.strictSame(
    await api('GET', `${T}/lts/subscriptions?pageToken=nonsense`),
    { status: 400, body: invalid('Invalid pageToken.') },
    'bad token -> 400',
  );
  t.strictSame(
    await api('GET', `${T}/lts/subscriptions?pageSize=x`),
    { status: 400, body: invalid('Invalid pageSize: "x" is not a non-negative integer.') },
    'bad pageSize -> 400',
  );
  t.strictSame(
    await api('GET', `${T}/absent/subscriptions`),
    { status: 404, body: notFound('absent') },
    'unknown topic -> 404',
  );

  t.strictSame(await api('DELETE', `/v1/projects/${P}/subscriptions/s-b`), { status: 200, body: {} }, 'delete s-b');
  t.strictSame(
    await api('GET', `${T}/lts/subscriptions`),
    { status: 200, body: { subscriptions: names.filter((name) => !name.endsWith('/s-b')) } },
    'deleted subscription no longer listed',
  );

  // Delete and re-create the topic: the new topic has no subscriptions; the old ones are kept.
  t.strictSame(await api('DELETE', `${T}/lts`), { status: 200, body: {} }, 'delete the topic');
  t.strictSame(
    await api('GET', `${T}/lts/subscriptions`),
    { status: 404, body: notFound('lts') },
    'deleted topic -> 404',
  );
  t.strictSame(await api('PUT', `${T}/lts`, {}), { status: 200, body: topicBody(P, 'lts') }, 're-create it');
  t.strictSame(
    await api('GET', `${T}/lts/subscriptions`),
    { status: 200, body: {} },
    'the new topic has no subscriptions',
  );
  t.strictSame(
    await api('GET', `/v1/projects/${P}/subscriptions/s-a`),
    { status: 200, body: subscriptionBody(P, 's-a', '_deleted-topic_') },
    'the old subscription survives, detached from the name',
  );
});

t.test('still healthy', async (t) => {
  const { api }: Client = await openClient(t, target, 'topics-final');
  t.strictSame(await api('GET', '/healthz'), { status: 200, body: { status: 'ok' } });
});
