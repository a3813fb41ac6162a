// The field tables (src/broker/topic-fields.ts, subscription-fields.ts) drive the REST surface:
// for every declared field, what its declaration says is what a client gets. A field added to a
// table is covered here without a new test:
//   - an unimplemented field with a value is refused at create (501), and nothing is created;
//   - an update mask naming an unimplemented field is refused (501); an immutable one is "not
//     mutable" (400); a fixed or output one is an unknown field name (400); nothing changes;
//   - an output field sent in a create is tolerated and not stored;
//   - a stored setting comes back from GET as it was rendered by the create;
//   - the subscription config hash in Redis holds what deliveryConfig says of each setting.

import t from 'tap';
import type { FieldTable } from '../../src/broker/fields.ts';
import { SUBSCRIPTION_FIELDS } from '../../src/broker/subscription-fields.ts';
import { TOPIC_FIELDS } from '../../src/broker/topic-fields.ts';
import { redisTargets } from '../helpers/redis.ts';
import { invalid, notFound, openClient, unimplemented } from './_support.ts';

const standalone = redisTargets()[0];
const P = 'fields-project';

/** A value a client might send for a field that asks for something (not empty). */
const SAMPLE_VALUES: Record<string, unknown> = {
  filter: 'attributes.kind = "a"',
  detached: true,
  bigqueryConfig: { table: 'p.d.t' },
  cloudStorageConfig: { bucket: 'b' },
  bigtableConfig: { table: 't' },
  messageTransforms: [{ javascriptUdf: { functionName: 'f', code: 'function f(m) { return m; }' } }],
  tags: { 'tagKeys/1': 'tagValues/1' },
  kmsKeyName: 'projects/p/locations/l/keyRings/r/cryptoKeys/k',
  schemaSettings: { schema: 'projects/p/schemas/s' },
  ingestionDataSourceSettings: { awsKinesis: { streamArn: 'a' } },
  state: 'ACTIVE',
  topicMessageRetentionDuration: '600s',
  analyticsHubSubscriptionInfo: { listing: 'l' },
  satisfiesPzs: true,
};

const sample = (name: string) => {
  if (!(name in SAMPLE_VALUES)) throw new Error(`no sample value for field ${name}: add one to SAMPLE_VALUES`);
  return SAMPLE_VALUES[name];
};

const fieldsWhere = (table: FieldTable<never>, test: (field: FieldTable<never>[string]) => boolean) =>
  Object.entries(table)
    .filter(([, field]) => test(field))
    .map(([name]) => name);

t.test('topics: what each declared field is, clients get', async (t) => {
  const { api } = await openClient(t, standalone, 'fields-topics');
  const url = (id: string) => `/v1/projects/${P}/topics/${id}`;
  t.equal((await api('PUT', url('base'), { labels: { a: '1' } })).status, 200, 'fixture');

  for (const name of fieldsWhere(TOPIC_FIELDS, (field) => field.unimplemented === true)) {
    t.strictSame(await api('PUT', url(`u-${name}`), { [name]: sample(name) }), {
      status: 501,
      body: unimplemented(name),
    });
    t.strictSame(
      await api('GET', url(`u-${name}`)),
      { status: 404, body: notFound(`u-${name}`) },
      `${name}: none made`,
    );
    t.strictSame(
      await api('PATCH', url('base'), { topic: { [name]: sample(name) }, updateMask: name }),
      { status: 501, body: unimplemented(name) },
      `${name} in a mask`,
    );
  }
  for (const name of fieldsWhere(TOPIC_FIELDS, (field) => field.access === 'fixed' || field.access === 'output')) {
    t.strictSame(
      await api('PATCH', url('base'), { topic: {}, updateMask: name }),
      {
        status: 400,
        body: invalid(`Invalid update_mask provided in the UpdateTopicRequest: unknown field name "${name}".`),
      },
      `${name} in a mask`,
    );
  }
  for (const name of fieldsWhere(TOPIC_FIELDS, (field) => field.access === 'output')) {
    const created = await api('PUT', url(`o-${name}`), { [name]: sample(name) });
    t.equal(created.status, 200, `${name} tolerated at create`);
    t.notOk(name !== 'state' && name in created.body, `${name} not stored`);
  }
  t.strictSame((await api('GET', url('base'))).body, {
    name: `projects/${P}/topics/base`,
    labels: { a: '1' },
    state: 'ACTIVE',
  });
});

t.test('subscriptions: what each declared field is, clients get', async (t) => {
  const { api, broker } = await openClient(t, standalone, 'fields-subscriptions');
  const topic = `projects/${P}/topics/fields-topic`;
  const url = (id: string) => `/v1/projects/${P}/subscriptions/${id}`;
  t.equal((await api('PUT', `/v1/projects/${P}/topics/fields-topic`, {})).status, 200, 'topic');
  const base = await api('PUT', url('base'), {
    topic,
    ackDeadlineSeconds: 30,
    retainAckedMessages: true,
    enableMessageOrdering: true,
    labels: { a: '1' },
    retryPolicy: { minimumBackoff: '1.5s', maximumBackoff: '20s' },
    deadLetterPolicy: { deadLetterTopic: topic, maxDeliveryAttempts: 7 },
  });
  t.equal(base.status, 200, 'fixture');

  for (const name of fieldsWhere(SUBSCRIPTION_FIELDS, (field) => field.unimplemented === true)) {
    t.strictSame(await api('PUT', url(`u-${name}`), { topic, [name]: sample(name) }), {
      status: 501,
      body: unimplemented(name),
    });
    t.strictSame(
      await api('GET', url(`u-${name}`)),
      { status: 404, body: notFound(`u-${name}`) },
      `${name}: none made`,
    );
  }
  for (const [name, field] of Object.entries(SUBSCRIPTION_FIELDS) as [string, FieldTable<never>[string]][]) {
    if (field.access === 'mutable' && !field.unimplemented) continue;
    const reply = await api('PATCH', url('base'), { subscription: {}, updateMask: name });
    const expected =
      field.access === 'immutable'
        ? invalid(
            `Invalid update_mask provided in the UpdateSubscriptionRequest: the '${name}' field in the Subscription is not mutable.`,
          )
        : field.unimplemented
          ? unimplemented(name)
          : invalid(`Invalid update_mask provided in the UpdateSubscriptionRequest: unknown field name "${name}".`);
    t.strictSame(reply.body, expected, `${name} (${field.access}) in a mask`);
  }
  for (const name of fieldsWhere(SUBSCRIPTION_FIELDS, (field) => field.access === 'output')) {
    const created = await api('PUT', url(`o-${name}`), { topic, [name]: sample(name) });
    t.equal(created.status, 200, `${name} tolerated at create`);
    t.notOk(name !== 'state' && name in created.body, `${name} not stored`);
  }
  t.strictSame((await api('GET', url('base'))).body, base.body, 'nothing refused changed the subscription');

  // What the delivery scripts read: every deliveryConfig of the table, for the stored record.
  const record = await broker.app.broker.subscriptions.read({
    project: P,
    id: 'base',
    full: `projects/${P}/subscriptions/base`,
  });
  const { ctx } = broker.app.broker;
  const config = await ctx.redis.hgetall(ctx.keys.topicData(record.topicUid).subscription(record.uid).config);
  const expected: Record<string, string> = {};
  for (const [name, field] of Object.entries(SUBSCRIPTION_FIELDS) as [string, FieldTable<never>[string]][]) {
    for (const [key, value] of field.deliveryConfig?.((record as never)[name]) ?? []) expected[key] = value;
  }
  t.strictSame(expected, {
    exactlyOnce: '0',
    ackDeadlineUs: '30000000',
    retentionUs: '604800000000',
    ordered: '1',
    minBackoffUs: '1500000',
    maxBackoffUs: '20000000',
    maxDeliveryAttempts: '7',
    retainAcked: '1',
  });
  t.has(config, expected, 'the config hash holds every setting the scripts read');
});
