// Which Redis commands one connection sends while a piece of work runs: every command of ioredis
// (scripts, pipelines, transactions too) goes through its client's sendCommand, so counting
// those calls counts what the broker asks of that Redis. Counted, never timed.

import type { Cluster, Redis } from 'ioredis';

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
