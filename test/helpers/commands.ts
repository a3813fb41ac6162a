// Which Redis commands run while a piece of work runs. countCommands: what one connection sends
// (every command of ioredis, scripts, pipelines and transactions too, goes through its client's
// sendCommand), so what the broker asks of that Redis. countScriptCommands: what the scripts run
// inside Redis. Counted, never timed.

import net from 'node:net';
import type { Cluster, Redis } from 'ioredis';
import type { Test } from 'tap';
import { REDIS_HOST, standalonePort } from '../setup/redis-config.ts';
import type { TestBroker } from './app.ts';

export interface CommandCount {
  /** How many of each command (upper case) were sent since the count began. */
  readonly byName: Map<string, number>;
  of(name: string): number;
  total(): number;
  stop(): void;
}

/** Counts the commands `redis` sends from now on, until `stop`. */
export function countCommands(redis: Redis | Cluster): CommandCount {
  const byName = new Map<string, number>();
  const original = redis.sendCommand;
  redis.sendCommand = function (this: Redis | Cluster, command: { name: string }, ...rest: unknown[]) {
    const name = command.name.toUpperCase();
    byName.set(name, (byName.get(name) ?? 0) + 1);
    return (original as (...args: unknown[]) => unknown).call(this, command, ...rest);
  } as typeof redis.sendCommand;
  return {
    byName,
    of: (name) => byName.get(name.toUpperCase()) ?? 0,
    total: () => [...byName.values()].reduce((sum, n) => sum + n, 0),
    stop: () => {
      redis.sendCommand = original;
    },
  };
}

/**
 * Every command the scripts of `broker` (on the standalone test server) ran during `work`, by
 * name ("HMGET"), or by name and the structure of the first key it names, the last part of the
 * key ("HMGET key-states"): MONITOR shows every command a script runs, and only those naming
 * the broker's keys count.
 */
export async function countScriptCommands(
  t: Test,
  broker: TestBroker,
  work: () => Promise<void>,
  by: 'name' | 'name and structure' = 'name',
): Promise<Map<string, number>> {
  // MONITOR's lines, read off a plain socket ('+<time> [<db> lua] "<command>" "<arg>" ...').
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
      const name =
        by === 'name' ? command[1].toUpperCase() : `${command[1].toUpperCase()} ${command[2].split(':').pop()}`;
      commands.set(name, (commands.get(name) ?? 0) + 1);
    }
  });
  await new Promise<void>((resolve) => monitor.write('MONITOR\r\n', () => resolve()));
  await new Promise((resolve) => monitor.once('data', resolve));
  await work();
  await broker.redis.get(end);
  while (!ended) await new Promise((resolve) => setTimeout(resolve, 10));
  monitor.destroy();
  return commands;
}
