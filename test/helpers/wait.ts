// Polling for tests: check a condition every few milliseconds until it holds or time runs out.

import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Checks `done` every `stepMs` until it holds (resolves true) or `budgetMs` has passed since the
 * call (resolves false, after one last check).
 */
export async function waitUntil(
  done: () => boolean | Promise<boolean>,
  budgetMs: number,
  stepMs = 100,
): Promise<boolean> {
  const giveUpAt = Date.now() + budgetMs;
  for (;;) {
    if (await done()) return true;
    if (Date.now() > giveUpAt) return false;
    await sleep(stepMs);
  }
}
