// A broker restart under the official Node client's streaming subscriber, over gRPC. The broker
// runs as a child process (src/server.ts on the test Redis, its own KEY_PREFIX); while messages
// are published and received on an exactly-once subscription it is stopped with SIGTERM (its
// streams end with UNAVAILABLE) and started again on the same port. The client reconnects by
// itself; every message is received and acked successfully exactly once, and nothing acked
// successfully is delivered again. (Typically about 10 s; see the wait below for when it is 70.)

import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { freePort, startBrokerProcess, stopProcess, type BrokerProcess } from '../helpers/processes.ts';
import { testRedisUrl, uniquePrefix } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';
import { client, pubsubFor, unique } from './_official.ts';

const MESSAGES = 400;
const BATCH = 10;
const PUBLISH_PAUSE_MS = 40;

const port = await freePort();
const env = { REDIS_URL: testRedisUrl(), KEY_PREFIX: uniquePrefix('grpc-restart'), PORT: String(port) };
let broker: BrokerProcess = await startBrokerProcess(env);
t.teardown(() => stopProcess(broker.child, 'SIGTERM', 10_000));

t.test('SIGTERM and restart while the subscriber runs: it reconnects, nothing lost or acked twice', async (t) => {
  const pubsub = pubsubFor(`127.0.0.1:${port}`);
  const topicId = unique('restart-topic');
  const subId = unique('restart-sub');
  const [topic] = await pubsub.createTopic(topicId);
  const [subscription] = await topic.createSubscription(subId, { enableExactlyOnceDelivery: true });
  t.teardown(async () => {
    await subscription.close();
    await pubsub.close();
  });

  const published = new Set<string>();
  const successes = new Map<string, number>();
  const ackFailures: string[] = [];
  const afterSuccess: string[] = [];
  const deliveries = { beforeStop: 0, afterRestart: 0, total: 0 };
  let phase: 'before' | 'down' | 'after' = 'before';
  const streamErrors: Error[] = [];
  subscription.on('error', (error) => streamErrors.push(error));
  subscription.on('message', async (message) => {
    deliveries.total++;
    if (phase === 'before') deliveries.beforeStop++;
    if (phase === 'after') deliveries.afterRestart++;
    if (successes.has(message.id)) afterSuccess.push(message.id);
    try {
      const response = await message.ackWithResponse();
      if (response === client.AckResponses.Success) successes.set(message.id, (successes.get(message.id) ?? 0) + 1);
      else ackFailures.push(`${message.id}: ${response}`);
    } catch (error) {
      ackFailures.push(`${message.id}: ${(error as InstanceType<typeof client.AckError>).errorCode ?? error}`);
    }
  });

  // Publishing goes on before and after the restart; it waits while the broker is down (the
  // client would retry a publish that meets UNAVAILABLE, but with a backoff of seconds).
  let up: Promise<void> = Promise.resolve();
  const publishing = (async () => {
    for (let sent = 0; sent < MESSAGES; sent += BATCH) {
      await up;
      const ids = await Promise.all(
        Array.from({ length: BATCH }, (_, i) => topic.publishMessage({ data: Buffer.from(`m${sent + i}`) })),
      );
      for (const id of ids) published.add(id);
      await sleep(PUBLISH_PAUSE_MS);
    }
  })();

  t.ok(await waitUntil(() => successes.size >= MESSAGES / 4, 20_000), 'messages flow before the restart');
  phase = 'down';
  let restarted!: () => void;
  up = new Promise((resolve) => (restarted = resolve));
  await stopProcess(broker.child, 'SIGTERM', 10_000);
  t.equal(broker.child.exitCode, 0, 'the broker shut down cleanly on SIGTERM');
  t.ok(successes.size < MESSAGES, 'while messages were still coming');
  broker = await startBrokerProcess(env);
  phase = 'after';
  restarted();

  await publishing;
  t.equal(published.size, MESSAGES, 'every message published');
  const allAcked = () => [...published].every((id) => successes.has(id));
  // Usually within seconds. A message the old process delivered just before it stopped, whose
  // receipt (ModifyAckDeadline) the client could not get through while no broker was up, is
  // dropped by the client unannounced and comes back when its lease (60 s) runs out.
  t.ok(await waitUntil(allAcked, 90_000), 'every message received and acked successfully');
  t.ok(
    deliveries.afterRestart > 0,
    `the subscriber reconnected by itself (${deliveries.afterRestart} deliveries after the restart)`,
  );
  t.ok(deliveries.beforeStop > 0, `and had received before it (${deliveries.beforeStop})`);
  // A little longer: a redelivery of something acked would show now.
  await sleep(1000);
  t.same(
    [...successes].filter(([, n]) => n > 1),
    [],
    'no message acked successfully twice',
  );
  t.same(afterSuccess, [], 'nothing acked successfully was delivered again');
  t.same(ackFailures, [], 'no ack failed');
  t.same(
    [...successes.keys()].filter((id) => !published.has(id)),
    [],
    'nothing unknown',
  );
  t.same(streamErrors, [], 'the subscription emitted no error');
  t.comment(`${deliveries.total} deliveries for ${MESSAGES} messages`);
});
