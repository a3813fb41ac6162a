import { claimStorageFormat } from '../redis/storage-format.ts';
import type { Region } from './regions.ts';

/** How long to wait before checking again a store that could not be read. */
const RETRY_MS = 1_000;
/** A check that keeps failing is logged at most this often. */
const FAILURE_LOG_INTERVAL_MS = 60_000;

export interface StorageGuardOptions {
  /** Hears of a store this broker must not serve: the region stays out of use. */
  refuse: (problem: string, region: Region) => void;
  /** Called each time the store was found fit (say, to sync the control plane into it). */
  checked?: () => void;
  /** Hears why a check failed (Redis unreachable, say), at most once a minute. */
  log: (message: string) => void;
  /** How long the first call waits for Redis to connect and the check to end. */
  firstWaitMs: number;
}

/**
 * Keeps a region out of use (Region.storageChecked) until its store is known to be in this
 * broker's storage format: a broker must not serve a store laid out by another version
 * (src/redis/storage-format.ts). The check runs as soon as the region's Redis is connected, and
 * is retried while it fails. After a reconnect the store is checked again (a Redis swapped for
 * another one behind a running broker), without holding requests back meanwhile; a refusal then
 * takes the region out of use.
 *
 * Resolves once the first check has ended, or after `firstWaitMs` if it has not (the region then
 * stays out of use until it has). Returns the function that stops the guard.
 */
export async function guardStorageFormat(region: Region, options: StorageGuardOptions): Promise<() => void> {
  const { redis, keys, scripts } = region.ctx;
  let stopped = false;
  let retry: NodeJS.Timeout | undefined;
  let loggedAt = -Infinity;
  let firstCheckEnded = () => {};
  const firstCheck = new Promise<void>((resolve) => (firstCheckEnded = resolve));
  const check = async (): Promise<void> => {
    clearTimeout(retry);
    try {
      const problem = await claimStorageFormat(redis, keys, scripts);
      if (stopped) return;
      region.storageChecked = problem === undefined;
      if (problem) options.refuse(problem, region);
      else options.checked?.();
      firstCheckEnded();
    } catch (error) {
      if (stopped) return;
      if (performance.now() - loggedAt >= FAILURE_LOG_INTERVAL_MS) {
        loggedAt = performance.now();
        options.log(
          `storage format check of region ${region.name || '(default)'} failed, retrying: ${(error as Error).message}`,
        );
      }
      // Not connected any more: the next 'ready' checks again.
      if (redis.status === 'ready') retry = setTimeout(() => void check(), RETRY_MS).unref();
    }
  };
  const onReady = () => void check();
  redis.on('ready', onReady);
  if (redis.status === 'ready') void check();
  let waited: NodeJS.Timeout | undefined;
  await Promise.race([firstCheck, new Promise((resolve) => (waited = setTimeout(resolve, options.firstWaitMs)))]);
  clearTimeout(waited);
  return () => {
    stopped = true;
    clearTimeout(retry);
    redis.off('ready', onReady);
  };
}
