// Crash tests: SIGKILL the broker, or its managed redis-server, in the middle of publish and
// pull/ack load; after the restart every publish that was answered OK is still delivered,
// and no message whose ack was answered OK is delivered again.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { call, freePort, startBrokerProcess, stopProcess, tempDir, type BrokerProcess } from '../helpers/processes.ts';
import { startRedisProcess } from '../helpers/redis-process.ts';

const TOPIC = '/v1/projects/crash/topics/orders';
const SUBSCRIPTION = '/v1/projects/crash/subscriptions/orders-sub';

interface Ledger {
  accepted: Set<string>; // message IDs whose publish answered 200
  received: Set<string>; // message IDs ever pulled
  acked: Set<string>; // message IDs whose ack answered 200
}

/** Publishers and a puller running against `broker()` until `stop` is set. */
function runLoad(broker: () => BrokerProcess, ledger: Ledger) {
  let stopped = false;
  let counter = 0;
  const publisher = async () => {
    while (!stopped) {
      const messages = Array.from({ length: 20 }, () => ({ data: Buffer.from(`m${counter++}`).toString('base64') }));
      const response = await call(broker().url, 'POST', `${TOPIC}:publish`, { messages });
      if (response.status === 200) for (const id of response.body.messageIds) ledger.accepted.add(id);
      else await new Promise((done) => setTimeout(done, 20));
    }
  };
  const puller = async () => {
    while (!stopped) {
      const response = await call(broker().url, 'POST', `${SUBSCRIPTION}:pull`, {
        maxMessages: 50,
        returnImmediately: true,
      });
      const received = response.status === 200 ? (response.body.receivedMessages ?? []) : [];
      if (received.length === 0) {
        await new Promise((done) => setTimeout(done, 20));
        continue;
      }
      for (const m of received) ledger.received.add(m.message.messageId);
      const ack = await call(broker().url, 'POST', `${SUBSCRIPTION}:acknowledge`, {
        ackIds: received.map((m: any) => m.ackId),
      });
      if (ack.status === 200) for (const m of received) ledger.acked.add(m.message.messageId);
    }
  };
  const running = Promise.all([publisher(), publisher(), puller()]);
  return async () => {
    stopped = true;
    await running;
  };
}

/**
 * Pulls and acks until every accepted message not yet seen has come, or for at most 20 s: a
 * pull whose answer died with the broker leaves its messages leased, and they come back only
 * when their 10 s lease runs out. Returns the IDs delivered.
 */
async function drain(broker: BrokerProcess, ledger: Ledger): Promise<string[]> {
  const delivered: string[] = [];
  const missing = new Set([...ledger.accepted].filter((id) => !ledger.received.has(id)));
  const giveUpAt = Date.now() + 20_000;
  while (missing.size > 0 && Date.now() < giveUpAt) {
    const response = await call(broker.url, 'POST', `${SUBSCRIPTION}:pull`, {
      maxMessages: 1000,
      returnImmediately: true,
    });
    const received = response.body?.receivedMessages ?? [];
    if (received.length === 0) {
      await sleep(200);
      continue;
    }
    delivered.push(...received.map((m: any) => m.message.messageId));
    for (const m of received) missing.delete(m.message.messageId);
    const ack = await call(broker.url, 'POST', `${SUBSCRIPTION}:acknowledge`, {
      ackIds: received.map((m: any) => m.ackId),
    });
    if (ack.status !== 200) throw new Error(`drain ack failed: ${JSON.stringify(ack)}`);
  }
  // Whatever else is still there (an acked message delivered again would show up here).
  const rest = await call(broker.url, 'POST', `${SUBSCRIPTION}:pull`, { maxMessages: 1000, returnImmediately: true });
  delivered.push(...(rest.body?.receivedMessages ?? []).map((m: any) => m.message.messageId));
  return delivered;
}

function checkLedger(t: Test, ledger: Ledger, drained: string[]) {
  const delivered = new Set([...ledger.received, ...drained]);
  const lost = [...ledger.accepted].filter((id) => !delivered.has(id));
  t.ok(ledger.accepted.size > 0, `publishes were accepted under load (${ledger.accepted.size})`);
  t.ok(ledger.acked.size > 0, `acks were answered under load (${ledger.acked.size})`);
  t.same(lost, [], 'every accepted publish was delivered');
  t.same(
    drained.filter((id) => ledger.acked.has(id)),
    [],
    'no message acked OK was delivered again',
  );
}

async function setUp(t: Test, broker: BrokerProcess) {
  t.equal((await call(broker.url, 'PUT', TOPIC, {})).status, 200);
  t.equal((await call(broker.url, 'PUT', SUBSCRIPTION, { topic: 'projects/crash/topics/orders' })).status, 200);
}

const sleep = (ms: number) => new Promise((done) => setTimeout(done, ms));

t.test('SIGKILL of the broker under load loses nothing accepted', async (t) => {
  const env = { DATA_DIR: tempDir(t, 'crash-broker'), REDIS_PORT: String(await freePort()) };
  let broker = await startBrokerProcess(env);
  t.teardown(async () => {
    await stopProcess(broker.child);
  });
  await setUp(t, broker);
  const ledger: Ledger = { accepted: new Set(), received: new Set(), acked: new Set() };
  const stopLoad = runLoad(() => broker, ledger);
  await sleep(1500);
  broker.child.kill('SIGKILL');
  await sleep(300);
  await stopLoad();
  // `npm start` again: the managed redis-server left running is re-adopted, with all its data.
  broker = await startBrokerProcess(env);
  t.match(broker.output(), /re-adopting/, 'the orphaned redis-server was re-adopted');
  checkLedger(t, ledger, await drain(broker, ledger));
});

t.test('SIGKILL of the managed redis-server under load loses nothing accepted', async (t) => {
  const dataDir = tempDir(t, 'crash-redis');
  const broker = await startBrokerProcess({ DATA_DIR: dataDir, REDIS_PORT: String(await freePort()) });
  t.teardown(async () => {
    await stopProcess(broker.child);
  });
  await setUp(t, broker);
  const ledger: Ledger = { accepted: new Set(), received: new Set(), acked: new Set() };
  const stopLoad = runLoad(() => broker, ledger);
  await sleep(1000);
  const redisPid = Number(readFileSync(join(dataDir, 'redis.pid'), 'utf8'));
  process.kill(redisPid, 'SIGKILL');
  const during = await call(broker.url, 'GET', '/readyz');
  t.ok([200, 503].includes(during.status), 'the broker keeps answering while Redis is down');
  // The broker starts its Redis again; load goes on against the restarted server.
  for (let i = 0; i < 300 && (await call(broker.url, 'GET', '/readyz')).status !== 200; i++) await sleep(100);
  t.equal((await call(broker.url, 'GET', '/readyz')).status, 200, 'ready again after the restart');
  await sleep(1000);
  await stopLoad();
  checkLedger(t, ledger, await drain(broker, ledger));
});

t.test('with an external Redis down, requests answer UNAVAILABLE and recover by themselves', async (t) => {
  // appendfsync always (the helper's setting): with everysec, Redis may hold back its AOF writes
  // for up to 2 s while an fsync is slow (a busy disk), and the SIGKILL below would lose the
  // topic set up here.
  const redis = await startRedisProcess(t, 'external-redis');
  const broker = await startBrokerProcess({ REDIS_URL: redis.url });
  t.teardown(() => stopProcess(broker.child));
  await setUp(t, broker);
  const published = await call(broker.url, 'POST', `${TOPIC}:publish`, { messages: [{ data: 'aGVsbG8=' }] });
  t.equal(published.status, 200);

  await redis.kill();
  const publishWhileDown = await call(broker.url, 'POST', `${TOPIC}:publish`, { messages: [{ data: 'aGVsbG8=' }] });
  t.equal(publishWhileDown.status, 503);
  t.same(publishWhileDown.body.error.status, 'UNAVAILABLE');
  const pullWhileDown = await call(broker.url, 'POST', `${SUBSCRIPTION}:pull`, {
    maxMessages: 1,
    returnImmediately: true,
  });
  t.equal(pullWhileDown.status, 503);
  t.equal((await call(broker.url, 'GET', '/readyz')).status, 503, 'not ready while Redis is down');
  t.equal((await call(broker.url, 'GET', '/healthz')).status, 200, 'but alive');

  await redis.start();
  let pulled: Awaited<ReturnType<typeof call>> | undefined;
  for (let i = 0; i < 300; i++) {
    pulled = await call(broker.url, 'POST', `${SUBSCRIPTION}:pull`, { maxMessages: 10, returnImmediately: true });
    if (pulled.status === 200) break;
    await sleep(100);
  }
  t.equal(pulled!.status, 200, 'recovered without a restart');
  t.same(
    pulled!.body.receivedMessages.map((m: any) => m.message.messageId),
    [published.body.messageIds[0]],
  );
});
