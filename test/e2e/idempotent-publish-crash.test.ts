// Idempotent publish across a broker crash: publishers give each message an idempotency key and
// retry blindly until they get an answer. The broker is SIGKILLed under that load, so some
// publishes are stored but never answered; their retries, against the restarted broker, must
// answer the message ID stored the first time. Afterwards every key is delivered exactly once,
// as the ID its publisher was given.

import { Redis } from 'ioredis';
import t from 'tap';
import { Keys, SEQS_PER_BLOCK } from '../../src/redis/keys.ts';
import {
  call,
  drainOver,
  freePort,
  startBrokerProcess,
  stopProcess,
  tempDir,
  type BrokerProcess,
} from '../helpers/processes.ts';

const TOPIC = '/v1/projects/crash/topics/payments';
const SUBSCRIPTION = '/v1/projects/crash/subscriptions/payments-sub';
const PUBLISHERS = 8;
const BATCH = 50;

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

interface Outcome {
  id: string;
  /** An attempt failed (no answer) before the one that answered. */
  retried: boolean;
}

/** The last seq the topic's incarnation stored, read from the broker's Redis (keys.ts). */
async function lastStoredSeq(redis: Redis): Promise<number> {
  const keys = new Keys('ps');
  const { uid } = JSON.parse((await redis.hget(keys.topics, 'projects/crash/topics/payments'))!);
  const [block, used] = await redis.hmget(keys.topicData(uid).state, 'block', 'used');
  return Number(block) * SEQS_PER_BLOCK + Number(used ?? SEQS_PER_BLOCK) - 1;
}

t.test('a retry after a crash between storing and answering answers the stored message', async (t) => {
  const env = { DATA_DIR: tempDir(t, 'idempotent-crash'), REDIS_PORT: String(await freePort()) };
  let broker: BrokerProcess = await startBrokerProcess(env);
  t.teardown(() => stopProcess(broker.child));
  const redis = new Redis(Number(env.REDIS_PORT), '127.0.0.1');
  t.teardown(() => redis.disconnect());
  t.equal((await call(broker.url, 'PUT', TOPIC, {})).status, 200);
  t.equal((await call(broker.url, 'PUT', SUBSCRIPTION, { topic: 'projects/crash/topics/payments' })).status, 200);

  const outcomes = new Map<string, Outcome>();
  let nextKey = 0;
  let stopped = false;
  // Batches of keys: the longer Redis works on a publish, the likelier a kill lands after it
  // stored it and before the answer left the broker.
  const publisher = async () => {
    while (!stopped) {
      const keys = Array.from({ length: BATCH }, () => `payment-${nextKey++}`);
      let retried = false;
      for (;;) {
        const answer = await call(broker.url, 'POST', `${TOPIC}:publish`, {
          messages: keys.map((key) => ({ data: Buffer.from(key).toString('base64'), idempotencyKey: key })),
        });
        if (answer.status === 200) {
          for (const [i, key] of keys.entries()) outcomes.set(key, { id: answer.body.messageIds[i], retried });
          break;
        }
        retried = true;
        await sleep(20);
      }
    }
  };
  const running = Promise.all(Array.from({ length: PUBLISHERS }, publisher));

  // Kill until some publish is seen stored without its answer: a retried key answered an ID
  // the topic had stored when the broker died (a publish stored anew takes a later one).
  let storedUnanswered = 0;
  for (let kill = 1; kill <= 10 && storedUnanswered === 0; kill++) {
    await sleep(700);
    broker.child.kill('SIGKILL');
    await sleep(100);
    const lastBeforeRestart = await lastStoredSeq(redis);
    const answeredBefore = new Set(outcomes.keys());
    broker = await startBrokerProcess(env);
    await sleep(700);
    storedUnanswered = [...outcomes].filter(
      ([key, o]) => !answeredBefore.has(key) && o.retried && Number(o.id) <= lastBeforeRestart,
    ).length;
    t.comment(`kill ${kill}: ${storedUnanswered} messages stored but not answered, then retried`);
  }
  stopped = true;
  await running;
  t.ok(storedUnanswered > 0, 'some publishes were stored and lost their answer in a crash');

  const deliveredIds = new Map<string, string[]>();
  await drainOver(broker.url, SUBSCRIPTION, (key, message) => {
    deliveredIds.set(key, [...(deliveredIds.get(key) ?? []), message.messageId]);
  });
  const wrong = [...outcomes].filter(([key, outcome]) => deliveredIds.get(key)?.join() !== outcome.id);
  t.ok(outcomes.size > 1000, `${outcomes.size} keys published`);
  t.strictSame(wrong, [], 'every key delivered exactly once, as the ID its publisher was answered');
  t.strictSame(
    [...deliveredIds.keys()].filter((key) => !outcomes.has(key)),
    [],
    'nothing delivered that no publisher asked for',
  );
});
