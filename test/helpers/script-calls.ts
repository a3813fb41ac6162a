// Which scripts this process runs while a piece of work runs: the broker runs in the test's own
// process, and every script goes through Scripts.run, runEncoded or runStaged (the wrappers in
// src/redis/calls/), so counting those calls counts the scripts one request costs.

import { type ScriptName, Scripts } from '../../src/redis/scripts.ts';

const RUNNERS = ['run', 'runEncoded', 'runStaged'] as const;

/** What `work` answers, and the names of the scripts run meanwhile, in order. */
export async function scriptsRunBy<T>(work: () => Promise<T>): Promise<{ result: T; scripts: ScriptName[] }> {
  const scripts: ScriptName[] = [];
  const originals = RUNNERS.map((runner) => Scripts.prototype[runner]);
  for (const runner of RUNNERS) {
    const original = Scripts.prototype[runner] as (this: Scripts, name: ScriptName, ...rest: unknown[]) => unknown;
    (Scripts.prototype as unknown as Record<string, unknown>)[runner] = function (
      this: Scripts,
      name: ScriptName,
      ...rest: unknown[]
    ) {
      scripts.push(name);
      return original.call(this, name, ...rest);
    };
  }
  try {
    return { result: await work(), scripts };
  } finally {
    RUNNERS.forEach((runner, i) => {
      (Scripts.prototype as unknown as Record<string, unknown>)[runner] = originals[i];
    });
  }
}
