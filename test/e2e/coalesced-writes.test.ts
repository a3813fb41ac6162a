// Commands sent to Redis in one turn of the event loop leave in one write to the socket, on a
// standalone Redis and on each node of a cluster, also after a reconnection; every command still
// gets its own answer, and a lone command is not held back.

import type { Socket } from 'node:net';
import type { Cluster, Redis } from 'ioredis';
import t from 'tap';
import { coalesceWrites } from '../../src/redis/coalesced-writes.ts';
import { type RedisClient, redisTargets, uniquePrefix } from '../helpers/redis.ts';

/** The sockets of every connection the client has now (a cluster: one per node). */
function socketsOf(client: RedisClient): Socket[] {
  const nodes = 'isCluster' in client && client.isCluster ? (client as Cluster).nodes('all') : [client as Redis];
  return nodes.map((node) => node.stream as Socket).filter(Boolean);
}

/** Counts the writes that reach the sockets' handles (one system call each) while `run` runs. */
async function countWrites<T>(client: RedisClient, run: () => Promise<T>): Promise<{ writes: number; value: T }> {
  let writes = 0;
  const restore: (() => void)[] = [];
  for (const socket of socketsOf(client)) {
    const spied = socket as unknown as { _writeGeneric: (...args: unknown[]) => unknown };
    const original = spied._writeGeneric;
    spied._writeGeneric = function (this: unknown, ...args: unknown[]) {
      writes++;
      return original.apply(this, args);
    };
    restore.push(() => {
      spied._writeGeneric = original;
    });
  }
  try {
    const value = await run();
    return { writes, value };
  } finally {
    for (const undo of restore) undo();
  }
}

for (const target of redisTargets()) {
  t.test(target.name, async (t) => {
    const client = target.connect();
    coalesceWrites(client);
    t.teardown(() => client.disconnect());
    // One hash tag: on a cluster every command goes to the same node.
    const tag = uniquePrefix('coalesced');
    const keys = Array.from({ length: 20 }, (_, i) => `{${tag}}:${i}`);
    // Every node is connected before counting (a cluster connects to a node on its first use).
    await client.set(keys[0], 'warm');
    await client.get(keys[0]);

    const sendAll = () => Promise.all(keys.map((k, i) => client.set(k, `v${i}`)));
    const first = await countWrites(client, sendAll);
    t.equal(first.writes, 1, 'twenty commands of one turn: one write');
    t.same(first.value, Array(20).fill('OK'), 'each command answered');
    t.same(
      await client.mget(...keys),
      keys.map((_, i) => `v${i}`),
      'each command applied',
    );

    const lone = await countWrites(client, () => client.get(keys[3]));
    t.equal(lone.value, 'v3', 'a lone command is answered');
    t.equal(lone.writes, 1);

    // Two turns: two writes (nothing waits for a later turn).
    const twoTurns = await countWrites(client, async () => {
      const a = client.get(keys[1]);
      await new Promise((resolve) => setImmediate(resolve));
      const b = client.get(keys[2]);
      return Promise.all([a, b]);
    });
    t.same(twoTurns.value, ['v1', 'v2']);
    t.equal(twoTurns.writes, 2, 'commands of two turns: two writes');

    // A new connection coalesces too.
    if (target.name === 'standalone') {
      const reconnected = new Promise((resolve) => client.once('ready', resolve));
      (client as Redis).disconnect(true);
      await reconnected;
      const again = await countWrites(client, sendAll);
      t.equal(again.writes, 1, 'after reconnecting: one write');
      t.same(again.value, Array(20).fill('OK'));
    }
    await client.del(...keys);
  });
}
