// What a message of an ordered subscription costs Redis does not grow with how many keys share
// the work (README.md, "Ordered delivery"): a pull and its acknowledge over keys holding one
// message each run a bounded number of Redis commands per key (one range read of the key in
// each script, one body size per message) and write each structure once per call, not once per
// key. Counted, never timed: MONITOR shows every command the scripts run, and only those naming
// this test's keys are counted.

import net from 'node:net';
import t from 'tap';
import { b64, startBroker } from '../helpers/app.ts';
import { REDIS_HOST, standalonePort } from '../setup/redis-config.ts';

const KEYS = 200;

t.test('a pull and its acknowledge run a bounded number of commands per ordering key', async (t) => {
  const broker = await startBroker(t, { name: 'many-keys-cost' }); // the standalone server
  const topic = '/v1/projects/p/topics/keys';
  const sub = '/v1/projects/p/subscriptions/keys-sub';
  await broker.api('PUT', topic, {});
  await broker.api('PUT', sub, { topic: 'projects/p/topics/keys', enableMessageOrdering: true });
  for (let key = 0; key < KEYS; key++) {
    await broker.api('POST', `${topic}:publish`, { messages: [{ data: b64(`${key}`), orderingKey: `key-${key}` }] });
  }

  // Every command a script ran on this test's keys, by name: MONITOR's lines, read off a plain
  // socket ('+<time> [<db> lua] "<command>" "<arg>" ...').
  const commands = new Map<string, number>();
  const end = `${broker.prefix}:end-of-count`;
  let ended = false;
  const monitor = net.connect(standalonePort(), REDIS_HOST);
  t.teardown(() => monitor.destroy());
  let pending = '';
  monitor.on('data', (chunk) => {
    const lines = (pending + chunk.toString('latin1')).split('\r\n');
    pending = lines.pop()!;
    for (const line of lines) {
      if (line.includes(end)) ended = true;
      const command = / \[\d+ lua\] "([a-zA-Z]+)" "([^"]*)"/.exec(line);
      if (!command?.[2].startsWith(broker.prefix)) continue;
      const name = command[1].toUpperCase();
      commands.set(name, (commands.get(name) ?? 0) + 1);
    }
  });
  await new Promise<void>((resolve) => monitor.write('MONITOR\r\n', () => resolve()));
  await new Promise((resolve) => monitor.once('data', resolve));

  const pulled = await broker.api('POST', `${sub}:pull`, { maxMessages: 1000, returnImmediately: true });
  const received = pulled.body.receivedMessages ?? [];
  t.equal(received.length, KEYS, 'one message of every key in one pull');
  const acked = await broker.api('POST', `${sub}:acknowledge`, { ackIds: received.map((m: any) => m.ackId) });
  t.equal(acked.status, 200);
  await broker.redis.get(end);
  while (!ended) await new Promise((resolve) => setTimeout(resolve, 10));

  const count = (name: string) => commands.get(name) ?? 0;
  const total = [...commands.values()].reduce((sum, n) => sum + n, 0);
  t.equal(count('ZRANGEBYLEX'), 2 * KEYS, "one read of each key's range in the pull and one in the acknowledge");
  t.equal(count('HSTRLEN'), KEYS, 'one body size per message');
  // The rest is a few commands per call: each structure read and written once, however many keys.
  t.ok(total - 3 * KEYS <= 40, `no other command per key (${JSON.stringify(Object.fromEntries(commands))})`);
});
