// gcloud against the broker (README.md, "Using gcloud"): the pubsub commands speak REST to the
// endpoint that CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB names, with an access token from a file
// (the broker checks none). Dead-letter and retry policies set by `subscriptions create` and
// `update` flags, read back by `describe`; a pull shows deliveryAttempt, and a nack's backoff
// holds the message back until gcloud's long poll gets it; `subscriptions seek --time` purges a
// backlog. Skipped where gcloud is not installed.

import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';
import { openPolicyBroker } from '../helpers/policy-broker.ts';
import { tempDir } from '../helpers/processes.ts';

const run = promisify(execFile);
const SLOW_BACKOFF_S = 5;
const installed = await run('gcloud', ['--version']).then(
  () => true,
  () => false,
);

t.test('gcloud sets dead-letter and retry policies and pulls with deliveryAttempt', { skip: !installed }, async (t) => {
  const b = await openPolicyBroker(t);
  const address = b.app.server.address() as { port: number };
  const config = tempDir(t, 'gcloud-config');
  const token = join(config, 'token');
  writeFileSync(token, 'no-credentials-needed\n');
  const env = {
    ...process.env,
    CLOUDSDK_CONFIG: config,
    CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB: `http://127.0.0.1:${address.port}/`,
    CLOUDSDK_AUTH_ACCESS_TOKEN_FILE: token,
    CLOUDSDK_CORE_PROJECT: 'p',
    CLOUDSDK_CORE_DISABLE_PROMPTS: '1',
  };
  const gcloud = async (...args: string[]) =>
    JSON.parse((await run('gcloud', ['pubsub', ...args, '--format=json'], { env })).stdout || 'null');
  const refusal = (...args: string[]) =>
    run('gcloud', ['pubsub', ...args], { env }).then(
      () => '',
      (error: { stderr: string }) => error.stderr,
    );

  await gcloud('topics', 'create', 'orders');
  await gcloud('topics', 'create', 'orders-dead');
  await gcloud(
    'subscriptions',
    'create',
    'orders-sub',
    '--topic',
    'orders',
    '--dead-letter-topic',
    'orders-dead',
    '--max-delivery-attempts',
    '5',
    '--min-retry-delay',
    '1s',
    '--max-retry-delay',
    '5s',
  );
  t.match(await gcloud('subscriptions', 'describe', 'orders-sub'), {
    deadLetterPolicy: { deadLetterTopic: 'projects/p/topics/orders-dead', maxDeliveryAttempts: 5 },
    retryPolicy: { minimumBackoff: '1s', maximumBackoff: '5s' },
  });
  t.match(
    await refusal('subscriptions', 'create', 'other-sub', '--topic', 'orders', '--dead-letter-topic', 'absent'),
    /Resource not found \(resource=absent\)/,
    'a dead-letter topic that does not exist is refused',
  );

  // A backoff long enough to outlast a gcloud call (each starts a Python interpreter).
  await gcloud(
    'subscriptions',
    'create',
    'slow-sub',
    '--topic',
    'orders',
    '--dead-letter-topic',
    'orders-dead',
    '--min-retry-delay',
    `${SLOW_BACKOFF_S}s`,
    '--max-retry-delay',
    `${SLOW_BACKOFF_S}s`,
  );
  await gcloud('topics', 'publish', 'orders', '--message', 'hello');
  const [first] = await gcloud('subscriptions', 'pull', 'slow-sub');
  t.equal(first.deliveryAttempt, 1, 'pull shows deliveryAttempt');
  const nackedAt = Date.now();
  await gcloud(
    'subscriptions',
    'modify-message-ack-deadline',
    'slow-sub',
    `--ack-ids=${first.ackId}`,
    '--ack-deadline=0',
  );
  const immediate = await b.ok('POST', '/v1/projects/p/subscriptions/slow-sub:pull', {
    maxMessages: 1,
    returnImmediately: true,
  });
  t.same(immediate, {}, 'the nack waits out its backoff');
  // gcloud pulls with returnImmediately false: the broker answers when the backoff ends.
  const [second] = await gcloud('subscriptions', 'pull', 'slow-sub');
  t.ok(Date.now() - nackedAt >= SLOW_BACKOFF_S * 1000 - 100, 'gcloud got it once the backoff was over');
  t.equal(second?.deliveryAttempt, 2, 'as attempt 2');

  await gcloud(
    'subscriptions',
    'update',
    'orders-sub',
    '--dead-letter-topic',
    'orders-dead',
    '--max-delivery-attempts',
    '9',
  );
  await gcloud('subscriptions', 'update', 'orders-sub', '--clear-retry-policy');
  const updated = await gcloud('subscriptions', 'describe', 'orders-sub');
  t.match(updated.deadLetterPolicy, { maxDeliveryAttempts: 9 }, 'updated');
  t.notOk(updated.retryPolicy, 'the retry policy cleared');
  await gcloud('subscriptions', 'update', 'orders-sub', '--clear-dead-letter-policy');
  t.notOk((await gcloud('subscriptions', 'describe', 'orders-sub')).deadLetterPolicy, 'the dead-letter policy cleared');

  // The usual way to empty a backlog: a seek to a time after it.
  await gcloud('subscriptions', 'create', 'purged-sub', '--topic', 'orders');
  await gcloud('topics', 'publish', 'orders', '--message', 'backlog');
  const pullNow = async () =>
    JSON.parse(
      (
        await b.app.inject({
          method: 'POST',
          url: '/v1/projects/p/subscriptions/purged-sub:pull',
          payload: { maxMessages: 10, returnImmediately: true },
        })
      ).body,
    );
  t.equal((await pullNow()).receivedMessages?.length, 1, 'a backlog of one');
  await run(
    'gcloud',
    ['pubsub', 'subscriptions', 'seek', 'purged-sub', `--time=${new Date(Date.now() + 60_000).toISOString()}`],
    { env },
  );
  t.same(await pullNow(), {}, 'gcloud subscriptions seek --time purges it');
});
