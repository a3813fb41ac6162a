// What a message of an ordered subscription costs Redis does not grow with how many keys share
// the work (README.md, "Ordered delivery"): a pull and its acknowledge over keys holding one
// message each run no Redis command per key (the key's state names its one message, so the pull
// reads no range of it and leaves the state as it is, marking the lease as the key's only
// message, so the acknowledge reads neither range nor state), one body size per message, and
// write each structure once per call, not once per key. Keys holding several messages cost the
// pull one range read each, and their acknowledge none. A message published to a key while the
// key's messages are out puts a range read back into that acknowledge, and is delivered next;
// when it is the key's only one, its state names it again, so that pull reads no range of it
// (after a seek too). Counted, never timed (countScriptCommands).

import t, { type Test } from 'tap';
import { b64, startBroker, type TestBroker, unb64 } from '../helpers/app.ts';
import { countScriptCommands } from '../helpers/commands.ts';

const KEYS = 200;
const topic = '/v1/projects/p/topics/keys';
const sub = '/v1/projects/p/subscriptions/keys-sub';

async function orderedBroker(t: Test): Promise<TestBroker> {
  const broker = await startBroker(t, { name: 'many-keys-cost' }); // the standalone server
  await broker.api('PUT', topic, {});
  await broker.api('PUT', sub, { topic: 'projects/p/topics/keys', enableMessageOrdering: true });
  return broker;
}

async function publish(broker: TestBroker, key: number, data: string[]): Promise<void> {
  await broker.api('POST', `${topic}:publish`, {
    messages: data.map((text) => ({ data: b64(text), orderingKey: `key-${key}` })),
  });
}

async function pull(broker: TestBroker): Promise<any[]> {
  const pulled = await broker.api('POST', `${sub}:pull`, { maxMessages: 1000, returnImmediately: true });
  return pulled.body.receivedMessages ?? [];
}

/** The data of received messages, by ordering key, in the order received. */
function dataByKey(received: any[]): Map<string, string[]> {
  const byKey = new Map<string, string[]>();
  for (const m of received)
    byKey.set(m.message.orderingKey, [...(byKey.get(m.message.orderingKey) ?? []), unb64(m.message.data)]);
  return byKey;
}

async function acknowledge(t: Test, broker: TestBroker, received: any[]): Promise<void> {
  const acked = await broker.api('POST', `${sub}:acknowledge`, { ackIds: received.map((m: any) => m.ackId) });
  t.equal(acked.status, 200);
}

t.test('a pull and its acknowledge run a bounded number of commands per ordering key', async (t) => {
  const broker = await orderedBroker(t);
  for (let key = 0; key < KEYS; key++) await publish(broker, key, [`${key}`]);

  let received: any[] = [];
  const commands = await countScriptCommands(t, broker, async () => {
    received = await pull(broker);
    await acknowledge(t, broker, received);
  });
  t.equal(received.length, KEYS, 'one message of every key in one pull');
  const count = (name: string) => commands.get(name) ?? 0;
  const total = [...commands.values()].reduce((sum, n) => sum + n, 0);
  t.equal(count('ZRANGEBYLEX'), 0, "no read of a key's range in the pull or in the acknowledge");
  t.equal(count('HSTRLEN'), KEYS, 'one body size per message');
  // The rest is a few commands per call: each structure read and written once, however many keys.
  t.ok(total - KEYS <= 40, `no other command per key (${JSON.stringify(Object.fromEntries(commands))})`);
});

t.test(
  "a key's only message: its state is read by the pull and deleted by the acknowledge, nothing else",
  async (t) => {
    const broker = await orderedBroker(t);
    for (let key = 0; key < KEYS; key++) await publish(broker, key, [`${key}`]);

    const pulled: any[] = [];
    const pullCommands = await countScriptCommands(
      t,
      broker,
      async () => {
        pulled.push(...(await pull(broker)));
      },
      'name and structure',
    );
    const ackCommands = await countScriptCommands(
      t,
      broker,
      () => acknowledge(t, broker, pulled),
      'name and structure',
    );
    const onStates = (commands: Map<string, number>) =>
      Object.fromEntries([...commands].filter(([command]) => command.endsWith(' key-states')));
    t.equal(pulled.length, KEYS);
    t.same(onStates(pullCommands), { 'HMGET key-states': 1 }, 'the pull reads the states, once, and writes none');
    t.same(onStates(ackCommands), { 'HDEL key-states': 1 }, 'the acknowledge deletes them, once, and reads none');
    t.same(await pull(broker), [], 'nothing is left');
  },
);

t.test('keys with several messages: one range read each in the pull, none in the acknowledge', async (t) => {
  const broker = await orderedBroker(t);
  // The second publish to each key finds it queued with one message.
  for (let key = 0; key < KEYS; key++) await publish(broker, key, ['a']);
  for (let key = 0; key < KEYS; key++) await publish(broker, key, ['b', 'c']);

  let received: any[] = [];
  const commands = await countScriptCommands(t, broker, async () => {
    received = await pull(broker);
    await acknowledge(t, broker, received);
  });
  t.equal(received.length, 3 * KEYS, 'every message of every key in one pull');
  t.equal(commands.get('ZRANGEBYLEX') ?? 0, KEYS, "one read of each key's range, by the pull");
  t.same(await pull(broker), [], 'nothing is left');
});

t.test('messages published while their key is out are delivered after the acknowledge', async (t) => {
  const broker = await orderedBroker(t);
  for (let key = 0; key < KEYS; key++) await publish(broker, key, ['first']);
  const first = await pull(broker);
  t.equal(first.length, KEYS);
  // While the first messages are outstanding, half the keys get one more message and a quarter
  // get two: each key's rest is queued again when its first is acknowledged.
  const later = (key: number) => (key % 2 === 0 ? ['second'] : key % 4 === 1 ? ['second', 'third'] : []);
  for (let key = 0; key < KEYS; key++) if (later(key).length > 0) await publish(broker, key, later(key));

  const commands = await countScriptCommands(t, broker, () => acknowledge(t, broker, first));
  t.equal(commands.get('ZRANGEBYLEX') ?? 0, (3 * KEYS) / 4, 'the acknowledge reads the range of each key published to');
  let second: any[] = [];
  const pullCommands = await countScriptCommands(t, broker, async () => {
    second = await pull(broker);
  });
  t.equal(
    pullCommands.get('ZRANGEBYLEX') ?? 0,
    KEYS / 4,
    'a key queued again with one message names it: the next pull reads only the ranges of the others',
  );
  const byKey = dataByKey(second);
  t.same(
    [...byKey].sort(),
    Array.from({ length: KEYS }, (_, key) => [`key-${key}`, later(key)] as const)
      .filter(([, data]) => data.length > 0)
      .sort(),
    'and every later message is delivered, in order',
  );
  await acknowledge(t, broker, second);
  t.same(await pull(broker), [], 'nothing is left');
});

t.test('after a seek, a key with one message is served without a range read', async (t) => {
  const broker = await orderedBroker(t);
  // Every key gets a message; the even ones a second.
  for (let key = 0; key < KEYS; key++) await publish(broker, key, key % 2 === 0 ? ['a', 'b'] : ['a']);
  const seek = await broker.api('POST', `${sub}:seek`, { time: new Date(Date.now() - 3_600_000).toISOString() });
  t.equal(seek.status, 200);

  let received: any[] = [];
  const commands = await countScriptCommands(t, broker, async () => {
    received = await pull(broker);
  });
  t.equal(received.length, KEYS + KEYS / 2, 'every message in one pull');
  t.equal(
    commands.get('ZRANGEBYLEX') ?? 0,
    KEYS / 2,
    'a range read for each key with two messages, none for the others',
  );
  const byKey = dataByKey(received);
  t.same(byKey.get('key-0'), ['a', 'b'], 'in order');
  await acknowledge(t, broker, received);
  t.same(await pull(broker), [], 'nothing is left');
});
