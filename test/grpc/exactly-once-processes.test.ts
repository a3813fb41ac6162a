// Exactly-once delivery end to end across two broker PROCESSES sharing one Redis (the test
// standalone server, one KEY_PREFIX), with official Node client subscribers over gRPC (the
// variant of test/streaming/multi-process.test.ts with raw WebSocket subscribers). Publishers
// use the official client too. Each subscriber is a PubSub of its own pointed at a random
// process; for the first seconds they keep closing (the client nacks what it holds and flushes
// its acks) and reopening, on a random process again, and a few first deliveries are nacked.
// Every message is acked with ackWithResponse(): each message ID gets SUCCESS exactly once, and
// none is lost.
//
// This takes over a minute: the client asks for 60 s leases on an exactly-once subscription
// (streamAckDeadlineSeconds 60, whatever its minAckDeadline), and messages the broker had sent
// on a stream the client then cancelled (by closing) are seen by nobody, so they come back only
// when that lease runs out, as with Pub/Sub. The WebSocket variant lowers its stream deadline
// before it leaves; the official client cannot.
//
//   SEED=1234 npx tap test/grpc/exactly-once-processes.test.ts   # same random choices

import { randomInt } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { startBrokerProcess, stopProcess } from '../helpers/processes.ts';
import { seededRandom } from '../helpers/random.ts';
import { testRedisUrl, uniquePrefix } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';
import { client, type PubSub, pubsubFor, type Subscription, unique } from './_official.ts';

const SEED = process.env.SEED ? Number(process.env.SEED) : randomInt(2 ** 31);
const MESSAGES = Number(process.env.MESSAGES ?? 2000);
const PUBLISHERS = 2;
const SUBSCRIBERS = 4;
const DISRUPT_FOR_MS = 5_000;
const NACK_PROBABILITY = 0.03;
/** The leases of what was in flight on a closed stream run out 60 s after the last close. */
const BUDGET_MS = DISRUPT_FOR_MS + 60_000 + 20_000;

t.comment(`SEED=${SEED} MESSAGES=${MESSAGES}`);
const rnd = seededRandom(SEED);

const env = { REDIS_URL: testRedisUrl(), KEY_PREFIX: uniquePrefix('grpc-eod-processes') };
const brokers = await Promise.all([startBrokerProcess(env), startBrokerProcess(env)]);
const hosts = brokers.map((b) => b.url.replace('http://', ''));
t.teardown(() => Promise.all(brokers.map((b) => stopProcess(b.child, 'SIGTERM', 10_000))));

t.test('official-client subscribers on two processes: every message acked successfully exactly once', async (t) => {
  const admin = pubsubFor(hosts[0]);
  const topicId = unique('eod-topic');
  const subId = unique('eod-sub');
  await admin.createTopic(topicId);
  await admin.topic(topicId).createSubscription(subId, { enableExactlyOnceDelivery: true });
  t.teardown(() => admin.close());

  const published = new Set<string>();
  const successes = new Map<string, number>();
  const problems: string[] = [];
  const deliveredVia = [0, 0];
  const nacked = new Set<string>();
  const stats = { deliveries: 0, reopened: 0, switched: 0, givenUp: 0 };
  let stopped = false;
  const allAcked = () => published.size === MESSAGES && [...published].every((id) => successes.has(id));

  /** One subscriber: a PubSub on a random process, reopened (maybe elsewhere) until told to stay. */
  async function subscriber(n: number) {
    let previous = -1;
    while (!stopped && !allAcked()) {
      const index = rnd.int(0, 1);
      if (previous >= 0) stats.reopened++;
      if (previous >= 0 && previous !== index) stats.switched++;
      previous = index;
      const pubsub: PubSub = pubsubFor(hosts[index]);
      const subscription: Subscription = pubsub.subscription(subId, {
        flowControl: { maxMessages: rnd.int(10, 200) },
      });
      subscription.on('error', (error) => problems.push(`subscriber ${n}: ${error.message}`));
      subscription.on('message', async (message) => {
        stats.deliveries++;
        deliveredVia[index]++;
        await sleep(rnd.int(0, 20));
        // Some first deliveries are nacked: they come back, to this subscriber or another.
        if (!nacked.has(message.id) && rnd.chance(NACK_PROBABILITY)) {
          nacked.add(message.id);
          message.nack();
          return;
        }
        try {
          const response = await message.ackWithResponse();
          if (response === client.AckResponses.Success) {
            successes.set(message.id, (successes.get(message.id) ?? 0) + 1);
          } else if (response === client.AckResponses.Invalid) {
            // Nacked already by close() while this waited: it is delivered again.
            stats.givenUp++;
          } else problems.push(`message ${message.id}: ack answered ${response}`);
        } catch (error) {
          // A delivery the client gave up when it closed, or superseded: another one follows.
          const code = (error as InstanceType<typeof client.AckError>).errorCode;
          if (code !== client.AckResponses.Invalid) problems.push(`message ${message.id}: AckError ${code}`);
          else stats.givenUp++;
        }
      });
      const until = Date.now() + rnd.int(500, 2500);
      const disrupting = () => Date.now() < started + DISRUPT_FOR_MS;
      await waitUntil(() => stopped || allAcked() || (disrupting() && Date.now() > until), BUDGET_MS, 50);
      await subscription.close();
      await pubsub.close();
    }
  }

  const started = Date.now();
  const running = Array.from({ length: SUBSCRIBERS }, (_, n) => subscriber(n));

  const publishers = Array.from({ length: PUBLISHERS }, (_, p) => pubsubFor(hosts[p % 2]));
  let counter = 0;
  await Promise.all(
    publishers.map(async (pubsub, p) => {
      const topic = pubsub.topic(topicId);
      while (counter < MESSAGES) {
        const n = Math.min(rnd.int(1, 40), MESSAGES - counter);
        counter += n;
        const ids = await Promise.all(
          Array.from({ length: n }, (_, i) => topic.publishMessage({ data: Buffer.from(`p${p}-${counter - n + i}`) })),
        );
        for (const id of ids) published.add(id);
        await sleep(rnd.int(0, 60));
      }
    }),
  );
  await Promise.all(publishers.map((pubsub) => pubsub.close()));
  const publishMs = Date.now() - started;

  const finished = await waitUntil(allAcked, BUDGET_MS - (Date.now() - started), 50);
  const elapsed = Date.now() - started;
  stopped = true;
  await Promise.all(running);
  t.comment(
    `${elapsed} ms (publishing ${publishMs} ms): ${stats.deliveries} deliveries (via process 0/1: ${deliveredVia.join('/')}), ` +
      `${stats.reopened} reopens (${stats.switched} to the other process), ${stats.givenUp} acks of deliveries given up on close (INVALID)`,
  );

  t.equal(published.size, MESSAGES, `${MESSAGES} messages published`);
  const missing = [...published].filter((id) => !successes.has(id));
  t.ok(finished, `all acked successfully (${missing.length} missing, e.g. ${missing.slice(0, 5).join(', ')})`);
  t.same(
    [...successes].filter(([, count]) => count > 1),
    [],
    'no message acked successfully twice',
  );
  t.same(
    [...successes.keys()].filter((id) => !published.has(id)),
    [],
    'nothing unknown',
  );
  t.same(problems, [], 'no subscription error, no unexpected ack result');
  t.ok(stats.reopened >= SUBSCRIBERS && stats.switched > 0, 'subscribers reopened, some on the other process');
  t.ok(deliveredVia[0] > 0 && deliveredVia[1] > 0, 'both processes delivered');
  t.ok(
    stats.deliveries >= MESSAGES + nacked.size,
    `nacks and closing subscribers caused redeliveries (${stats.deliveries - MESSAGES}, ${nacked.size} nacks)`,
  );
});
