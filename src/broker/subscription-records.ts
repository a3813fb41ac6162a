import type { SubscriptionRecord } from './records.ts';
import type { Region } from './regions.ts';

/** A subscription record, and the JSON it was read from (unchanged JSON: the same object). */
export interface KnownSubscription {
  readonly json: string;
  readonly record: SubscriptionRecord;
}

/** Every subscription record of a region, by full name, as of one count of puts. */
export interface SubscriptionListing {
  /** The region's count of subscription and snapshot puts when it was read (`owner-changes`). */
  readonly changes: number;
  readonly byName: ReadonlyMap<string, KnownSubscription>;
}

/**
 * This process's copy of a region's subscription records, for the passes that read every one of
 * them: the `/metrics` gauges (backlog-gauges.ts), push delivery's listing (push.ts) and the
 * janitor. Every put of a subscription or snapshot state counts itself in `owner-changes`
 * (put-data-owner.lua), so a reading costs one GET while nothing changed, the same in every
 * broker process on the store, and is never older than the call: the count is read before the
 * records, so a put that races the read makes the next call read them again. A changed store is
 * read whole (HGETALL), and only the records whose JSON changed are parsed again.
 */
export class SubscriptionRecords {
  private readonly listings = new WeakMap<Region, SubscriptionListing>();
  private readonly watched = new WeakSet<Region>();
  private readonly recent = new WeakMap<Region, { atMs: number; reading: Promise<SubscriptionListing> }>();

  /** Every subscription record of `region` now (a detached one too). */
  async read(region: Region): Promise<SubscriptionListing> {
    const { redis, keys } = region.ctx;
    const changes = Number((await redis.get(keys.ownerChanges)) ?? 0);
    const known = this.listings.get(region);
    if (known?.changes === changes) return known;
    if (!this.watched.has(region)) {
      // Another Redis behind a reconnect (its count may happen to match): read from scratch.
      this.watched.add(region);
      redis.on('ready', () => this.listings.delete(region));
    }
    const byName = new Map<string, KnownSubscription>();
    for (const [name, json] of Object.entries(await redis.hgetall(keys.subscriptions))) {
      const same = known?.byName.get(name);
      byName.set(name, same?.json === json ? same : { json, record: JSON.parse(json) as SubscriptionRecord });
    }
    const listing = { changes, byName };
    // Two readings at once: the later count stays.
    const latest = this.listings.get(region);
    if (!latest || latest.changes <= changes) this.listings.set(region, listing);
    return listing;
  }

  /**
   * A reading begun at most `maxAgeMs` ago (or under way), else a new one: callers that each look
   * on a timer (every open stream's heartbeat) share one GET per `maxAgeMs` in this process,
   * however many they are. What it says may be that much older than the call.
   */
  readRecent(region: Region, maxAgeMs: number): Promise<SubscriptionListing> {
    const nowMs = Date.now();
    const last = this.recent.get(region);
    if (last && nowMs - last.atMs < maxAgeMs) return last.reading;
    const reading = this.read(region);
    this.recent.set(region, { atMs: nowMs, reading });
    // A failed reading is not handed to later callers.
    reading.catch(() => {
      if (this.recent.get(region)?.reading === reading) this.recent.delete(region);
    });
    return reading;
  }
}
