// Which scripts this process runs while a piece of work runs: the broker runs in the test's own
// process, and every script goes through Scripts.run, runForBuffers, runEncoded or runStaged
// (the wrappers in src/redis/calls/), so counting those calls counts the scripts one request
// costs.

import { type ScriptName, Scripts } from '../../src/redis/scripts.ts';

const RUNNERS = ['run', 'runForBuffers', 'runEncoded', 'runStaged'] as const;

/** What `work` answers, and the names of the scripts run meanwhile, in order. */
export async function scriptsRunBy<T>(work: () => Promise<T>): Promise<{ result: T; scripts: ScriptName[] }> {
  const watch = watchScripts();
  try {
    return { result: await work(), scripts: watch.scripts };
  } finally {
    watch.stop();
  }
}

/** The names of the scripts run from now on, in order, as they run, until `stop`. */
export function watchScripts(): { scripts: ScriptName[]; stop(): void } {
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
  const stop = () => {
    RUNNERS.forEach((runner, i) => {
      (Scripts.prototype as unknown as Record<string, unknown>)[runner] = originals[i];
    });
  };
  return { scripts, stop };
}
