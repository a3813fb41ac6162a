// Subscription routes in detail: names, server-filled defaults, field validation, PATCH with
// update masks, ListSubscriptions pagination, subscriptions outliving their topic and topics in
// another project. Every response is compared whole; every rejected request is followed by a
// read-back showing that nothing changed. Control-plane parts run on standalone Redis; the
// parts that move messages run on both targets.

import t from 'tap';
import { redisTargets } from '../helpers/redis.ts';
import {
  alreadyExists,
  b64,
  badResourceName,
  checkMessageIds,
  invalid,
  invalidValue,
  normalisePull,
  notFound,
  openClient,
  received,
  subscriptionBody,
  topicBody,
  unimplemented,
  unknownField,
} from './_support.ts';

const standalone = redisTargets()[0];
const P = 'sp-project';
const T = `/v1/projects/${P}/topics`;
const S = `/v1/projects/${P}/subscriptions`;
const TOPIC = `projects/${P}/topics/sp-topic`;
const sub = (id: string, extra: Record<string, unknown> = {}) => subscriptionBody(P, id, TOPIC, extra);
const RETRY_DEFAULTS = { minimumBackoff: '10s', maximumBackoff: '600s' };
const DLT = `projects/${P}/topics/sp-dead-letters`;
const notMutable = (path: string) =>
  invalid(
    `Invalid update_mask provided in the UpdateSubscriptionRequest: the '${path}' field in the Subscription is not mutable.`,
  );
const unknownPath = (path: string) =>
  invalid(`Invalid update_mask provided in the UpdateSubscriptionRequest: unknown field name "${path}".`);

t.test('subscription names', async (t) => {
  const { api } = await openClient(t, standalone, 'subs-names');
  await api('PUT', `${T}/sp-topic`, {});
  const ok: [string, string][] = [
    ['abc', 'abc'],
    ['a.b~c+d%25e_f-g', 'a.b~c+d%e_f-g'],
    [`s${'1'.repeat(254)}`, `s${'1'.repeat(254)}`],
  ];
  for (const [segment, id] of ok) {
    const label = id.length > 40 ? `${id.slice(0, 12)}... (${id.length} chars)` : id;
    t.strictSame(
      await api('PUT', `${S}/${segment}`, { topic: TOPIC }),
      { status: 200, body: sub(id) },
      `create ${label}`,
    );
    t.strictSame(await api('GET', `${S}/${segment}`), { status: 200, body: sub(id) }, `get ${label}`);
    t.strictSame(
      await api('POST', `${S}/${segment}:pull`, { maxMessages: 1, returnImmediately: true }),
      { status: 200, body: {} },
      `pull ${label}`,
    );
  }
  const bad: [string, string, string][] = [
    ['2 characters', 'ab', 'ab'],
    ['256 characters', `s${'1'.repeat(255)}`, `s${'1'.repeat(255)}`],
    ['starts with a digit', '0abc', '0abc'],
    ['starts with goog', 'google-sub', 'google-sub'],
    ['holds a quote', 'ab%22c', 'ab"c'],
  ];
  for (const [why, segment, id] of bad) {
    t.strictSame(
      await api('PUT', `${S}/${segment}`, { topic: TOPIC }),
      { status: 400, body: badResourceName('subscriptions', P, id) },
      `create: ${why}`,
    );
    t.strictSame(
      await api('POST', `${S}/${segment}:pull`, { maxMessages: 1 }),
      { status: 400, body: badResourceName('subscriptions', P, id) },
      `pull: ${why}`,
    );
  }
  t.strictSame(
    await api('GET', `${T}/sp-topic/subscriptions`),
    { status: 200, body: { subscriptions: ok.map(([, id]) => `projects/${P}/subscriptions/${id}`).sort() } },
    'only the valid names were created',
  );
});

t.test('defaults and stored fields on create', async (t) => {
  const { api } = await openClient(t, standalone, 'subs-create');
  await api('PUT', `${T}/sp-topic`, {});
  await api('PUT', `${T}/sp-dead-letters`, {});
  await api('PUT', `${T}/sp-retained`, { messageRetentionDuration: '86400s' });
  const accepted: [string, Record<string, unknown>, Record<string, unknown>][] = [
    ['only a topic: every default', {}, {}],
    [
      'exactly-once: deadline 60',
      { enableExactlyOnceDelivery: true },
      { ackDeadlineSeconds: 60, enableExactlyOnceDelivery: true },
    ],
    [
      'exactly-once with an explicit deadline',
      { enableExactlyOnceDelivery: true, ackDeadlineSeconds: 20 },
      { ackDeadlineSeconds: 20, enableExactlyOnceDelivery: true },
    ],
    ['ackDeadlineSeconds 0 means the default', { ackDeadlineSeconds: 0 }, {}],
    ['ackDeadlineSeconds 10', { ackDeadlineSeconds: 10 }, {}],
    ['ackDeadlineSeconds 600', { ackDeadlineSeconds: 600 }, { ackDeadlineSeconds: 600 }],
    ['ackDeadlineSeconds as a string', { ackDeadlineSeconds: '30' }, { ackDeadlineSeconds: 30 }],
    ['retention 600s', { messageRetentionDuration: '600s' }, { messageRetentionDuration: '600s' }],
    ['retention 2678400s', { messageRetentionDuration: '2678400s' }, { messageRetentionDuration: '2678400s' }],
    ['expirationPolicy {} never expires', { expirationPolicy: {} }, { expirationPolicy: {} }],
    ['expirationPolicy ttl 1 day', { expirationPolicy: { ttl: '86400s' } }, { expirationPolicy: { ttl: '86400s' } }],
    ['retainAckedMessages', { retainAckedMessages: true }, { retainAckedMessages: true }],
    ['retainAckedMessages false is omitted', { retainAckedMessages: false }, {}],
    ['labels', { labels: { team: 'billing', tier: '' } }, { labels: { team: 'billing', tier: '' } }],
    ['enableMessageOrdering', { enableMessageOrdering: true }, { enableMessageOrdering: true }],
    ['enableMessageOrdering false is omitted', { enableMessageOrdering: false }, {}],
    ['pushConfig {} is pull', { pushConfig: {} }, {}],
    ['empty filter is no filter', { filter: '' }, {}],
    ['detached false', { detached: false }, {}],
    // Output only: only DetachSubscription detaches (Pub/Sub, too, creates it attached).
    ['detached true is ignored', { detached: true }, {}],
    ['empty deadLetterPolicy is none', { deadLetterPolicy: {} }, {}],
    ['deadLetterPolicy without a topic is none', { deadLetterPolicy: { deadLetterTopic: '' } }, {}],
    [
      'deadLetterPolicy: maxDeliveryAttempts unset means 5',
      { deadLetterPolicy: { deadLetterTopic: DLT } },
      { deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 5 } },
    ],
    [
      'deadLetterPolicy: maxDeliveryAttempts 0 means 5',
      { deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 0 } },
      { deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 5 } },
    ],
    [
      'deadLetterPolicy: 100 attempts, snake_case',
      { dead_letter_policy: { dead_letter_topic: DLT, max_delivery_attempts: 100 } },
      { deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 100 } },
    ],
    [
      "deadLetterPolicy: the subscription's own topic",
      { deadLetterPolicy: { deadLetterTopic: TOPIC, maxDeliveryAttempts: 6 } },
      { deadLetterPolicy: { deadLetterTopic: TOPIC, maxDeliveryAttempts: 6 } },
    ],
    ['retryPolicy {}: the default backoffs', { retryPolicy: {} }, { retryPolicy: RETRY_DEFAULTS }],
    [
      'retryPolicy minimumBackoff only',
      { retryPolicy: { minimumBackoff: '1s' } },
      { retryPolicy: { minimumBackoff: '1s', maximumBackoff: '600s' } },
    ],
    [
      'retryPolicy 0s to 0s',
      { retryPolicy: { minimumBackoff: '0s', maximumBackoff: '0s' } },
      { retryPolicy: { minimumBackoff: '0s', maximumBackoff: '0s' } },
    ],
    [
      'retryPolicy fractions, normalised',
      { retryPolicy: { minimumBackoff: '0.500s', maximumBackoff: '600.000000000s' } },
      { retryPolicy: { minimumBackoff: '0.5s', maximumBackoff: '600s' } },
    ],
    [
      'retry_policy in snake_case',
      { retry_policy: { minimum_backoff: '2s', maximum_backoff: '4s' } },
      { retryPolicy: { minimumBackoff: '2s', maximumBackoff: '4s' } },
    ],
    ['output-only fields are tolerated', { state: 'ACTIVE', topicMessageRetentionDuration: '1s' }, {}],
    ['name in the body equal to the URL', { name: `projects/${P}/subscriptions/{id}` }, {}],
    [
      'snake_case fields',
      { ack_deadline_seconds: 45, message_retention_duration: '7200s', expiration_policy: { ttl: '172800s' } },
      { ackDeadlineSeconds: 45, messageRetentionDuration: '7200s', expirationPolicy: { ttl: '172800s' } },
    ],
  ];
  let n = 0;
  for (const [why, fields, expected] of accepted) {
    const id = `c-${String(n++).padStart(2, '0')}`;
    const body = JSON.parse(JSON.stringify({ topic: TOPIC, ...fields }).replace('{id}', id));
    t.strictSame(await api('PUT', `${S}/${id}`, body), { status: 200, body: sub(id, expected) }, `${why}: create`);
    t.strictSame(await api('GET', `${S}/${id}`), { status: 200, body: sub(id, expected) }, `${why}: get`);
  }
  t.strictSame(
    await api('PUT', `${S}/c-retained`, { topic: `projects/${P}/topics/sp-retained` }),
    {
      status: 200,
      body: subscriptionBody(P, 'c-retained', `projects/${P}/topics/sp-retained`, {
        topicMessageRetentionDuration: '86400s',
      }),
    },
    'topicMessageRetentionDuration copied from the topic',
  );
  t.strictSame(
    await api('PATCH', `${T}/sp-retained`, {
      topic: { messageRetentionDuration: '43200s' },
      updateMask: 'messageRetentionDuration',
    }),
    { status: 200, body: topicBody(P, 'sp-retained', { messageRetentionDuration: '43200s' }) },
    'change the topic retention',
  );
  t.strictSame(
    await api('GET', `${S}/c-retained`),
    {
      status: 200,
      body: subscriptionBody(P, 'c-retained', `projects/${P}/topics/sp-retained`, {
        topicMessageRetentionDuration: '43200s',
      }),
    },
    'topicMessageRetentionDuration follows the topic',
  );

  const created = await api('GET', `${T}/sp-topic/subscriptions`);
  const rejected: [string, unknown, number, unknown][] = [
    [
      'ackDeadlineSeconds 9',
      { topic: TOPIC, ackDeadlineSeconds: 9 },
      400,
      invalid('Invalid ackDeadlineSeconds: 9. It must be between 10 and 600 seconds.'),
    ],
    [
      'ackDeadlineSeconds 601',
      { topic: TOPIC, ackDeadlineSeconds: 601 },
      400,
      invalid('Invalid ackDeadlineSeconds: 601. It must be between 10 and 600 seconds.'),
    ],
    [
      'ackDeadlineSeconds -1',
      { topic: TOPIC, ackDeadlineSeconds: -1 },
      400,
      invalid('Invalid ackDeadlineSeconds: -1. It must be between 10 and 600 seconds.'),
    ],
    [
      'ackDeadlineSeconds 10.5',
      { topic: TOPIC, ackDeadlineSeconds: 10.5 },
      400,
      invalidValue('ackDeadlineSeconds', 'expected an integer'),
    ],
    [
      'ackDeadlineSeconds "ten"',
      { topic: TOPIC, ackDeadlineSeconds: 'ten' },
      400,
      invalidValue('ackDeadlineSeconds', 'Invalid input: expected number, received string'),
    ],
    [
      'retention 599s',
      { topic: TOPIC, messageRetentionDuration: '599s' },
      400,
      invalid('Invalid messageRetentionDuration: 599s is outside the allowed range 600s to 2678400s.'),
    ],
    [
      'retention 2678401s',
      { topic: TOPIC, messageRetentionDuration: '2678401s' },
      400,
      invalid('Invalid messageRetentionDuration: 2678401s is outside the allowed range 600s to 2678400s.'),
    ],
    [
      'retention "7d"',
      { topic: TOPIC, messageRetentionDuration: '7d' },
      400,
      invalidValue('messageRetentionDuration', 'expected a duration such as "600s"'),
    ],
    [
      'expiration ttl below 1 day',
      { topic: TOPIC, expirationPolicy: { ttl: '86399s' } },
      400,
      invalid('Invalid expirationPolicy.ttl: 86399s is outside the allowed range 86400s to 31536000s.'),
    ],
    [
      'unknown expirationPolicy field',
      { topic: TOPIC, expirationPolicy: { ttl: '86400s', bogus: 1 } },
      400,
      unknownField('bogus', 'expirationPolicy'),
    ],
    ['no topic', {}, 400, invalid('The subscription needs a topic (field "topic").')],
    ['empty topic', { topic: '' }, 400, invalid('The subscription needs a topic (field "topic").')],
    ['topic not a name', { topic: 'sp-topic' }, 400, invalid('Invalid [topics] name: (name=sp-topic).')],
    [
      'topic names a subscription',
      { topic: `projects/${P}/subscriptions/c-00` },
      400,
      invalid(`Invalid [topics] name: (name=projects/${P}/subscriptions/c-00).`),
    ],
    [
      'topic is the deleted-topic sentinel',
      { topic: '_deleted-topic_' },
      400,
      invalid('Invalid [topics] name: (name=_deleted-topic_).'),
    ],
    ['topic with an invalid ID', { topic: `projects/${P}/topics/ab` }, 400, badResourceName('topics', P, 'ab')],
    ['unknown topic', { topic: `projects/${P}/topics/absent` }, 404, notFound('absent')],
    ['unknown topic in another project', { topic: 'projects/elsewhere/topics/absent' }, 404, notFound('absent')],
    [
      'name in the body differs',
      { topic: TOPIC, name: `projects/${P}/subscriptions/other` },
      400,
      invalid(
        `The name in the body (projects/${P}/subscriptions/other) does not match the name in the URL (projects/${P}/subscriptions/rejected).`,
      ),
    ],
    ['unknown field', { topic: TOPIC, bogus: 1 }, 400, unknownField('bogus')],
    [
      'pushConfig.pushEndpoint not http(s)',
      { topic: TOPIC, pushConfig: { pushEndpoint: 'ftp://example.com/push' } },
      400,
      invalid('Invalid push_config.push_endpoint: "ftp://example.com/push" is not an http or https URL.'),
    ],
    [
      'pushConfig attributes only',
      { topic: TOPIC, pushConfig: { attributes: { 'x-goog-version': 'v1' } } },
      400,
      invalid('push_config.push_endpoint must be set when other push_config fields are.'),
    ],
    [
      'malformed filter',
      { topic: TOPIC, filter: 'attributes.kind = a' },
      400,
      invalid("Invalid filter expression: expected a double-quoted string, found 'a' at position 19."),
    ],
    [
      'deadLetterPolicy: 4 attempts',
      { topic: TOPIC, deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 4 } },
      400,
      invalid('Invalid deadLetterPolicy.maxDeliveryAttempts: 4. It must be between 5 and 100.'),
    ],
    [
      'deadLetterPolicy: 101 attempts',
      { topic: TOPIC, deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 101 } },
      400,
      invalid('Invalid deadLetterPolicy.maxDeliveryAttempts: 101. It must be between 5 and 100.'),
    ],
    [
      'deadLetterPolicy: attempts without a topic',
      { topic: TOPIC, deadLetterPolicy: { maxDeliveryAttempts: 10 } },
      400,
      invalid('Invalid deadLetterPolicy: maxDeliveryAttempts needs a deadLetterTopic.'),
    ],
    [
      'deadLetterPolicy: not a topic name',
      { topic: TOPIC, deadLetterPolicy: { deadLetterTopic: 'dead-letters' } },
      400,
      invalid('Invalid [topics] name: (name=dead-letters).'),
    ],
    [
      'deadLetterPolicy: a topic that does not exist',
      { topic: TOPIC, deadLetterPolicy: { deadLetterTopic: `projects/${P}/topics/absent` } },
      404,
      notFound('absent'),
    ],
    [
      'deadLetterPolicy: unknown field',
      { topic: TOPIC, deadLetterPolicy: { deadLetterTopic: DLT, deadLetterQueue: true } },
      400,
      unknownField('deadLetterQueue', 'deadLetterPolicy'),
    ],
    [
      'retryPolicy minimumBackoff 601s',
      { topic: TOPIC, retryPolicy: { minimumBackoff: '601s' } },
      400,
      invalid('Invalid retryPolicy.minimumBackoff: 601s is outside the allowed range 0s to 600s.'),
    ],
    [
      'retryPolicy maximumBackoff 600.5s',
      { topic: TOPIC, retryPolicy: { maximumBackoff: '600.5s' } },
      400,
      invalid('Invalid retryPolicy.maximumBackoff: 600.5s is outside the allowed range 0s to 600s.'),
    ],
    [
      'retryPolicy maximum below minimum',
      { topic: TOPIC, retryPolicy: { minimumBackoff: '20s', maximumBackoff: '19s' } },
      400,
      invalid('Invalid retryPolicy: maximumBackoff (19s) must not be less than minimumBackoff (20s).'),
    ],
    [
      'retryPolicy maximum below the default minimum',
      { topic: TOPIC, retryPolicy: { maximumBackoff: '5s' } },
      400,
      invalid('Invalid retryPolicy: maximumBackoff (5s) must not be less than minimumBackoff (10s).'),
    ],
    [
      'retryPolicy negative',
      { topic: TOPIC, retryPolicy: { minimumBackoff: '-1s' } },
      400,
      invalidValue('retryPolicy.minimumBackoff', 'expected a duration such as "600s"'),
    ],
    [
      'retryPolicy not a duration',
      { topic: TOPIC, retryPolicy: { maximumBackoff: 10 } },
      400,
      invalidValue('retryPolicy.maximumBackoff', 'Invalid input: expected string, received number'),
    ],
    [
      'unknown retryPolicy field',
      { topic: TOPIC, retryPolicy: { minimumBackoff: '1s', jitter: true } },
      400,
      unknownField('jitter', 'retryPolicy'),
    ],
    ['bigqueryConfig', { topic: TOPIC, bigqueryConfig: { table: 'p.d.t' } }, 501, unimplemented('bigqueryConfig')],
    [
      'cloudStorageConfig',
      { topic: TOPIC, cloudStorageConfig: { bucket: 'b' } },
      501,
      unimplemented('cloudStorageConfig'),
    ],
    [
      'messageTransforms',
      { topic: TOPIC, messageTransforms: [{ javascriptUdf: {} }] },
      501,
      unimplemented('messageTransforms'),
    ],
  ];
  for (const [why, body, status, expected] of rejected) {
    t.strictSame(await api('PUT', `${S}/rejected`, body), { status, body: expected }, `${why}: ${status}`);
    t.strictSame(
      await api('GET', `${S}/rejected`),
      { status: 404, body: notFound('rejected') },
      `  after "${why}": not created`,
    );
  }
  t.strictSame(await api('GET', `${T}/sp-topic/subscriptions`), created, 'the topic gained no subscription');

  t.strictSame(
    await api('PUT', `${S}/c-00`, { topic: TOPIC, ackDeadlineSeconds: 99, labels: { x: 'y' } }),
    { status: 409, body: alreadyExists('c-00') },
    'duplicate -> 409',
  );
  t.strictSame(
    await api('PUT', `${S}/c-00`, { topic: `projects/${P}/topics/absent` }),
    { status: 409, body: alreadyExists('c-00') },
    'duplicate on a missing topic -> 409',
  );
  t.strictSame(await api('GET', `${S}/c-00`), { status: 200, body: sub('c-00') }, '  the original is unchanged');
});

t.test('PATCH subscription', async (t) => {
  const { api } = await openClient(t, standalone, 'subs-patch');
  await api('PUT', `${T}/sp-topic`, {});
  await api('PUT', `${T}/sp-dead-letters`, {});
  await api('PUT', `${T}/sp-other`, {});
  const url = `${S}/patched`;
  let current: Record<string, unknown> = { enableMessageOrdering: true, labels: { a: '1' } };
  t.strictSame(
    await api('PUT', url, { topic: TOPIC, ...current }),
    { status: 200, body: sub('patched', current) },
    'fixture',
  );

  const accepted: [string, unknown, Record<string, unknown>][] = [
    [
      'ackDeadlineSeconds (camelCase path)',
      { subscription: { ackDeadlineSeconds: 30, labels: { ignored: 'x' } }, updateMask: 'ackDeadlineSeconds' },
      { ackDeadlineSeconds: 30 },
    ],
    [
      'ack_deadline_seconds (snake_case path)',
      { subscription: { ackDeadlineSeconds: 45 }, updateMask: 'ack_deadline_seconds' },
      { ackDeadlineSeconds: 45 },
    ],
    [
      'ackDeadlineSeconds absent: back to the default',
      { subscription: {}, updateMask: 'ackDeadlineSeconds' },
      { ackDeadlineSeconds: 10 },
    ],
    ['labels', { subscription: { labels: { b: '2', c: '3' } }, updateMask: 'labels' }, { labels: { b: '2', c: '3' } }],
    ['labels absent: cleared', { subscription: {}, updateMask: 'labels' }, { labels: undefined }],
    [
      'labels back, snake_case body',
      { subscription: { labels: { d: '4' } }, update_mask: 'labels' },
      { labels: { d: '4' } },
    ],
    [
      'messageRetentionDuration',
      { subscription: { messageRetentionDuration: '3600s' }, updateMask: 'messageRetentionDuration' },
      { messageRetentionDuration: '3600s' },
    ],
    [
      'retainAckedMessages on',
      { subscription: { retainAckedMessages: true }, updateMask: 'retainAckedMessages' },
      { retainAckedMessages: true },
    ],
    [
      'retainAckedMessages off',
      { subscription: { retainAckedMessages: false }, updateMask: 'retain_acked_messages' },
      { retainAckedMessages: undefined },
    ],
    [
      'expirationPolicy {}: never expires',
      { subscription: { expirationPolicy: {} }, updateMask: 'expirationPolicy' },
      { expirationPolicy: {} },
    ],
    [
      'expirationPolicy ttl',
      { subscription: { expirationPolicy: { ttl: '604800s' } }, updateMask: 'expirationPolicy' },
      { expirationPolicy: { ttl: '604800s' } },
    ],
    [
      'expirationPolicy absent: default',
      { subscription: {}, updateMask: 'expirationPolicy' },
      { expirationPolicy: { ttl: '2678400s' } },
    ],
    [
      'enableExactlyOnceDelivery',
      { subscription: { enableExactlyOnceDelivery: true }, updateMask: 'enableExactlyOnceDelivery' },
      { enableExactlyOnceDelivery: true },
    ],
    ['pushConfig {} keeps pull', { subscription: { pushConfig: {} }, updateMask: 'pushConfig' }, {}],
    [
      'deadLetterPolicy',
      {
        subscription: { deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 9 } },
        updateMask: 'deadLetterPolicy',
      },
      { deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 9 } },
    ],
    [
      'dead_letter_policy (snake_case path), attempts defaulted',
      { subscription: { deadLetterPolicy: { deadLetterTopic: DLT } }, updateMask: 'dead_letter_policy' },
      { deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 5 } },
    ],
    [
      'deadLetterPolicy absent: removed',
      { subscription: {}, updateMask: 'deadLetterPolicy' },
      { deadLetterPolicy: undefined },
    ],
    [
      'deadLetterPolicy back',
      {
        subscription: { deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 50 } },
        updateMask: 'deadLetterPolicy',
      },
      { deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 50 } },
    ],
    [
      'retryPolicy {}: the defaults',
      { subscription: { retryPolicy: {} }, updateMask: 'retryPolicy' },
      { retryPolicy: RETRY_DEFAULTS },
    ],
    [
      'retry_policy (snake_case path)',
      { subscription: { retryPolicy: { minimumBackoff: '1s', maximumBackoff: '5s' } }, updateMask: 'retry_policy' },
      { retryPolicy: { minimumBackoff: '1s', maximumBackoff: '5s' } },
    ],
    ['retryPolicy absent: removed', { subscription: {}, updateMask: 'retryPolicy' }, { retryPolicy: undefined }],
    [
      'several paths at once; topic in the body is ignored',
      {
        subscription: { topic: `projects/${P}/topics/sp-other`, ackDeadlineSeconds: 120, labels: { e: '5' } },
        updateMask: 'ackDeadlineSeconds,labels',
      },
      { ackDeadlineSeconds: 120, labels: { e: '5' } },
    ],
    [
      'name in the body equal to the URL',
      {
        subscription: { name: `projects/${P}/subscriptions/patched`, ackDeadlineSeconds: 60 },
        updateMask: 'ackDeadlineSeconds',
      },
      { ackDeadlineSeconds: 60 },
    ],
  ];
  for (const [why, body, change] of accepted) {
    current = Object.fromEntries(Object.entries({ ...current, ...change }).filter(([, value]) => value !== undefined));
    t.strictSame(await api('PATCH', url, body), { status: 200, body: sub('patched', current) }, `patch ${why}`);
    t.strictSame(await api('GET', url), { status: 200, body: sub('patched', current) }, `  read back ${why}`);
  }

  const unchanged = sub('patched', current);
  const rejected: [string, unknown, number, unknown][] = [
    [
      'enableMessageOrdering is immutable',
      { subscription: { enableMessageOrdering: false }, updateMask: 'enableMessageOrdering' },
      400,
      notMutable('enableMessageOrdering'),
    ],
    [
      'enable_message_ordering is immutable',
      { subscription: { enableMessageOrdering: false }, updateMask: 'enable_message_ordering' },
      400,
      notMutable('enableMessageOrdering'),
    ],
    [
      'topic is immutable',
      { subscription: { topic: `projects/${P}/topics/sp-other` }, updateMask: 'topic' },
      400,
      notMutable('topic'),
    ],
    [
      'name is immutable',
      { subscription: { name: `projects/${P}/subscriptions/patched` }, updateMask: 'name' },
      400,
      notMutable('name'),
    ],
    ['filter is immutable', { subscription: { filter: '' }, updateMask: 'filter' }, 400, notMutable('filter')],
    [
      'labels with an immutable path',
      {
        subscription: { labels: { z: '9' }, enableMessageOrdering: false },
        updateMask: 'labels,enableMessageOrdering',
      },
      400,
      notMutable('enableMessageOrdering'),
    ],
    ['unknown path', { subscription: { labels: { z: '9' } }, updateMask: 'bogus' }, 400, unknownPath('bogus')],
    [
      'labels with an unknown path',
      { subscription: { labels: { z: '9' } }, updateMask: 'labels,bogus' },
      400,
      unknownPath('bogus'),
    ],
    ['output-only path', { subscription: { state: 'ACTIVE' }, updateMask: 'state' }, 400, unknownPath('state')],
    [
      'empty updateMask',
      { subscription: { labels: { z: '9' } }, updateMask: '' },
      400,
      invalid('The UpdateSubscriptionRequest must have a non-empty update_mask.'),
    ],
    [
      'missing updateMask',
      { subscription: { labels: { z: '9' } } },
      400,
      invalid('The UpdateSubscriptionRequest must have a non-empty update_mask.'),
    ],
    [
      'deadLetterPolicy of a topic that does not exist',
      {
        subscription: { deadLetterPolicy: { deadLetterTopic: `projects/${P}/topics/absent` } },
        updateMask: 'deadLetterPolicy',
      },
      404,
      notFound('absent'),
    ],
    [
      'deadLetterPolicy with 3 attempts',
      {
        subscription: { deadLetterPolicy: { deadLetterTopic: DLT, maxDeliveryAttempts: 3 } },
        updateMask: 'deadLetterPolicy',
      },
      400,
      invalid('Invalid deadLetterPolicy.maxDeliveryAttempts: 3. It must be between 5 and 100.'),
    ],
    [
      'retryPolicy maximum below minimum',
      { subscription: { retryPolicy: { minimumBackoff: '2s', maximumBackoff: '1s' } }, updateMask: 'retryPolicy' },
      400,
      invalid('Invalid retryPolicy: maximumBackoff (1s) must not be less than minimumBackoff (2s).'),
    ],
    [
      'retryPolicy minimumBackoff 601s',
      { subscription: { retryPolicy: { minimumBackoff: '601s' } }, updateMask: 'retryPolicy' },
      400,
      invalid('Invalid retryPolicy.minimumBackoff: 601s is outside the allowed range 0s to 600s.'),
    ],
    ['bigqueryConfig path', { subscription: {}, updateMask: 'bigqueryConfig' }, 501, unimplemented('bigqueryConfig')],
    [
      'pushConfig with an endpoint that is no URL',
      { subscription: { pushConfig: { pushEndpoint: 'example.com/push' } }, updateMask: 'pushConfig' },
      400,
      invalid('Invalid push_config.push_endpoint: "example.com/push" is not an http or https URL.'),
    ],
    [
      'ackDeadlineSeconds 9',
      { subscription: { ackDeadlineSeconds: 9 }, updateMask: 'ackDeadlineSeconds' },
      400,
      invalid('Invalid ackDeadlineSeconds: 9. It must be between 10 and 600 seconds.'),
    ],
    [
      'ackDeadlineSeconds 601',
      { subscription: { ackDeadlineSeconds: 601 }, updateMask: 'ackDeadlineSeconds' },
      400,
      invalid('Invalid ackDeadlineSeconds: 601. It must be between 10 and 600 seconds.'),
    ],
    [
      'retention 599s',
      { subscription: { messageRetentionDuration: '599s' }, updateMask: 'messageRetentionDuration' },
      400,
      invalid('Invalid messageRetentionDuration: 599s is outside the allowed range 600s to 2678400s.'),
    ],
    [
      'retention 2678401s',
      { subscription: { messageRetentionDuration: '2678401s' }, updateMask: 'messageRetentionDuration' },
      400,
      invalid('Invalid messageRetentionDuration: 2678401s is outside the allowed range 600s to 2678400s.'),
    ],
    [
      'expiration ttl 1 s',
      { subscription: { expirationPolicy: { ttl: '1s' } }, updateMask: 'expirationPolicy' },
      400,
      invalid('Invalid expirationPolicy.ttl: 1s is outside the allowed range 86400s to 31536000s.'),
    ],
    [
      'no subscription',
      { updateMask: 'labels' },
      400,
      invalidValue('subscription', 'Invalid input: expected object, received undefined'),
    ],
    [
      'unknown field in subscription',
      { subscription: { bogus: 1 }, updateMask: 'labels' },
      400,
      unknownField('bogus', 'subscription'),
    ],
    ['unknown top-level field', { subscription: {}, updateMask: 'labels', extra: true }, 400, unknownField('extra')],
    [
      'name in the body differs',
      { subscription: { name: `projects/${P}/subscriptions/other`, labels: { z: '9' } }, updateMask: 'labels' },
      400,
      invalid(
        `The name in the body (projects/${P}/subscriptions/other) does not match the name in the URL (projects/${P}/subscriptions/patched).`,
      ),
    ],
  ];
  for (const [why, body, status, expected] of rejected) {
    t.strictSame(await api('PATCH', url, body), { status, body: expected }, `${why}: ${status}`);
    t.strictSame(await api('GET', url), { status: 200, body: unchanged }, `  after "${why}": unchanged`);
  }
  t.strictSame(
    await api('PATCH', `${S}/absent`, { subscription: { labels: { a: 'b' } }, updateMask: 'labels' }),
    { status: 404, body: notFound('absent') },
    'unknown subscription -> 404',
  );
  t.strictSame(await api('GET', `${S}/absent`), { status: 404, body: notFound('absent') }, '  and it was not created');
});

t.test('ListSubscriptions pagination', async (t) => {
  const { api } = await openClient(t, standalone, 'subs-pages');
  await api('PUT', `${T}/sp-topic`, {});
  const ids = ['l-a', 'l-b', 'l-c', 'l-d'];
  for (const id of [...ids].reverse()) await api('PUT', `${S}/${id}`, { topic: TOPIC, labels: { id } });
  await api('PUT', `/v1/projects/${P}x/subscriptions/l-z`, { topic: TOPIC });
  const page = (...names: string[]) => names.map((id) => sub(id, { labels: { id } }));
  t.strictSame(
    await api('GET', S),
    { status: 200, body: { subscriptions: page(...ids) } },
    'full objects, sorted by name',
  );
  const first = await api('GET', `${S}?pageSize=3`);
  const token = first.body.nextPageToken;
  t.type(token, 'string');
  t.strictSame(
    first,
    { status: 200, body: { subscriptions: page('l-a', 'l-b', 'l-c'), nextPageToken: token } },
    'page 1',
  );
  t.strictSame(
    await api('GET', `${S}?pageSize=3&pageToken=${encodeURIComponent(token)}`),
    { status: 200, body: { subscriptions: page('l-d') } },
    'page 2, last',
  );
  t.strictSame(
    await api('GET', `/v1/projects/${P}x/subscriptions`),
    { status: 200, body: { subscriptions: [subscriptionBody(`${P}x`, 'l-z', TOPIC)] } },
    'the other project lists its own',
  );
  t.strictSame(
    await api(
      'GET',
      `${S}?pageToken=${encodeURIComponent(Buffer.from(`projects/${P}/topics/sp-topic`).toString('base64url'))}`,
    ),
    { status: 400, body: invalid('Invalid pageToken.') },
    'a ListTopics token -> 400',
  );
  t.strictSame(
    await api('GET', `${S}?pageSize=two`),
    { status: 400, body: invalid('Invalid pageSize: "two" is not a non-negative integer.') },
    'pageSize=two -> 400',
  );
});

for (const target of redisTargets()) {
  t.test(`a subscription outlives its topic (${target.name})`, async (t) => {
    const { api } = await openClient(t, target, `subs-deleted-${target.name}`);
    t.strictSame(
      await api('PUT', `${T}/doomed`, { messageRetentionDuration: '3600s' }),
      { status: 200, body: topicBody(P, 'doomed', { messageRetentionDuration: '3600s' }) },
      'topic',
    );
    const doomedTopic = `projects/${P}/topics/doomed`;
    t.strictSame(
      await api('PUT', `${S}/orphan`, { topic: doomedTopic, labels: { k: 'v' } }),
      {
        status: 200,
        body: subscriptionBody(P, 'orphan', doomedTopic, {
          labels: { k: 'v' },
          topicMessageRetentionDuration: '3600s',
        }),
      },
      'subscription',
    );
    checkMessageIds(
      await api('POST', `${T}/doomed:publish`, {
        messages: [{ data: b64('one') }, { data: b64('two'), attributes: { n: '2' } }],
      }),
      2,
    );
    t.strictSame(await api('DELETE', `${T}/doomed`), { status: 200, body: {} }, 'delete the topic');

    const orphan = subscriptionBody(P, 'orphan', '_deleted-topic_', { labels: { k: 'v' } });
    t.strictSame(await api('GET', `${S}/orphan`), { status: 200, body: orphan }, 'GET: topic reads _deleted-topic_');
    t.strictSame(await api('GET', S), { status: 200, body: { subscriptions: [orphan] } }, 'list: the same');
    t.strictSame(await api('GET', `${T}/doomed`), { status: 404, body: notFound('doomed') }, 'the topic is gone');
    t.strictSame(
      await api('POST', `${T}/doomed:publish`, { messages: [{ data: b64('three') }] }),
      { status: 404, body: notFound('doomed') },
      'publishing to it -> 404',
    );

    const pulled = await api('POST', `${S}/orphan:pull`, { maxMessages: 10, returnImmediately: true });
    const { body, ackIds } = normalisePull(pulled.body);
    t.strictSame(
      { status: pulled.status, body },
      {
        status: 200,
        body: {
          receivedMessages: [received({ data: b64('one') }), received({ data: b64('two'), attributes: { n: '2' } })],
        },
      },
      'the subscription still delivers what it held',
    );
    t.strictSame(
      await api('POST', `${S}/orphan:modifyAckDeadline`, { ackIds: ackIds.slice(1), ackDeadlineSeconds: 0 }),
      { status: 200, body: {} },
      'nack the second',
    );
    t.strictSame(
      await api('POST', `${S}/orphan:acknowledge`, { ackIds: ackIds.slice(0, 1) }),
      { status: 200, body: {} },
      'ack the first',
    );
    const again = await api('POST', `${S}/orphan:pull`, { maxMessages: 10, returnImmediately: true });
    const second = normalisePull(again.body);
    t.strictSame(
      { status: again.status, body: second.body },
      { status: 200, body: { receivedMessages: [received({ data: b64('two'), attributes: { n: '2' } })] } },
      'the nacked one comes back',
    );
    t.strictSame(
      await api('POST', `${S}/orphan:acknowledge`, { ackIds: second.ackIds }),
      { status: 200, body: {} },
      'ack it',
    );
    t.strictSame(
      await api('POST', `${S}/orphan:pull`, { maxMessages: 10, returnImmediately: true }),
      { status: 200, body: {} },
      'drained',
    );

    t.strictSame(
      await api('PATCH', `${S}/orphan`, { subscription: { ackDeadlineSeconds: 20 }, updateMask: 'ackDeadlineSeconds' }),
      { status: 200, body: { ...orphan, ackDeadlineSeconds: 20 } },
      'an orphan can still be updated',
    );
    // A new topic with the same name is unrelated.
    t.strictSame(
      await api('PUT', `${T}/doomed`, {}),
      { status: 200, body: topicBody(P, 'doomed') },
      're-create the topic',
    );
    checkMessageIds(await api('POST', `${T}/doomed:publish`, { messages: [{ data: b64('new') }] }), 1);
    t.strictSame(
      await api('GET', `${S}/orphan`),
      { status: 200, body: { ...orphan, ackDeadlineSeconds: 20 } },
      'still _deleted-topic_',
    );
    t.strictSame(
      await api('POST', `${S}/orphan:pull`, { maxMessages: 10, returnImmediately: true }),
      { status: 200, body: {} },
      'the new topic does not feed the orphan',
    );
    t.strictSame(
      await api('GET', `${T}/doomed/subscriptions`),
      { status: 200, body: {} },
      'the new topic lists no subscriptions',
    );
    t.strictSame(await api('DELETE', `${S}/orphan`), { status: 200, body: {} }, 'delete the orphan');
    t.strictSame(await api('GET', `${S}/orphan`), { status: 404, body: notFound('orphan') }, 'gone');
    t.strictSame(
      await api('POST', `${S}/orphan:pull`, { maxMessages: 1, returnImmediately: true }),
      { status: 404, body: notFound('orphan') },
      'pull -> 404',
    );
  });

  t.test(`a topic in another project (${target.name})`, async (t) => {
    const { api } = await openClient(t, target, `subs-cross-${target.name}`);
    const topic = 'projects/publisher-project/topics/shared';
    t.strictSame(
      await api('PUT', '/v1/projects/publisher-project/topics/shared', {}),
      { status: 200, body: topicBody('publisher-project', 'shared') },
      'topic in project A',
    );
    t.strictSame(
      await api('PUT', '/v1/projects/consumer-project/subscriptions/reader', { topic }),
      { status: 200, body: subscriptionBody('consumer-project', 'reader', topic) },
      'subscription in project B',
    );
    t.strictSame(
      await api('GET', '/v1/projects/publisher-project/topics/shared/subscriptions'),
      { status: 200, body: { subscriptions: ['projects/consumer-project/subscriptions/reader'] } },
      'listed on the topic',
    );
    t.strictSame(
      await api('GET', '/v1/projects/consumer-project/subscriptions'),
      { status: 200, body: { subscriptions: [subscriptionBody('consumer-project', 'reader', topic)] } },
      'listed in project B',
    );
    t.strictSame(
      await api('GET', '/v1/projects/publisher-project/subscriptions'),
      { status: 200, body: {} },
      'not listed in project A',
    );
    checkMessageIds(
      await api('POST', '/v1/projects/publisher-project/topics/shared:publish', { messages: [{ data: b64('cross') }] }),
      1,
    );
    const pulled = await api('POST', '/v1/projects/consumer-project/subscriptions/reader:pull', {
      maxMessages: 5,
      returnImmediately: true,
    });
    const { body, ackIds } = normalisePull(pulled.body);
    t.strictSame(
      { status: pulled.status, body },
      { status: 200, body: { receivedMessages: [received({ data: b64('cross') })] } },
      'delivered across projects',
    );
    t.strictSame(
      await api('POST', '/v1/projects/consumer-project/subscriptions/reader:acknowledge', { ackIds }),
      { status: 200, body: {} },
      'ack',
    );
    t.strictSame(
      await api('POST', '/v1/projects/publisher-project/subscriptions/reader:acknowledge', { ackIds }),
      { status: 404, body: notFound('reader') },
      'the same ID in project A -> 404',
    );
  });
}

t.test('still healthy', async (t) => {
  const { api } = await openClient(t, standalone, 'subs-final');
  t.strictSame(await api('GET', '/healthz'), { status: 200, body: { status: 'ok' } });
});
