// pushConfig checks on create, update and modifyPushConfig: each refusal is Pub/Sub's error and
// changes nothing.

import t from 'tap';
import { startBroker } from '../helpers/app.ts';
import { buildApp } from '../../src/app.ts';
import { jsonApi } from '../helpers/app.ts';
import { redisTargets, uniquePrefix } from '../helpers/redis.ts';

const S = '/v1/projects/p/subscriptions';
const TOPIC = 'projects/p/topics/valid-topic';
const invalid = (message: string) => ({ error: { code: 400, message, status: 'INVALID_ARGUMENT' } });

t.test('refused push configs', async (t) => {
  const broker = await startBroker(t, { name: 'push-valid' });
  await broker.api('PUT', '/v1/projects/p/topics/valid-topic', {});
  const cases: [string, object, object][] = [
    [
      'exactly-once with a push endpoint',
      { pushConfig: { pushEndpoint: 'https://example.com/p' }, enableExactlyOnceDelivery: true },
      invalid('Exactly once delivery is not supported for push subscriptions.'),
    ],
    [
      'an audience without a service account',
      { pushConfig: { pushEndpoint: 'https://example.com/p', oidcToken: { audience: 'a' } } },
      invalid('push_config.oidc_token.service_account_email must be set.'),
    ],
    [
      'both wrappers',
      { pushConfig: { pushEndpoint: 'https://example.com/p', noWrapper: {}, pubsubWrapper: {} } },
      invalid('push_config may set only one of pubsub_wrapper and no_wrapper.'),
    ],
  ];
  for (const [what, body, expected] of cases) {
    const reply = await broker.api('PUT', `${S}/refused`, { topic: TOPIC, ...body });
    t.same(reply, { status: 400, body: expected }, what);
  }
  t.equal((await broker.api('GET', `${S}/refused`)).status, 404, 'nothing created');

  const oidc = { serviceAccountEmail: 'pusher@p.iam.gserviceaccount.com', audience: 'me' };
  await broker.api('PUT', `${S}/eod`, { topic: TOPIC, enableExactlyOnceDelivery: true });
  const modified = await broker.api('POST', `${S}/eod:modifyPushConfig`, {
    pushConfig: { pushEndpoint: 'https://example.com/p', oidcToken: oidc },
  });
  t.same(modified, { status: 400, body: invalid('Exactly once delivery is not supported for push subscriptions.') });
  t.same((await broker.api('GET', `${S}/eod`)).body.pushConfig, {}, 'still pull');
  const missing = await broker.api('POST', `${S}/eod:modifyPushConfig`, {});
  t.same(missing, { status: 400, body: invalid('The ModifyPushConfigRequest must set push_config.') });

  await broker.api('PUT', `${S}/oidc`, { topic: TOPIC });
  t.equal(
    (
      await broker.api('POST', `${S}/oidc:modifyPushConfig`, {
        pushConfig: { pushEndpoint: 'http://h.test/p', oidcToken: oidc },
      })
    ).status,
    200,
  );
  t.same((await broker.api('GET', `${S}/oidc`)).body.pushConfig, {
    pushEndpoint: 'http://h.test/p',
    pubsubWrapper: {},
    oidcToken: oidc,
  });
});

t.test('PUSH_ENDPOINT_HOSTS: endpoints elsewhere are refused', async (t) => {
  const redis = redisTargets()[0].connect();
  const app = await buildApp({ redis, keyPrefix: uniquePrefix('push-hosts'), push: { hosts: ['.allowed.test'] } });
  t.teardown(async () => {
    await app.close();
    redis.disconnect();
  });
  const api = jsonApi(app);
  await api('PUT', '/v1/projects/p/topics/valid-topic', {});
  const refused = await api('PUT', `${S}/hosts`, { topic: TOPIC, pushConfig: { pushEndpoint: 'https://evil.test/p' } });
  t.same(refused, {
    status: 400,
    body: invalid('Invalid push_config.push_endpoint: this broker does not push to evil.test.'),
  });
  const allowed = await api('PUT', `${S}/hosts`, {
    topic: TOPIC,
    pushConfig: { pushEndpoint: 'https://a.allowed.test/p' },
  });
  t.equal(allowed.status, 200, 'a subdomain of an allowed entry');
});

t.test('PUSH_ENDPOINT_HOSTS narrowed after create: other fields still update, the endpoint does not', async (t) => {
  const redis = redisTargets()[0].connect();
  const keyPrefix = uniquePrefix('push-hosts-narrowed');
  const wide = await buildApp({ redis, keyPrefix });
  await jsonApi(wide)('PUT', '/v1/projects/p/topics/valid-topic', {});
  const created = await jsonApi(wide)('PUT', `${S}/narrowed`, {
    topic: TOPIC,
    pushConfig: { pushEndpoint: 'http://127.0.0.1:9/p' },
  });
  t.equal(created.status, 200, 'created while any host was allowed');
  await wide.close();
  const narrow = await buildApp({ redis, keyPrefix, push: { hosts: ['.allowed.test'] } });
  t.teardown(async () => {
    await narrow.close();
    redis.disconnect();
  });
  const api = jsonApi(narrow);
  const deadline = await api('PATCH', `${S}/narrowed`, {
    subscription: { ackDeadlineSeconds: 30 },
    updateMask: 'ackDeadlineSeconds',
  });
  t.equal(deadline.status, 200, 'a field other than the push config changes');
  t.equal(deadline.body.ackDeadlineSeconds, 30);
  const refusedHost = invalid('Invalid push_config.push_endpoint: this broker does not push to 127.0.0.1:9.');
  t.same(
    await api('PATCH', `${S}/narrowed`, {
      subscription: { pushConfig: { pushEndpoint: 'http://127.0.0.1:9/q' } },
      updateMask: 'pushConfig',
    }),
    { status: 400, body: refusedHost },
    'a new endpoint is held to the setting',
  );
  t.same(
    await api('POST', `${S}/narrowed:modifyPushConfig`, { pushConfig: { pushEndpoint: 'http://127.0.0.1:9/q' } }),
    { status: 400, body: refusedHost },
    'by modifyPushConfig too',
  );
});
