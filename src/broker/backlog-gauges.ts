import { countBacklog } from '../redis/calls/backlog.ts';
import { resourceId } from './names.ts';
import type { SubscriptionRecord } from './records.ts';
import type { Region, Regions } from './regions.ts';

/** At most this many subscriptions are counted by one script (count-backlog.lua). */
const COUNT_BATCH = 250;

/** A subscription's counts in one region, and the age in seconds of its oldest message there. */
interface RegionCount {
  unacked: number;
  leased: number;
  ageSeconds?: number;
}

/**
 * The global per-subscription gauges of `GET /metrics`, read from Redis at each scrape (the same
 * through every broker process), written in the Prometheus text format: over every region,
 * `num_undelivered_messages`, `num_outstanding_messages` and `oldest_unacked_message_age`
 * (seconds; absent with nothing unacknowledged), and with regions, per region (`region`),
 * `num_unacked_messages_by_region` and `oldest_unacked_message_age_by_region`.
 *
 * Not prom-client Gauges: a scrape sets thousands of series afresh, and through prom-client a
 * scrape of 10,000 subscriptions cost ~300 ms of CPU in label hashing and formatting. Here each
 * subscription's label text is escaped once and kept, and a scrape counts the subscriptions of a
 * topic in one script: its cost is a few calls per topic and one line per series.
 */
export class BacklogGauges {
  /** Subscription records as last read, by name: a record whose JSON did not change is not parsed again. */
  private records = new Map<string, { json: string; record: SubscriptionRecord; labels: string }>();

  constructor(private readonly regions: Regions) {}

  /** The gauges' text, read now. */
  async text(): Promise<string> {
    const subscriptions = await this.subscriptions();
    const records = subscriptions.map((s) => s.record);
    const byRegion = await Promise.all(
      this.regions.localFirst().map(async (region) => ({ region, counts: await countAll(region, records) })),
    );
    const perRegion = this.regions.multiRegion; // without regions it would repeat the totals
    const undelivered = new GaugeText(
      'num_undelivered_messages',
      'Messages not yet acknowledged, over every region (global).',
    );
    const outstanding = new GaugeText(
      'num_outstanding_messages',
      'Messages leased to a subscriber and not yet acknowledged (global).',
    );
    const oldest = new GaugeText(
      'oldest_unacked_message_age',
      'Age in seconds of the oldest unacknowledged message, over every region (global; absent with none).',
    );
    const unackedByRegion = new GaugeText(
      'num_unacked_messages_by_region',
      'Messages not yet acknowledged, by the region that stores them (global).',
    );
    const oldestByRegion = new GaugeText(
      'oldest_unacked_message_age_by_region',
      'Age in seconds of the oldest unacknowledged message stored in the region (global; absent with none).',
    );
    subscriptions.forEach(({ labels }, i) => {
      let unacked = 0;
      let leased = 0;
      let oldestAge: number | undefined;
      for (const { region, counts } of byRegion) {
        // Not attached in the region (detached, or its topic deleted there first): nothing there.
        const counted = counts[i] ?? { unacked: 0, leased: 0 };
        unacked += counted.unacked;
        leased += counted.leased;
        const regionLabels = perRegion ? `${labels},region="${escapeLabelValue(region.name)}"` : '';
        if (perRegion) unackedByRegion.add(regionLabels, counted.unacked);
        if (counted.ageSeconds === undefined) continue;
        if (perRegion) oldestByRegion.add(regionLabels, counted.ageSeconds);
        oldestAge = Math.max(oldestAge ?? 0, counted.ageSeconds);
      }
      undelivered.add(labels, unacked);
      outstanding.add(labels, leased);
      if (oldestAge !== undefined) oldest.add(labels, oldestAge);
    });
    const written = [undelivered, outstanding, oldest, ...(perRegion ? [unackedByRegion, oldestByRegion] : [])];
    return written.map((gauge) => gauge.text()).join('');
  }

  /** Every subscription record (a detached one too: it shows an empty backlog), and its label text. */
  private async subscriptions() {
    const { redis, keys } = this.regions.requireLocal().ctx;
    const read = new Map<string, { json: string; record: SubscriptionRecord; labels: string }>();
    for (const [name, json] of Object.entries(await redis.hgetall(keys.subscriptions))) {
      const known = this.records.get(name);
      if (known?.json === json) {
        read.set(name, known);
        continue;
      }
      const record = JSON.parse(json) as SubscriptionRecord;
      read.set(name, { json, record, labels: labelText(record) });
    }
    this.records = read;
    return [...read.values()];
  }
}

/** One gauge's lines in the text format. */
class GaugeText {
  private readonly name: string;
  private readonly lines: string[];

  constructor(name: string, help: string) {
    this.name = `pubsub_subscription_${name}`;
    this.lines = [`# HELP ${this.name} ${help}\n# TYPE ${this.name} gauge\n`];
  }

  add(labels: string, value: number): void {
    this.lines.push(`${this.name}{${labels}} ${value}\n`);
  }

  text(): string {
    return this.lines.join('');
  }
}

/** `project="p",subscription="s",topic="t"`: the IDs of the subscription's name and topic. */
function labelText(record: SubscriptionRecord): string {
  const project = record.name.split('/')[1];
  return `project="${escapeLabelValue(project)}",subscription="${escapeLabelValue(resourceId(record.name))}",topic="${escapeLabelValue(resourceId(record.topic))}"`;
}

/** A label value in the text format: backslash, double quote and line feed escaped. */
function escapeLabelValue(value: string): string {
  return value.replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : `\\${c}`));
}

/**
 * Each subscription's counts in one region (undefined where it is not attached), one script per
 * topic incarnation (per COUNT_BATCH of its subscriptions).
 */
async function countAll(region: Region, records: SubscriptionRecord[]): Promise<(RegionCount | undefined)[]> {
  const { scripts, keys, clock } = region.ctx;
  const byTopic = new Map<string, number[]>();
  records.forEach((record, i) => {
    const indexes = byTopic.get(record.topicUid);
    if (indexes) indexes.push(i);
    else byTopic.set(record.topicUid, [i]);
  });
  const counts: (RegionCount | undefined)[] = new Array(records.length);
  const batches: Promise<void>[] = [];
  for (const [topicUid, indexes] of byTopic) {
    const data = keys.topicData(topicUid);
    for (let at = 0; at < indexes.length; at += COUNT_BATCH) {
      const batch = indexes.slice(at, at + COUNT_BATCH);
      const subs = batch.map((i) => data.subscription(records[i].uid));
      batches.push(
        countBacklog(scripts, data, subs, clock.scriptTime()).then(({ nowUs, counts: found }) => {
          found.forEach((counted, j) => {
            if (counted === 'no-subscription') return;
            const ageSeconds = counted.oldestUs === undefined ? undefined : Math.max(0, nowUs - counted.oldestUs) / 1e6;
            counts[batch[j]] = { unacked: counted.unacked, leased: counted.leased, ageSeconds };
          });
        }),
      );
    }
  }
  await Promise.all(batches);
  return counts;
}
