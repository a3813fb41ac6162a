// A broker killed (SIGKILL) while a large seek runs: after the restart the seek either happened
// (every retained message is unacknowledged again) or did not (none is), never half; and nothing
// retained is lost: a seek through the restarted broker brings back every message, once. The
// same for a large snapshot being made: afterwards it exists whole (a seek to it brings back the
// backlog it recorded) or not at all (it can be made again).
import t, { type Test } from 'tap';
import { call, freePort, startBrokerProcess, stopProcess, tempDir } from '../helpers/processes.ts';

const TOPIC = '/v1/projects/crash/topics/replayed';
const SUBSCRIPTION = '/v1/projects/crash/subscriptions/replayed-sub';
const MESSAGES = 20_000;

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

/** Pulls and acks until a pull comes back empty; returns the message IDs delivered. */
async function drain(url: string): Promise<string[]> {
  const delivered: string[] = [];
  for (;;) {
    const response = await call(url, 'POST', `${SUBSCRIPTION}:pull`, { maxMessages: 1000, returnImmediately: true });
    const received = response.body?.receivedMessages ?? [];
    if (received.length === 0) return delivered;
    delivered.push(...received.map((m: any) => m.message.messageId));
    const ack = await call(url, 'POST', `${SUBSCRIPTION}:acknowledge`, { ackIds: received.map((m: any) => m.ackId) });
    if (ack.status !== 200) throw new Error(`ack failed: ${JSON.stringify(ack)}`);
  }
}

/** A topic and subscription with MESSAGES published to it; returns their message IDs. */
async function fillBacklog(t: Test, url: string, settings: object): Promise<string[]> {
  t.equal((await call(url, 'PUT', TOPIC, {})).status, 200);
  const created = await call(url, 'PUT', SUBSCRIPTION, {
    topic: 'projects/crash/topics/replayed',
    ackDeadlineSeconds: 600,
    ...settings,
  });
  t.equal(created.status, 200);
  const published: string[] = [];
  const data = Buffer.alloc(512, 1).toString('base64');
  for (let i = 0; i < MESSAGES; i += 1000) {
    const response = await call(url, 'POST', `${TOPIC}:publish`, {
      messages: Array.from({ length: 1000 }, () => ({ data })),
    });
    published.push(...response.body.messageIds);
  }
  return published;
}

t.test('SIGKILL of the broker during a large seek: all or nothing, and nothing lost', async (t) => {
  const env = { DATA_DIR: tempDir(t, 'seek-crash'), REDIS_PORT: String(await freePort()) };
  let broker = await startBrokerProcess(env);
  t.teardown(async () => {
    await stopProcess(broker.child);
  });
  const before = new Date(Date.now() - 1000).toISOString();
  const published = await fillBacklog(t, broker.url, { retainAckedMessages: true });
  t.equal((await drain(broker.url)).length, MESSAGES, 'the backlog is acknowledged');

  // The seek reaches Redis, and the broker dies while the script runs (or just before it).
  const seek = call(broker.url, 'POST', `${SUBSCRIPTION}:seek`, { time: before });
  await sleep(20);
  broker.child.kill('SIGKILL');
  await seek;
  broker = await startBrokerProcess(env);
  const afterCrash = await drain(broker.url);
  t.ok(
    afterCrash.length === 0 || afterCrash.length === MESSAGES,
    `the seek happened whole or not at all (${afterCrash.length} of ${MESSAGES} came back)`,
  );
  t.equal(new Set(afterCrash).size, afterCrash.length, 'none of them twice');

  t.equal((await call(broker.url, 'POST', `${SUBSCRIPTION}:seek`, { time: before })).status, 200);
  const replayed = await drain(broker.url);
  t.same([...replayed].sort(), [...published].sort(), 'a seek after the restart brings back every message, once');
});

t.test('SIGKILL of the broker while it makes a large snapshot: made whole or not at all', async (t) => {
  const env = { DATA_DIR: tempDir(t, 'snapshot-crash'), REDIS_PORT: String(await freePort()) };
  let broker = await startBrokerProcess(env);
  t.teardown(async () => {
    await stopProcess(broker.child);
  });
  const published = await fillBacklog(t, broker.url, {});
  const SNAPSHOT = '/v1/projects/crash/snapshots/backlog';
  const body = { subscription: 'projects/crash/subscriptions/replayed-sub' };
  const creating = call(broker.url, 'PUT', SNAPSHOT, body);
  await sleep(20);
  broker.child.kill('SIGKILL');
  await creating;
  broker = await startBrokerProcess(env);
  const found = await call(broker.url, 'GET', SNAPSHOT);
  t.ok([200, 404].includes(found.status), `the snapshot is there or not (${found.status})`);
  if (found.status === 404) t.equal((await call(broker.url, 'PUT', SNAPSHOT, body)).status, 200, 'made again');
  t.equal((await drain(broker.url)).length, MESSAGES, 'the backlog is acknowledged');
  const seek = await call(broker.url, 'POST', `${SUBSCRIPTION}:seek`, { snapshot: 'projects/crash/snapshots/backlog' });
  t.equal(seek.status, 200);
  const replayed = await drain(broker.url);
  t.same([...replayed].sort(), [...published].sort(), 'a seek to it brings back the whole backlog, once');
});
