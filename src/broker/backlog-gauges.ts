import { countBacklog } from '../redis/calls/backlog.ts';
import { resourceId } from './names.ts';
import type { SubscriptionRecord } from './records.ts';
import type { KnownSubscription, SubscriptionRecords } from './subscription-records.ts';
import type { Region, Regions } from './regions.ts';

/** At most this many subscriptions are counted by one script (count-backlog.lua). */
const COUNT_BATCH = 250;

/** The gauges over every region: each subscription's line of each is begun once (SubscriptionLines). */
const UNDELIVERED = gauge('num_undelivered_messages', 'Messages not yet acknowledged, over every region (global).');
const OUTSTANDING = gauge(
  'num_outstanding_messages',
  'Messages leased to a subscriber and not yet acknowledged (global).',
);
const OLDEST = gauge(
  'oldest_unacked_message_age',
  'Age in seconds of the oldest unacknowledged message, over every region (global; absent with none).',
);
/** The gauges by region (only with regions). */
const UNACKED_BY_REGION = gauge(
  'num_unacked_messages_by_region',
  'Messages not yet acknowledged, by the region that stores them (global).',
);
const OLDEST_BY_REGION = gauge(
  'oldest_unacked_message_age_by_region',
  'Age in seconds of the oldest unacknowledged message stored in the region (global; absent with none).',
);

/**
 * The global per-subscription gauges of `GET /metrics`, read from Redis at each scrape (the same
 * through every broker process), written in the Prometheus text format: over every region,
 * `num_undelivered_messages`, `num_outstanding_messages` and `oldest_unacked_message_age`
 * (seconds; absent with nothing unacknowledged), and with regions, per region (`region`),
 * `num_unacked_messages_by_region` and `oldest_unacked_message_age_by_region`.
 *
 * Not prom-client Gauges: a scrape sets thousands of series afresh, and through prom-client a
 * scrape of 10,000 subscriptions cost ~300 ms of CPU in label hashing and formatting. Here the
 * subscription records come from this process's copy (subscription-records.ts, one GET while
 * none changed), each subscription's lines are begun (name and escaped labels) once per version
 * of its record, the scripts that count them and their keys are laid out once per change of the
 * records, and a scrape counts a topic's subscriptions in one script (COUNT_BATCH at most, each
 * passed as one key prefix): its cost is a few calls per topic and the end of one line per series.
 */
export class BacklogGauges {
  /** How the last listing's subscriptions are counted and written: kept while the listing is. */
  private layout?: { byName: ReadonlyMap<string, KnownSubscription>; layout: CountLayout };
  /** Each record's lines, begun once per version of the record. */
  private lines = new WeakMap<KnownSubscription, SubscriptionLines>();

  constructor(
    private readonly regions: Regions,
    private readonly records: SubscriptionRecords,
  ) {}

  /** The gauges' text, read now, in pieces of at most TEXT_PIECE_LINES lines. */
  async text(): Promise<string[]> {
    const { byName } = await this.records.read(this.regions.requireLocal());
    if (this.layout?.byName !== byName) this.layout = { byName, layout: this.layoutOf(byName) };
    const { layout } = this.layout;
    const byRegion = await Promise.all(
      this.regions.localFirst().map(async (region) => ({ region, counts: await countAll(region, layout) })),
    );
    const undelivered = new PiecedText(UNDELIVERED.header);
    const outstanding = new PiecedText(OUTSTANDING.header);
    const oldest = new PiecedText(OLDEST.header);
    layout.subscriptions.forEach((lines, i) => {
      let unacked = 0;
      let leased = 0;
      let oldestAge = -1;
      for (const { counts } of byRegion) {
        // Not attached in the region (detached, or its topic deleted there first): nothing there.
        if (!counts.attached[i]) continue;
        unacked += counts.unacked[i];
        leased += counts.leased[i];
        if (counts.ageSeconds[i] > oldestAge) oldestAge = counts.ageSeconds[i];
      }
      undelivered.add(`${lines.undelivered}${unacked}\n`);
      outstanding.add(`${lines.outstanding}${leased}\n`);
      if (oldestAge >= 0) oldest.add(`${lines.oldest}${oldestAge}\n`);
    });
    // Without regions the gauges by region would repeat the totals.
    const written = [undelivered, outstanding, oldest];
    if (!this.regions.multiRegion) return written.flatMap((gauge) => gauge.pieces());
    const unackedByRegion = new PiecedText(UNACKED_BY_REGION.header);
    const oldestByRegion = new PiecedText(OLDEST_BY_REGION.header);
    layout.subscriptions.forEach(({ labels }, i) => {
      for (const { region, counts } of byRegion) {
        const regionLabels = `${labels},region="${escapeLabelValue(region.name)}"`;
        unackedByRegion.add(`${UNACKED_BY_REGION.name}{${regionLabels}} ${counts.unacked[i]}\n`);
        if (counts.ageSeconds[i] >= 0) {
          oldestByRegion.add(`${OLDEST_BY_REGION.name}{${regionLabels}} ${counts.ageSeconds[i]}\n`);
        }
      }
    });
    return [...written, unackedByRegion, oldestByRegion].flatMap((gauge) => gauge.pieces());
  }

  /**
   * The subscriptions (a detached one too: it shows an empty backlog) in the order they are
   * counted and written, a topic incarnation's together, and the scripts that count them.
   */
  private layoutOf(byName: ReadonlyMap<string, KnownSubscription>): CountLayout {
    const byTopic = new Map<string, KnownSubscription[]>();
    for (const known of byName.values()) {
      const same = byTopic.get(known.record.topicUid);
      if (same) same.push(known);
      else byTopic.set(known.record.topicUid, [known]);
    }
    const kept = new WeakMap<KnownSubscription, SubscriptionLines>();
    const subscriptions: SubscriptionLines[] = [];
    const batches: CountBatch[] = [];
    for (const [topicUid, members] of byTopic) {
      for (let at = 0; at < members.length; at += COUNT_BATCH) {
        const batch = members.slice(at, at + COUNT_BATCH);
        batches.push({ topicUid, first: subscriptions.length, uids: batch.map((known) => known.record.uid) });
        for (const known of batch) {
          const lines = this.lines.get(known) ?? subscriptionLines(known.record);
          kept.set(known, lines);
          subscriptions.push(lines);
        }
      }
    }
    this.lines = kept;
    return { subscriptions, batches, prefixes: new WeakMap() };
  }
}

/** A subscription's label text, and the start of its line of each gauge over every region: name, labels and a space. */
interface SubscriptionLines {
  labels: string;
  undelivered: string;
  outstanding: string;
  oldest: string;
}

function subscriptionLines(record: SubscriptionRecord): SubscriptionLines {
  const labels = labelText(record);
  const begin = (name: string) => `${name}{${labels}} `;
  return {
    labels,
    undelivered: begin(UNDELIVERED.name),
    outstanding: begin(OUTSTANDING.name),
    oldest: begin(OLDEST.name),
  };
}

/** The subscriptions of one listing, by their lines, in the order the counting scripts take them. */
interface CountLayout {
  subscriptions: SubscriptionLines[];
  batches: CountBatch[];
  /** Each region's key prefixes of each batch, made at the first count there. */
  prefixes: WeakMap<Region, string[][]>;
}

/** The subscriptions `first` … `first + uids.length - 1` of a layout: one topic incarnation's, one script. */
interface CountBatch {
  topicUid: string;
  first: number;
  uids: string[];
}

/**
 * Each subscription's counts in one region, by its place in the layout: attached (0 where it is
 * not), its un-acked and leased messages, and the age in seconds of its oldest message (-1: none).
 */
interface RegionCounts {
  attached: Uint8Array;
  unacked: Float64Array;
  leased: Float64Array;
  ageSeconds: Float64Array;
}

/**
 * A scrape's text is sent in pieces of this many lines (~60 KB): with 10,000 subscriptions it is
 * ~3.6 MB, and strings that large are kept by V8 among its large objects, which only a full
 * collection frees, so that each scrape grew the broker's memory by megabytes until one ran.
 */
const TEXT_PIECE_LINES = 500;

/** One gauge's lines, joined in pieces of TEXT_PIECE_LINES. */
class PiecedText {
  private readonly done: string[] = [];
  private piece: string;
  private lines = 0;

  constructor(header: string) {
    this.piece = header;
  }

  add(line: string): void {
    this.piece += line;
    if (++this.lines % TEXT_PIECE_LINES !== 0) return;
    this.done.push(this.piece);
    this.piece = '';
  }

  pieces(): string[] {
    return this.piece === '' ? this.done : [...this.done, this.piece];
  }
}

/** A gauge's full name, and its HELP and TYPE lines. */
function gauge(name: string, help: string): { name: string; header: string } {
  const full = `pubsub_subscription_${name}`;
  return { name: full, header: `# HELP ${full} ${help}\n# TYPE ${full} gauge\n` };
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

/** Each subscription's counts in one region: one script per topic incarnation (per COUNT_BATCH of its subscriptions). */
async function countAll(region: Region, layout: CountLayout): Promise<RegionCounts> {
  const { scripts, keys, clock } = region.ctx;
  let prefixes = layout.prefixes.get(region);
  if (!prefixes) {
    prefixes = layout.batches.map(({ topicUid, uids }) => {
      const data = keys.topicData(topicUid);
      return uids.map((uid) => data.subscriptionPrefix(uid));
    });
    layout.prefixes.set(region, prefixes);
  }
  const size = layout.subscriptions.length;
  const counts: RegionCounts = {
    attached: new Uint8Array(size),
    unacked: new Float64Array(size),
    leased: new Float64Array(size),
    ageSeconds: new Float64Array(size).fill(-1),
  };
  const time = clock.scriptTime();
  await Promise.all(
    layout.batches.map(async ({ topicUid, first }, b) => {
      const { nowUs, counts: found } = await countBacklog(scripts, keys.topicData(topicUid), prefixes[b], time);
      found.forEach((counted, j) => {
        if (counted === 'no-subscription') return;
        const i = first + j;
        counts.attached[i] = 1;
        counts.unacked[i] = counted.unacked;
        counts.leased[i] = counted.leased;
        if (counted.oldestUs !== undefined) counts.ageSeconds[i] = Math.max(0, nowUs - counted.oldestUs) / 1e6;
      });
    }),
  );
  return counts;
}
