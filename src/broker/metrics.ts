import type { Regions } from './regions.ts';
import type { SubscriptionRecord } from './records.ts';

export interface RegionBacklog {
  subscription: string;
  /** '' in a deployment without regions. */
  region: string;
  unacked: number;
}

/**
 * Every subscription's un-acked messages in every usable region, read without a script (a
 * gauge may be a moment stale). Unordered: the ready list, the delayed set (retry backoffs, and
 * messages scheduled for later: a run entry stands for its config's inRuns more), the leases and the forwarding set (on its way to the dead-letter topic). Ordered: keyed
 * messages all live in `keyed`, so they are counted there, and taken out of the ready list and
 * the delayed set (one `k:` marker per queued key) and of the leases and the forwarding set
 * (each busy key's outstanding count).
 */
export async function backlogByRegion(regions: Regions): Promise<RegionBacklog[]> {
  const { redis, keys } = regions.requireLocal().ctx;
  const records = Object.values(await redis.hgetall(keys.subscriptions))
    .map((json) => JSON.parse(json) as SubscriptionRecord)
    .sort((a, b) => (a.name < b.name ? -1 : 1));
  const backlog: RegionBacklog[] = [];
  for (const region of regions.localFirst()) {
    const { redis: regionRedis, keys: regionKeys } = region.ctx;
    const counts = await Promise.all(
      records.map(async (record) => {
        const sub = regionKeys.topicData(record.topicUid).subscription(record.uid);
        const [ready, delayedEntries, inRuns, leased, forwarding] = await Promise.all([
          regionRedis.llen(sub.ready),
          regionRedis.zcard(sub.delayed),
          regionRedis.hget(sub.config, 'inRuns'),
          regionRedis.zcard(sub.leased),
          regionRedis.zcard(sub.forwarding),
        ]);
        const delayed = delayedEntries + Number(inRuns ?? 0);
        if (!record.enableMessageOrdering) return ready + delayed + leased + forwarding;
        const [keyed, keyStates] = await Promise.all([regionRedis.zcard(sub.keyed), regionRedis.hvals(sub.keyStates)]);
        const queuedKeys = keyStates.filter((state) => state === 'q').length;
        const outstandingKeyed = keyStates.reduce((sum, state) => sum + (state === 'q' ? 0 : Number(state)), 0);
        return ready + delayed - queuedKeys + leased + forwarding - outstandingKeyed + keyed;
      }),
    );
    records.forEach((record, i) => {
      backlog.push({ subscription: record.name, region: region.name, unacked: counts[i] });
    });
  }
  return backlog;
}
