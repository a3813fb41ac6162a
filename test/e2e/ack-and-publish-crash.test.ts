// Acknowledge-and-publish across broker crashes: workers take jobs and, for each, acknowledge it
// and publish its follow-up in one :acknowledgeAndPublish call. The broker is SIGKILLed at random
// moments under that load, so some calls stop between their steps (leases held, follow-ups
// published, jobs not yet acknowledged); those jobs are delivered again once the hold ends and
// processed again. Afterwards every job is acknowledged and its follow-up was published exactly
// once.

import t from 'tap';
import {
  call,
  drainOver,
  freePort,
  startBrokerProcess,
  stopProcess,
  tempDir,
  type BrokerProcess,
} from '../helpers/processes.ts';

const P = '/v1/projects/crash';
const JOBS = 300;
const WORKERS = 6;
const ACK_DEADLINE_SECONDS = 10;

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

t.test('each follow-up is published once, whatever step a crash interrupts', async (t) => {
  const env = { DATA_DIR: tempDir(t, 'ack-and-publish-crash'), REDIS_PORT: String(await freePort()) };
  let broker: BrokerProcess = await startBrokerProcess(env);
  t.teardown(() => stopProcess(broker.child));
  for (const [path, body] of [
    [`${P}/topics/jobs`, {}],
    [`${P}/topics/follow-ups`, {}],
    [`${P}/subscriptions/work`, { topic: 'projects/crash/topics/jobs', ackDeadlineSeconds: ACK_DEADLINE_SECONDS }],
    [`${P}/subscriptions/done`, { topic: 'projects/crash/topics/follow-ups' }],
  ] as const) {
    t.equal((await call(broker.url, 'PUT', path, body)).status, 200, path);
  }
  const jobs = Array.from({ length: JOBS }, (_, i) => `job-${i}`);
  for (let i = 0; i < JOBS; i += 100) {
    const messages = jobs.slice(i, i + 100).map((job) => ({ data: Buffer.from(job).toString('base64') }));
    t.equal((await call(broker.url, 'POST', `${P}/topics/jobs:publish`, { messages })).status, 200);
  }

  const processed = new Set<string>();
  let interrupted = 0;
  let stopped = false;
  let lastReceivedMs = Date.now();
  const worker = async () => {
    while (!stopped) {
      const pulled = await call(broker.url, 'POST', `${P}/subscriptions/work:pull`, {
        maxMessages: 5,
        returnImmediately: true,
      });
      const received = pulled.body?.receivedMessages ?? [];
      if (received.length === 0) {
        await sleep(50);
        continue;
      }
      lastReceivedMs = Date.now();
      for (const { ackId, message } of received) {
        const job = Buffer.from(message.data, 'base64').toString();
        const answer = await call(broker.url, 'POST', `${P}/subscriptions/work:acknowledgeAndPublish`, {
          ackIds: [ackId],
          publish: [{ topic: 'projects/crash/topics/follow-ups', messages: [{ data: message.data }] }],
        });
        if (answer.status === 200) processed.add(job);
        else interrupted++; // no answer (a crash), or a lease a crash let run out: delivered again
      }
    }
  };
  const running = Promise.all(Array.from({ length: WORKERS }, worker));
  for (let kill = 0; kill < 3; kill++) {
    await sleep(150 + Math.floor(Math.random() * 400));
    broker.child.kill('SIGKILL');
    await sleep(50);
    broker = await startBrokerProcess(env);
  }
  // What a crash left held comes back once the hold (the ack deadline) ends: the work is done
  // when nothing came for longer than that.
  const giveUp = Date.now() + 10 * ACK_DEADLINE_SECONDS * 1000;
  while (Date.now() - lastReceivedMs < (ACK_DEADLINE_SECONDS + 3) * 1000 && Date.now() < giveUp) await sleep(200);
  stopped = true;
  await running;
  // A call whose answer a crash lost may have finished: its job is acknowledged, unanswered.
  t.ok(processed.size > JOBS / 2, `${processed.size} jobs processed with an answer`);
  t.ok(interrupted > 0, `${interrupted} calls were interrupted by the crashes`);

  const followUps = new Map<string, number>();
  await drainOver(broker.url, `${P}/subscriptions/done`, (job) => followUps.set(job, (followUps.get(job) ?? 0) + 1));
  t.strictSame(
    jobs.filter((job) => followUps.get(job) !== 1),
    [],
    'every job has exactly one follow-up',
  );
  const left = await call(broker.url, 'POST', `${P}/subscriptions/work:pull`, {
    maxMessages: 10,
    returnImmediately: true,
  });
  t.strictSame(left.body?.receivedMessages ?? [], [], 'and every job is acknowledged');
});
