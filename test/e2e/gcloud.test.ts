// gcloud against the broker (README.md, "Using gcloud"): the pubsub commands speak REST to the
// endpoint that CLOUDSDK_API_ENDPOINT_OVERRIDES_PUBSUB names, with an access token from a file
// (the broker checks none). Dead-letter and retry policies set by `subscriptions create` and
// `update` flags, read back by `describe`; a pull shows deliveryAttempt, and a nack's backoff
// holds the message back until gcloud's long poll gets it; `subscriptions seek --time` purges a
// backlog. Snapshots made, listed, described and deleted by `snapshots` commands, and
// `subscriptions seek --snapshot` bringing back what was acknowledged after one was made.
// Skipped where gcloud is not installed.

import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { formatTimestampUs, parseTimestampUs } from '../../src/broker/durations.ts';
import { openPolicyBroker } from '../helpers/policy-broker.ts';
import { tempDir } from '../helpers/processes.ts';

const run = promisify(execFile);
const SLOW_BACKOFF_S = 5;
const installed = await run('gcloud', ['--version']).then(
  () => true,
  () => false,
);

/** A broker listening on a port, and gcloud (with a configuration of its own) pointed at it, in project p. */
async function openGcloud(t: Test) {
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
  const json = async (args: string[]) =>
    JSON.parse((await run('gcloud', [...args, '--format=json'], { env })).stdout || 'null');
  const gcloud = (...args: string[]) => json(['pubsub', ...args]);
  /** A command of the alpha release track (`topics list-snapshots` is only there). */
  const alpha = (...args: string[]) => json(['alpha', 'pubsub', ...args]);
  /** The error output of a gcloud command that fails ('' if it succeeds). */
  const refusal = (...args: string[]) =>
    run('gcloud', ['pubsub', ...args], { env }).then(
      () => '',
      (error: { stderr: string }) => error.stderr,
    );
  return { b, env, gcloud, alpha, refusal };
}

t.test('gcloud sets dead-letter and retry policies and pulls with deliveryAttempt', { skip: !installed }, async (t) => {
  const { b, env, gcloud, refusal } = await openGcloud(t);

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

t.test('gcloud makes, lists, describes and deletes a snapshot, and seeks to it', { skip: !installed }, async (t) => {
  const { b, gcloud, alpha, refusal } = await openGcloud(t);
  const SEVEN_DAYS_US = 7 * 24 * 3600 * 1_000_000;
  /** What `subscriptions pull --auto-ack` got, sorted by text: [text, ackStatus]. */
  const pullAcked = async (subscription: string) =>
    ((await gcloud('subscriptions', 'pull', subscription, '--auto-ack', '--limit=10')) as any[])
      .map((m) => [Buffer.from(m.message.data, 'base64').toString(), m.ackStatus])
      .sort();
  const pullNow = (subscription: string) =>
    b.ok('POST', `/v1/projects/p/subscriptions/${subscription}:pull`, { maxMessages: 10, returnImmediately: true });

  await gcloud('topics', 'create', 'events');
  await gcloud('topics', 'create', 'others');
  // It retains acknowledged messages: a seek to the snapshot could bring them back, and must not.
  await gcloud('subscriptions', 'create', 'events-sub', '--topic', 'events', '--retain-acked-messages');
  await gcloud('subscriptions', 'create', 'others-sub', '--topic', 'others');
  await gcloud('topics', 'publish', 'events', '--message', 'acked-before');
  t.strictSame(await pullAcked('events-sub'), [['acked-before', 'SUCCESS']], 'acknowledged before the snapshot');
  await gcloud('topics', 'publish', 'events', '--message', 'unacked');

  const created = await gcloud('snapshots', 'create', 'snap', '--subscription=events-sub', '--labels=team=ops');
  t.equal(created.length, 1, 'one snapshot made');
  const { expireTime } = created[0];
  t.strictSame(
    created,
    [{ snapshotId: 'projects/p/snapshots/snap', topic: 'projects/p/topics/events', expireTime }],
    "named, of the subscription's topic",
  );
  t.match(
    await refusal('snapshots', 'create', 'snap', '--subscription=events-sub'),
    /Resource already exists in the project \(resource=snap\)/,
    'a second snapshot of the same name is refused',
  );

  await gcloud('topics', 'publish', 'events', '--message', 'after');
  const pulled = (await gcloud('subscriptions', 'pull', 'events-sub', '--auto-ack', '--limit=10')) as any[];
  t.strictSame(
    pulled.map((m) => [Buffer.from(m.message.data, 'base64').toString(), m.ackStatus]).sort(),
    [
      ['after', 'SUCCESS'],
      ['unacked', 'SUCCESS'],
    ],
    'the rest acknowledged after the snapshot',
  );
  t.strictSame(await pullNow('events-sub'), {}, 'nothing left');
  const unacked = pulled.find((m) => Buffer.from(m.message.data, 'base64').toString() === 'unacked');
  t.equal(
    expireTime,
    formatTimestampUs(parseTimestampUs(unacked.message.publishTime, 'publishTime') + SEVEN_DAYS_US),
    'it expires seven days after its oldest unacknowledged message was published',
  );

  const snapshot = { name: 'projects/p/snapshots/snap', topic: 'projects/p/topics/events', expireTime };
  t.strictSame(
    await gcloud('snapshots', 'list'),
    [{ ...snapshot, labels: { team: 'ops' }, projectId: 'p', snapshotId: 'snap', topicId: 'events' }],
    'listed, with its labels',
  );
  t.strictSame(await gcloud('snapshots', 'describe', 'snap'), { ...snapshot, labels: { team: 'ops' } }, 'described');
  t.strictSame(
    await alpha('topics', 'list-snapshots', 'events'),
    ['projects/p/snapshots/snap'],
    "the topic's snapshots",
  );
  t.strictSame(await alpha('topics', 'list-snapshots', 'others'), [], 'none of another topic');

  t.strictSame(
    await gcloud('subscriptions', 'seek', 'events-sub', '--snapshot=snap'),
    {
      subscriptionId: 'projects/p/subscriptions/events-sub',
      snapshotId: 'projects/p/snapshots/snap',
    },
    'the seek answers',
  );
  t.strictSame(
    await pullAcked('events-sub'),
    [
      ['after', 'SUCCESS'],
      ['unacked', 'SUCCESS'],
    ],
    'the seek brings back what the snapshot held unacknowledged and what was published after it',
  );
  t.strictSame(await pullNow('events-sub'), {}, 'and not what was acknowledged before it');
  t.match(
    await refusal('subscriptions', 'seek', 'others-sub', '--snapshot=snap'),
    /FAILED_PRECONDITION[\s\S]*is of another topic/,
    'a subscription of another topic cannot seek to the snapshot',
  );

  t.strictSame(
    await gcloud('snapshots', 'delete', 'snap'),
    [{ snapshotId: 'projects/p/snapshots/snap', topic: null, expireTime: null }],
    'the delete answers',
  );
  t.strictSame(await gcloud('snapshots', 'list'), [], 'deleted');
  t.match(
    await refusal('snapshots', 'describe', 'snap'),
    /NOT_FOUND[\s\S]*Resource not found \(resource=snap\)/,
    'nor described',
  );
  t.match(
    await refusal('subscriptions', 'seek', 'events-sub', '--snapshot=snap'),
    /Resource not found \(resource=snap\)/,
    'a deleted snapshot is no seek target',
  );
});

t.test('gcloud reads and changes IAM policies of topics and subscriptions', { skip: !installed }, async (t) => {
  const { gcloud, refusal } = await openGcloud(t);
  await gcloud('topics', 'create', 'guarded');
  await gcloud('subscriptions', 'create', 'guarded-sub', '--topic=guarded');
  t.match(await gcloud('topics', 'get-iam-policy', 'guarded'), { etag: 'ACAB' }, 'a topic without a policy');
  const added = await gcloud(
    'topics',
    'add-iam-policy-binding',
    'guarded',
    '--member=serviceAccount:shop@p.iam.gserviceaccount.com',
    '--role=roles/pubsub.publisher',
  );
  t.match(
    added,
    { bindings: [{ role: 'roles/pubsub.publisher', members: ['serviceAccount:shop@p.iam.gserviceaccount.com'] }] },
    'add-iam-policy-binding reads the policy, adds the binding and writes it back',
  );
  t.same(await gcloud('topics', 'get-iam-policy', 'guarded'), added, 'get-iam-policy shows it');
  await gcloud(
    'subscriptions',
    'add-iam-policy-binding',
    'guarded-sub',
    '--member=user:alice@example.com',
    '--role=roles/pubsub.subscriber',
  );
  const removed = await gcloud(
    'subscriptions',
    'remove-iam-policy-binding',
    'guarded-sub',
    '--member=user:alice@example.com',
    '--role=roles/pubsub.subscriber',
  );
  t.same(removed.bindings ?? [], [], 'remove-iam-policy-binding takes it away');
  t.match(
    await refusal(
      'topics',
      'add-iam-policy-binding',
      'guarded',
      '--member=group:x@example.com',
      '--role=roles/pubsub.viewer',
    ),
    /INVALID_ARGUMENT[\s\S]*groups and domains are not supported/,
    'a group is refused, saying why',
  );
});
