import { claimStorageFormat } from '../redis/storage-format.ts';
import type { Region } from './regions.ts';

/** How long to wait before checking again a store that could not be read. */
const RETRY_MS = 1_000;

/**
 * Keeps a region out of use (Region.storageChecked) until its store is known to be in this
 * broker's storage format: a broker must not serve a store laid out by another version
 * (src/redis/storage-format.ts). The check runs as soon as the region's Redis is connected, and
 * is retried while it fails (Redis unreachable, say); `refuse` hears of a store this broker must
 * not serve, which then stays out of use. After a reconnect the store is checked again (a Redis
 * swapped for another one behind a running broker), without holding requests back meanwhile.
 *
 * Resolves once the first check has ended, or after `firstWaitMs` if it has not (the region then
 * stays out of use until it has). Returns the function that stops the guard.
 */
export async function guardStorageFormat(region: Region, refuse: (problem: string) => void, firstWaitMs: number): Promise<() => void> {
  const { redis, keys } = region.ctx;
  let stopped = false;
  let retry: NodeJS.Timeout | undefined;
  let firstCheckEnded = () => {};
  const firstCheck = new Promise<void>((resolve) => (firstCheckEnded = resolve));
  const check = async (): Promise<void> => {
    clearTimeout(retry);
    try {
      const problem = await claimStorageFormat(redis, keys);
      if (stopped) return;
      if (problem) refuse(problem);
      else region.storageChecked = true;
      firstCheckEnded();
    } catch {
      // Not connected any more: the next 'ready' checks again.
      if (!stopped && redis.status === 'ready') retry = setTimeout(() => void check(), RETRY_MS).unref();
    }
  };
  const onReady = () => void check();
  redis.on('ready', onReady);
  if (redis.status === 'ready') void check();
  let waited: NodeJS.Timeout | undefined;
  await Promise.race([firstCheck, new Promise((resolve) => (waited = setTimeout(resolve, firstWaitMs)))]);
  clearTimeout(waited);
  return () => {
    stopped = true;
    clearTimeout(retry);
    redis.off('ready', onReady);
  };
}
