import { countBacklog } from '../redis/calls/backlog.ts';
import type { Regions } from './regions.ts';
import type { SubscriptionRecord } from './records.ts';

export interface RegionBacklog {
  subscription: string;
  /** '' in a deployment without regions. */
  region: string;
  unacked: number;
}

/**
 * Every subscription's un-acked messages in every usable region: count-backlog.lua, the count
 * the backlog view gives (BacklogService.counts); 0 where a subscription is not attached.
 */
export async function backlogByRegion(regions: Regions): Promise<RegionBacklog[]> {
  const { redis, keys } = regions.requireLocal().ctx;
  const records = Object.values(await redis.hgetall(keys.subscriptions))
    .map((json) => JSON.parse(json) as SubscriptionRecord)
    .sort((a, b) => (a.name < b.name ? -1 : 1));
  const backlog: RegionBacklog[] = [];
  for (const region of regions.localFirst()) {
    const { scripts, keys: regionKeys, clock } = region.ctx;
    const counts = await Promise.all(
      records.map(async (record) => {
        const data = regionKeys.topicData(record.topicUid);
        const counted = await countBacklog(scripts, data, data.subscription(record.uid), clock.scriptTime());
        return counted.kind === 'counted' ? counted.unacked : 0;
      }),
    );
    records.forEach((record, i) => {
      backlog.push({ subscription: record.name, region: region.name, unacked: counts[i] });
    });
  }
  return backlog;
}
