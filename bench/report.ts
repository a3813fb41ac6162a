/** The end-of-run table, the PASS/FAIL bars, and the JSON results file. */
import fs from 'node:fs';
import path from 'node:path';
import type { MemoryResult, ThroughputResult } from './broker-workloads.ts';
import { SEEK_PHASES, type SeekResult } from './replay-workloads.ts';
import type { LatencySummary } from './stats.ts';

/** CPU seconds each process spent during one workload, and Redis' own command timing. */
export interface PhaseCpu {
  wallSeconds: number;
  brokerCpuSeconds: number;
  redisCpuSeconds: number;
  clientCpuSeconds: number;
  /** Busy CPU of everything else on the machine (other users' tests...): noise if not ~0. */
  otherCpuSeconds: number;
  /** Other processes used more than DISTURBED_SHARE of the machine: the figures are low. */
  disturbed: boolean;
  /** Start and end on the monotonic clock (µs), the clock of V8 .cpuprofile timestamps. */
  monoStartUs?: number;
  monoEndUs?: number;
  /** INFO commandstats over the phase: calls and total microseconds, top commands by time (summed over every Redis of the phase). */
  redisCommands: Record<string, { calls: number; usec: number; usecPerCall: number }>;
  /** A phase on several brokers or Redis servers (regions): CPU seconds of each, by name. */
  cpuByProcess?: Record<string, number>;
}

export interface Bar {
  name: string;
  target: string;
  actual: string;
  status: 'PASS' | 'FAIL' | 'SKIP';
}

export interface BenchResults {
  startedAt: string;
  finishedAt?: string;
  config: Record<string, unknown>;
  environment: Record<string, unknown>;
  workloads: Record<string, ThroughputResult>;
  ratios: Record<string, number | null>;
  memory?: Omit<MemoryResult, 'publish'>;
  replay?: SeekResult;
  broker: {
    entry: string;
    maxRssBytes: number;
    /** RssAnon / RssFile / RssShmem at the maximum. */
    atMaxRss?: { anon: number; file: number; shmem: number };
    rssSamples: number;
    maxRssBytesPerPhase: Record<string, number>;
  };
  redis: { maxRssBytes: number; slowlog?: { usec: number; command: string }[] };
  cpu: Record<string, PhaseCpu>;
  bars: Bar[];
  error?: string;
}

export const KEYS = {
  publish: 'publish (1 sub)',
  publishEo: 'publish (1 exactly-once sub)',
  publish2: 'publish (2 subs)',
  publishFanout: 'publish (10 subs)',
  publishFiltered: 'publish (10 filtered subs, a tenth each)',
  pull: 'pull+ack',
  pullEo: 'pull+ack (exactly-once)',
  pullNoPolicies: 'pull+ack (no policies)',
  pullPolicies: 'pull+ack (dead-letter + retry policy)',
  pullNotRetained: 'pull+ack (acked messages not retained)',
  pullRetained: 'pull+ack (retainAckedMessages)',
  push: 'push to a 204 endpoint, end-to-end',
  bullAdd: 'BullMQ addBulk',
  bullProcess: 'BullMQ Worker process',
  publishOrdered: 'publish (ordered)',
  pullOrdered: 'pull+ack (ordered)',
  publishOrderedEo: 'publish (ordered exactly-once)',
  pullOrderedEo: 'pull+ack (ordered exactly-once)',
  publishFewKeys: 'publish (1,000 keys, 100 each)',
  pullFewKeys: 'pull+ack (1,000 keys, 100 each)',
  publishManyKeys: 'publish (100,000 keys, 1 each)',
  pullManyKeys: 'pull+ack (100,000 keys, 1 each)',
  streamE2e: 'streaming end-to-end',
  streamLatency: 'streaming latency (paced)',
  bullE2e: 'BullMQ end-to-end',
  publishRegions: 'publish (2 regions, split)',
  pullRegions: 'pull+ack (2 regions, via one)',
  clientPublishGrpc: 'publish, official client (gRPC)',
  clientPublishRest: 'publish, official client (REST)',
  clientPublishRaw: 'publish, bench HTTP client (REST)',
  clientReceiveGrpc: 'receive, official client (gRPC StreamingPull)',
  clientReceiveGrpcOpen: 'receive, official client (gRPC, window = backlog)',
  clientReceiveWs: 'receive, src/client (WebSocket)',
  clientPullRaw: 'pull+ack, bench HTTP client (REST)',
  publishNow: 'publish (delivered at once)',
  publishScheduled: 'publish (with a delivery time)',
  publishIdempotent: 'publish (each with an idempotency key)',
  pullNow: 'pull+ack (published for now)',
  pullFallenDue: 'pull+ack (all falling due at one moment)',
  ackThenPublish: 'pull, ack, publish a follow-up each (two calls)',
  ackAndPublish: 'pull, acknowledgeAndPublish (one call)',
  backlogPagesSmall: 'backlog pages of 1,000 (10,000 waiting)',
  backlogPagesLarge: 'backlog pages of 1,000 (large backlog)',
  metricsScrape: 'scrapes of /metrics (10,000 subscriptions)',
  housekeepingPass: 'housekeeping passes (10,000 subscriptions)',
  publishAuthOff: 'publish (no authentication)',
  publishAuthOn: 'publish (bearer token checked)',
  pullAuthOff: 'pull+ack (no authentication)',
  pullAuthOn: 'pull+ack (bearer token checked)',
  streamOne: 'streaming end-to-end (1 stream)',
  streamHundred: 'streaming end-to-end (100 streams)',
  streamMany: 'streaming end-to-end (1,000 streams)',
  longPollOne: 'one-message publish (1 waiting long poll)',
  longPollMany: 'one-message publish (1,000 waiting long polls)',
  smallBare: 'small: bare Fastify route, one EVALSHA',
  smallPublish: 'small: one-message publish',
  smallPull: 'small: pull of up to 5',
  smallModify: 'small: modifyAckDeadline of up to 5',
  smallAck: 'small: acknowledge of up to 5',
} as const;

/** The client comparison's rows: workload key, what it does, which transport and client. */
export const CLIENT_ROWS = [
  { key: KEYS.clientPublishGrpc, what: 'publish', transport: 'gRPC', client: '@google-cloud/pubsub' },
  { key: KEYS.clientPublishRest, what: 'publish', transport: 'REST', client: '@google-cloud/pubsub' },
  { key: KEYS.clientPublishRaw, what: 'publish', transport: 'REST', client: 'bench HTTP client' },
  { key: KEYS.clientReceiveGrpc, what: 'receive+ack', transport: 'gRPC stream', client: '@google-cloud/pubsub' },
  {
    key: KEYS.clientReceiveGrpcOpen,
    what: 'receive+ack',
    transport: 'gRPC stream',
    client: '@google-cloud/pubsub, maxMessages = backlog',
  },
  { key: KEYS.clientReceiveWs, what: 'receive+ack', transport: 'WebSocket', client: 'src/client' },
  { key: KEYS.clientPullRaw, what: 'receive+ack', transport: 'REST pull', client: 'bench HTTP client' },
] as const;

/** The small-requests workload's rows, the floor first. */
const SMALL_ROWS = [KEYS.smallBare, KEYS.smallPublish, KEYS.smallPull, KEYS.smallModify, KEYS.smallAck];

/** CPU microseconds per message of a workload's phase, of the broker or of Redis. */
function usPerMessage(
  results: BenchResults,
  key: string,
  of: 'brokerCpuSeconds' | 'redisCpuSeconds',
): number | undefined {
  const cpu = results.cpu[key];
  const w = results.workloads[key];
  return cpu && w ? (cpu[of] * 1e6) / w.messages : undefined;
}

export const brokerUsPerMessage = (results: BenchResults, key: string) =>
  usPerMessage(results, key, 'brokerCpuSeconds');
const redisUsPerMessage = (results: BenchResults, key: string) => usPerMessage(results, key, 'redisCpuSeconds');

/** What keepMedianRound ranks rounds by. */
const ROUND_FIGURES = {
  brokerUsPerMessage: { of: brokerUsPerMessage, digits: 1 },
  redisUsPerMessage: { of: redisUsPerMessage, digits: 1 },
  msgPerSec: { of: (results: BenchResults, key: string) => rate(results, key), digits: 0 },
} as const;

/**
 * Of a workload measured in several rounds (`key`, then the phases `repeats`), keeps under `key`
 * the round with the median `figure` (broker CPU per message unless told), its throughput and
 * CPU figures, and notes every round's figure. The other rounds' results go; every round's phase
 * stays in the CPU table.
 */
export function keepMedianRound(
  results: BenchResults,
  key: string,
  repeats: string[],
  figure: keyof typeof ROUND_FIGURES = 'brokerUsPerMessage',
): void {
  const { of, digits } = ROUND_FIGURES[figure];
  const rounds = [key, ...repeats].filter((phase) => of(results, phase) !== undefined);
  if (rounds.length === 0) return;
  const ranked = [...rounds].sort((a, b) => of(results, a)! - of(results, b)!);
  const median = ranked[Math.floor((ranked.length - 1) / 2)];
  const perRound = rounds.map((phase) => of(results, phase)!.toFixed(digits)).join(', ');
  const kept = results.workloads[median];
  results.workloads[key] = {
    ...kept,
    workload: key,
    notes: { ...kept.notes, [`${figure}ByRound`]: perRound, keptRound: rounds.indexOf(median) + 1 },
  };
  const first = results.cpu[key];
  results.cpu[key] = results.cpu[median];
  if (first) results.cpu[`${key} (round 1)`] = first;
  for (const phase of repeats) delete results.workloads[phase];
}

/** The latency kind of the streaming latency workload (publish request sent -> message received). */
export const E2E_LATENCY = 'publish->delivery';

/** A phase is "disturbed" when other processes used more than this share of all cores. */
export const DISTURBED_SHARE = 0.1;

const BARS = {
  publish: 40_000,
  pull: 25_000,
  pullEo: 15_000,
  ratio: 3,
  rssBytes: 250 * 1024 * 1024,
  bytesPerMessage: 1.5 * 1024,
  orderedShare: 0.5,
  streamE2e: 20_000,
  streamP99Ms: 50,
  streamRatio: 4,
  regionsShare: 0.7,
  grpcCpuShare: 1.5,
  manyKeysRedisCpu: 1.3,
  filteredShare: 1,
  grpcReceive: 15_000,
  policiesShare: 0.9,
  authShare: 0.9,
  retainedShare: 0.85,
  push: 10_000,
  scheduledPublishShare: 0.8,
  idempotentPublishShare: 0.7,
  backlogPageGrowth: 1.5,
  fallenDueShare: 0.5,
  scrapeCpuMs: 100,
  scrapeRssGrowthBytes: 10 * 1024 * 1024,
  manyStreamsShare: 0.9,
  manyStreamsCpuShare: 1.2,
  scriptsPerWakeup: 2,
  manyWaitersArrival: 2,
  smallPublishShare: 0.7,
};

const rate = (results: BenchResults, key: string) => results.workloads[key]?.msgPerSec;
const ratio = (a?: number, b?: number) =>
  a !== undefined && b !== undefined && b > 0 ? Math.round((a / b) * 100) / 100 : null;

export function computeRatios(results: BenchResults): void {
  const add = rate(results, KEYS.bullAdd);
  const processRate = rate(results, KEYS.bullProcess);
  const ratioOfRates = (key: string, baseline: string) => ratio(rate(results, key), rate(results, baseline));
  results.ratios = {
    'publish / BullMQ add': ratio(rate(results, KEYS.publish), add),
    'pull+ack / BullMQ process': ratio(rate(results, KEYS.pull), processRate),
    'exactly-once pull+ack / BullMQ process': ratio(rate(results, KEYS.pullEo), processRate),
    'ordered pull+ack / pull+ack': ratio(rate(results, KEYS.pullOrdered), rate(results, KEYS.pull)),
    'ordered exactly-once pull+ack / exactly-once pull+ack': ratio(
      rate(results, KEYS.pullOrderedEo),
      rate(results, KEYS.pullEo),
    ),
    'streaming end-to-end / BullMQ end-to-end': ratio(rate(results, KEYS.streamE2e), rate(results, KEYS.bullE2e)),
    'publish (2 regions) / publish (1 sub)': ratio(rate(results, KEYS.publishRegions), rate(results, KEYS.publish)),
    'pull+ack (2 regions) / pull+ack': ratio(rate(results, KEYS.pullRegions), rate(results, KEYS.pull)),
    'pull+ack with policies / without': ratio(rate(results, KEYS.pullPolicies), rate(results, KEYS.pullNoPolicies)),
    'publish with token authentication / without': ratioOfRates(KEYS.publishAuthOn, KEYS.publishAuthOff),
    'pull+ack with token authentication / without': ratioOfRates(KEYS.pullAuthOn, KEYS.pullAuthOff),
    'publish with a delivery time / without': ratio(
      rate(results, KEYS.publishScheduled),
      rate(results, KEYS.publishNow),
    ),
    'backlog page p50, large / 10,000 waiting': ratio(
      results.workloads[KEYS.backlogPagesLarge]?.latency.page?.p50Ms,
      results.workloads[KEYS.backlogPagesSmall]?.latency.page?.p50Ms,
    ),
    'publish with idempotency keys / without': ratio(
      rate(results, KEYS.publishIdempotent),
      rate(results, KEYS.publishNow),
    ),
    'acknowledgeAndPublish / ack + publish': ratio(
      rate(results, KEYS.ackAndPublish),
      rate(results, KEYS.ackThenPublish),
    ),
    'pull+ack fallen due at once / published for now': ratio(
      rate(results, KEYS.pullFallenDue),
      rate(results, KEYS.pullNow),
    ),
    'pull+ack retaining acked messages / not': ratio(
      rate(results, KEYS.pullRetained),
      rate(results, KEYS.pullNotRetained),
    ),
    'filtered fan-out publish / fan-out publish': ratio(
      rate(results, KEYS.publishFiltered),
      rate(results, KEYS.publishFanout),
    ),
    'streaming, 1,000 streams / 1 stream': ratioOfRates(KEYS.streamMany, KEYS.streamOne),
    'broker CPU per streamed message, 1,000 streams / 1 stream': ratio(
      brokerUsPerMessage(results, KEYS.streamMany),
      brokerUsPerMessage(results, KEYS.streamOne),
    ),
    'publish->arrival p50, 1,000 waiting long polls / 1': ratio(
      results.workloads[KEYS.longPollMany]?.latency['publish->arrival']?.p50Ms,
      results.workloads[KEYS.longPollOne]?.latency['publish->arrival']?.p50Ms,
    ),
    'Redis CPU per ordered message, 100,000 keys / 1,000 keys': ratio(
      redisUsPerMessage(results, KEYS.pullManyKeys),
      redisUsPerMessage(results, KEYS.pullFewKeys),
    ),
    'one-message publish / bare Fastify route': ratioOfRates(KEYS.smallPublish, KEYS.smallBare),
    'broker CPU per streamed message, gRPC / WebSocket': ratio(
      brokerUsPerMessage(results, KEYS.clientReceiveGrpc),
      brokerUsPerMessage(results, KEYS.clientReceiveWs),
    ),
  };
}

export function computeBars(results: BenchResults): void {
  const bars: Bar[] = [];
  const fmtRate = (n: number) => `${Math.round(n).toLocaleString('en-US')} msg/s`;
  // " !" after a figure: a phase it comes from was disturbed by other processes.
  const mark = (phases: string[]) => (phases.some((phase) => results.cpu[phase]?.disturbed) ? ' !' : '');
  const atLeast = (
    name: string,
    value: number | undefined | null,
    target: number,
    show: (n: number) => string,
    phases: string[] = [],
  ) => {
    const targetText = `>= ${show(target)}`;
    if (value === undefined || value === null) bars.push({ name, target: targetText, actual: '-', status: 'SKIP' });
    else
      bars.push({
        name,
        target: targetText,
        actual: show(value) + mark(phases),
        status: value >= target ? 'PASS' : 'FAIL',
      });
  };
  const below = (
    name: string,
    value: number | undefined,
    target: number,
    show: (n: number) => string,
    orEqual = false,
    phases: string[] = [],
  ) => {
    const targetText = `${orEqual ? '<=' : '<'} ${show(target)}`;
    if (value === undefined || !Number.isFinite(value))
      bars.push({ name, target: targetText, actual: '-', status: 'SKIP' });
    else
      bars.push({
        name,
        target: targetText,
        actual: show(value) + mark(phases),
        status: value < target || (orEqual && value === target) ? 'PASS' : 'FAIL',
      });
  };
  const times = (n: number) => `${n.toFixed(2)}x`;
  atLeast('publish throughput (1 sub)', rate(results, KEYS.publish), BARS.publish, fmtRate, [KEYS.publish]);
  atLeast('publish vs BullMQ addBulk', results.ratios['publish / BullMQ add'], BARS.ratio, times, [
    KEYS.publish,
    KEYS.bullAdd,
  ]);
  atLeast('pull+ack throughput', rate(results, KEYS.pull), BARS.pull, fmtRate, [KEYS.pull]);
  atLeast('pull+ack vs BullMQ process', results.ratios['pull+ack / BullMQ process'], BARS.ratio, times, [
    KEYS.pull,
    KEYS.bullProcess,
  ]);
  atLeast('exactly-once pull+ack throughput', rate(results, KEYS.pullEo), BARS.pullEo, fmtRate, [KEYS.pullEo]);
  atLeast(
    'exactly-once pull+ack vs BullMQ process',
    results.ratios['exactly-once pull+ack / BullMQ process'],
    BARS.ratio,
    times,
    [KEYS.pullEo, KEYS.bullProcess],
  );
  atLeast(
    'ordered pull+ack vs unordered pull+ack',
    results.ratios['ordered pull+ack / pull+ack'],
    BARS.orderedShare,
    times,
    [KEYS.pullOrdered, KEYS.pull],
  );
  atLeast(
    'ordered exactly-once pull+ack vs exactly-once pull+ack',
    results.ratios['ordered exactly-once pull+ack / exactly-once pull+ack'],
    BARS.orderedShare,
    times,
    [KEYS.pullOrderedEo, KEYS.pullEo],
  );
  below(
    'Redis CPU per ordered pull+ack message, 100,000 keys vs 1,000 keys',
    results.ratios['Redis CPU per ordered message, 100,000 keys / 1,000 keys'] ?? undefined,
    BARS.manyKeysRedisCpu,
    times,
    true,
    [KEYS.pullManyKeys, KEYS.pullFewKeys],
  );
  atLeast('streaming end-to-end throughput', rate(results, KEYS.streamE2e), BARS.streamE2e, fmtRate, [KEYS.streamE2e]);
  const paced = results.workloads[KEYS.streamLatency];
  const pacedRate = Number(paced?.notes?.targetMsgPerSec ?? 5000).toLocaleString('en-US');
  below(
    `streaming p99 publish->delivery at ${pacedRate} msg/s`,
    paced?.latency[E2E_LATENCY]?.p99Ms,
    BARS.streamP99Ms,
    (n) => `${n.toFixed(2)} ms`,
    true,
    [KEYS.streamLatency],
  );
  atLeast(
    'streaming end-to-end vs BullMQ end-to-end',
    results.ratios['streaming end-to-end / BullMQ end-to-end'],
    BARS.streamRatio,
    times,
    [KEYS.streamE2e, KEYS.bullE2e],
  );
  atLeast(
    'pull+ack, 2 regions (all via one) vs single region',
    results.ratios['pull+ack (2 regions) / pull+ack'],
    BARS.regionsShare,
    times,
    [KEYS.pullRegions, KEYS.pull],
  );
  atLeast(
    'publish, 10 filtered subs (a tenth each) vs 10 unfiltered',
    results.ratios['filtered fan-out publish / fan-out publish'],
    BARS.filteredShare,
    times,
    [KEYS.publishFiltered, KEYS.publishFanout],
  );
  atLeast(
    'publish with a delivery time vs without',
    results.ratios['publish with a delivery time / without'],
    BARS.scheduledPublishShare,
    times,
    [KEYS.publishScheduled, KEYS.publishNow],
  );
  below(
    'backlog page of 1,000: large backlog vs 10,000 (p50)',
    results.ratios['backlog page p50, large / 10,000 waiting'] ?? undefined,
    BARS.backlogPageGrowth,
    times,
    true,
    [KEYS.backlogPagesLarge, KEYS.backlogPagesSmall],
  );
  atLeast(
    'publish with an idempotency key per message vs without',
    results.ratios['publish with idempotency keys / without'],
    BARS.idempotentPublishShare,
    times,
    [KEYS.publishIdempotent, KEYS.publishNow],
  );
  atLeast(
    'pull+ack of messages falling due at one moment vs published for now',
    results.ratios['pull+ack fallen due at once / published for now'],
    BARS.fallenDueShare,
    times,
    [KEYS.pullFallenDue, KEYS.pullNow],
  );
  const scrapes = results.workloads[KEYS.metricsScrape];
  const scrapesCpu = results.cpu[KEYS.metricsScrape];
  below(
    'broker CPU per /metrics scrape, 10,000 subscriptions',
    scrapes && scrapesCpu ? (scrapesCpu.brokerCpuSeconds / scrapes.messages) * 1000 : undefined,
    BARS.scrapeCpuMs,
    (n) => `${n.toFixed(0)} ms`,
    true,
    [KEYS.metricsScrape],
  );
  below(
    'broker RSS growth over ten scrapes in a row',
    scrapes ? Number(scrapes.notes?.rssGrowthBytes) : undefined,
    BARS.scrapeRssGrowthBytes,
    (n) => `${(n / 2 ** 20).toFixed(1)} MiB`,
    false,
    [KEYS.metricsScrape],
  );
  atLeast(
    'publish with token authentication vs without',
    results.ratios['publish with token authentication / without'],
    BARS.authShare,
    times,
    [KEYS.publishAuthOn, KEYS.publishAuthOff],
  );
  atLeast(
    'pull+ack with token authentication vs without',
    results.ratios['pull+ack with token authentication / without'],
    BARS.authShare,
    times,
    [KEYS.pullAuthOn, KEYS.pullAuthOff],
  );
  atLeast(
    'pull+ack, dead-letter + retry policy vs none',
    results.ratios['pull+ack with policies / without'],
    BARS.policiesShare,
    times,
    [KEYS.pullPolicies, KEYS.pullNoPolicies],
  );
  atLeast(
    'pull+ack, retainAckedMessages vs not',
    results.ratios['pull+ack retaining acked messages / not'],
    BARS.retainedShare,
    times,
    [KEYS.pullRetained, KEYS.pullNotRetained],
  );
  below(
    'Redis bytes per retained acked message vs per unacked one',
    results.replay && results.replay.bytesPerRetainedAcked / results.replay.bytesPerUnacked,
    1,
    times,
    true,
  );
  atLeast(
    'streaming end-to-end, 1,000 streams vs 1',
    results.ratios['streaming, 1,000 streams / 1 stream'],
    BARS.manyStreamsShare,
    times,
    [KEYS.streamMany, KEYS.streamOne],
  );
  below(
    'broker CPU per streamed message, 1,000 streams vs 1',
    results.ratios['broker CPU per streamed message, 1,000 streams / 1 stream'] ?? undefined,
    BARS.manyStreamsCpuShare,
    times,
    true,
    [KEYS.streamMany, KEYS.streamOne],
  );
  below(
    'scripts per one-message publish, 1,000 waiting long polls',
    results.workloads[KEYS.longPollMany] && Number(results.workloads[KEYS.longPollMany].notes?.scriptsPerPublishMean),
    BARS.scriptsPerWakeup,
    (n) => n.toFixed(2),
    true,
    [KEYS.longPollMany],
  );
  below(
    'publish->arrival p50, 1,000 waiting long polls vs 1',
    results.ratios['publish->arrival p50, 1,000 waiting long polls / 1'] ?? undefined,
    BARS.manyWaitersArrival,
    times,
    true,
    [KEYS.longPollMany, KEYS.longPollOne],
  );
  atLeast(
    'one-message publishes vs a bare Fastify route running one EVALSHA',
    results.ratios['one-message publish / bare Fastify route'],
    BARS.smallPublishShare,
    times,
    [KEYS.smallPublish, KEYS.smallBare],
  );
  atLeast('push delivery end-to-end', rate(results, KEYS.push), BARS.push, fmtRate, [KEYS.push]);
  below(
    'broker CPU per streamed message, gRPC vs WebSocket',
    results.ratios['broker CPU per streamed message, gRPC / WebSocket'] ?? undefined,
    BARS.grpcCpuShare,
    times,
    true,
    [KEYS.clientReceiveGrpc, KEYS.clientReceiveWs],
  );
  atLeast(
    'official client streaming receive over gRPC',
    rate(results, KEYS.clientReceiveGrpc),
    BARS.grpcReceive,
    fmtRate,
    [KEYS.clientReceiveGrpc],
  );
  below(
    'broker max RSS',
    results.broker.maxRssBytes || undefined,
    BARS.rssBytes,
    (n) => `${(n / 1024 / 1024).toFixed(1)} MiB`,
  );
  below(
    'Redis bytes per retained message (2 subs)',
    results.memory?.bytesPerMessage,
    BARS.bytesPerMessage,
    (n) => `${n.toFixed(0)} B`,
  );
  results.bars = bars;
}

// ------------------------------------------------------------------ text output

function table(headers: string[], rows: string[][], alignRight: boolean[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (alignRight[i] ? (c ?? '').padStart(widths[i]) : (c ?? '').padEnd(widths[i]))).join('  ');
  return [line(headers), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

const ms = (n: number) => n.toFixed(2);
const int = (n: number) => Math.round(n).toLocaleString('en-US');

export function renderReport(results: BenchResults): string {
  const out: string[] = [];
  const rows: string[][] = [];
  const vs: Record<string, string | undefined> = {
    [KEYS.publish]: fmtRatio(results.ratios['publish / BullMQ add'], 'BullMQ'),
    [KEYS.pull]: fmtRatio(results.ratios['pull+ack / BullMQ process'], 'BullMQ'),
    [KEYS.pullEo]: fmtRatio(results.ratios['exactly-once pull+ack / BullMQ process'], 'BullMQ'),
    [KEYS.pullOrdered]: fmtRatio(results.ratios['ordered pull+ack / pull+ack'], 'unordered'),
    [KEYS.pullOrderedEo]: fmtRatio(
      results.ratios['ordered exactly-once pull+ack / exactly-once pull+ack'],
      'unordered',
    ),
    [KEYS.pullManyKeys]: fmtRatio(
      results.ratios['Redis CPU per ordered message, 100,000 keys / 1,000 keys'],
      '1,000 keys (Redis CPU)',
    ),
    [KEYS.streamE2e]: fmtRatio(results.ratios['streaming end-to-end / BullMQ end-to-end'], 'BullMQ'),
    [KEYS.publishRegions]: fmtRatio(results.ratios['publish (2 regions) / publish (1 sub)'], 'single-region'),
    [KEYS.pullRegions]: fmtRatio(results.ratios['pull+ack (2 regions) / pull+ack'], 'single-region'),
    [KEYS.publishFiltered]: fmtRatio(results.ratios['filtered fan-out publish / fan-out publish'], 'unfiltered'),
    [KEYS.pullPolicies]: fmtRatio(results.ratios['pull+ack with policies / without'], 'no policies'),
    [KEYS.publishAuthOn]: fmtRatio(results.ratios['publish with token authentication / without'], 'no authentication'),
    [KEYS.pullAuthOn]: fmtRatio(results.ratios['pull+ack with token authentication / without'], 'no authentication'),
    [KEYS.pullRetained]: fmtRatio(results.ratios['pull+ack retaining acked messages / not'], 'not retained'),
    [KEYS.publishScheduled]: fmtRatio(results.ratios['publish with a delivery time / without'], 'at once'),
    [KEYS.backlogPagesLarge]: fmtRatio(results.ratios['backlog page p50, large / 10,000 waiting'], '10,000 (p50)'),
    [KEYS.publishIdempotent]: fmtRatio(results.ratios['publish with idempotency keys / without'], 'without keys'),
    [KEYS.ackAndPublish]: fmtRatio(results.ratios['acknowledgeAndPublish / ack + publish'], 'two calls'),
    [KEYS.pullFallenDue]: fmtRatio(
      results.ratios['pull+ack fallen due at once / published for now'],
      'published for now',
    ),
  };
  for (const [key, w] of Object.entries(results.workloads)) {
    const kinds = Object.entries(w.latency) as [string, LatencySummary][];
    if (kinds.length === 0) {
      rows.push([key, `${int(w.msgPerSec)}${results.cpu[key]?.disturbed ? ' !' : ''}`, '-', '-', '-', vs[key] ?? '']);
      continue;
    }
    kinds.forEach(([kind, lat], i) => {
      const label = kinds.length > 1 ? `${i === 0 ? key : ''} [${kind}]` : `${key} [${kind}]`;
      const mark = results.cpu[key]?.disturbed ? ' !' : '';
      rows.push([
        label.trimStart(),
        i === 0 ? `${int(w.msgPerSec)}${mark}` : '',
        ms(lat.p50Ms),
        ms(lat.p99Ms),
        ms(lat.maxMs),
        i === 0 ? (vs[key] ?? '') : '',
      ]);
    });
  }
  out.push('Throughput ([kind] = which request the latency is for; "!" = disturbed by other processes, see below)');
  out.push(
    table(['workload', 'msg/s', 'p50 ms', 'p99 ms', 'max ms', 'vs'], rows, [false, true, true, true, true, false]),
  );
  const notes = [
    KEYS.pullOrdered,
    KEYS.pullOrderedEo,
    KEYS.pullFewKeys,
    KEYS.pullManyKeys,
    KEYS.streamE2e,
    KEYS.streamLatency,
    KEYS.bullE2e,
    KEYS.publishRegions,
    KEYS.pullRegions,
    KEYS.pullNoPolicies,
    KEYS.pullPolicies,
    KEYS.push,
    KEYS.pullFallenDue,
    KEYS.backlogPagesLarge,
    KEYS.clientReceiveGrpc,
    KEYS.clientReceiveGrpcOpen,
    KEYS.clientReceiveWs,
  ]
    .filter((key) => results.workloads[key]?.notes)
    .map(
      (key) =>
        `  ${key}: ${Object.entries(results.workloads[key].notes!)
          .map(([k, v]) => `${k} ${typeof v === 'number' ? v.toLocaleString('en-US') : v}`)
          .join(', ')}`,
    );
  if (notes.length) out.push(...notes);

  const clientRows = CLIENT_ROWS.filter(({ key }) => results.workloads[key]).map(({ key, what, transport, client }) => {
    const w = results.workloads[key];
    const cpu = results.cpu[key];
    const perMessage = (seconds: number | undefined) =>
      seconds === undefined ? '-' : ((seconds * 1e6) / w.messages).toFixed(1);
    return [
      what,
      transport,
      client,
      `${int(w.msgPerSec)}${cpu?.disturbed ? ' !' : ''}`,
      perMessage(cpu?.brokerCpuSeconds),
      perMessage(cpu?.clientCpuSeconds),
      perMessage(cpu?.redisCpuSeconds),
    ];
  });
  if (clientRows.length) {
    out.push('');
    out.push(
      `Clients and transports (${int(results.workloads[CLIENT_ROWS.find(({ key }) => results.workloads[key])!.key].messages)} messages of 1 KB each; CPU in µs per message)`,
    );
    out.push(
      table(['workload', 'transport', 'client', 'msg/s', 'broker', 'client', 'redis'], clientRows, [
        false,
        false,
        false,
        true,
        true,
        true,
        true,
      ]),
    );
  }

  const smallRows = SMALL_ROWS.filter((key) => results.workloads[key]).map((key) => {
    const w = results.workloads[key];
    const cpu = results.cpu[key];
    const perRequest = (seconds: number | undefined) =>
      seconds === undefined ? '-' : ((seconds * 1e6) / w.messages).toFixed(1);
    const bare = rate(results, KEYS.smallBare);
    return [
      key,
      `${int(w.msgPerSec)}${cpu?.disturbed ? ' !' : ''}`,
      bare ? `${(w.msgPerSec / bare).toFixed(2)}x` : '-',
      ms(w.latency.request.p50Ms),
      perRequest(cpu?.brokerCpuSeconds),
      perRequest(cpu?.redisCpuSeconds),
      perRequest(cpu?.clientCpuSeconds),
    ];
  });
  if (smallRows.length) {
    out.push('');
    out.push(
      'Small requests (requests/s on keep-alive connections, one request at a time each; "server" = the broker, or the bare route; CPU in µs per request)',
    );
    out.push(
      table(['workload', 'req/s', 'vs bare', 'p50 ms', 'server', 'redis', 'client'], smallRows, [
        false,
        true,
        true,
        true,
        true,
        true,
        true,
      ]),
    );
  }

  if (results.memory) {
    const m = results.memory;
    out.push('');
    out.push(
      `Redis memory: ${int(m.messages)} retained messages of ${m.dataBytes} B, ${m.subscriptions} subscriptions: ` +
        `used_memory ${int(m.usedMemoryBefore)} -> ${int(m.usedMemoryAfter)} = ${m.bytesPerMessage.toFixed(1)} B/message`,
    );
    out.push(
      `  MEMORY USAGE per message: ${Object.entries(m.breakdownBytesPerMessage)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}`,
    );
  }

  if (results.replay) {
    const r = results.replay;
    const cpu = (phase: string) => {
      const c = results.cpu[phase];
      return c ? `, broker CPU ${c.brokerCpuSeconds.toFixed(2)} s, Redis CPU ${c.redisCpuSeconds.toFixed(2)} s` : '';
    };
    out.push('');
    out.push(
      `Replay over ${int(r.messages)} retained messages of 1 KB (retainAckedMessages): Redis used_memory ` +
        `${r.bytesPerUnacked.toFixed(1)} B/message unacknowledged, ${r.bytesPerRetainedAcked.toFixed(1)} B/message acknowledged and retained`,
    );
    out.push(
      `  seek back to before the first publish: ${r.replaySeconds.toFixed(2)} s${cpu(SEEK_PHASES.replay)}; ` +
        `${int(r.unackedAfterReplay)} unacknowledged after it`,
    );
    out.push(
      `  seek to a later time (purge): ${r.purgeSeconds.toFixed(2)} s${cpu(SEEK_PHASES.purge)}; ` +
        `${int(r.unackedAfterPurge)} unacknowledged after it`,
    );
  }

  const cpuRows = Object.entries(results.cpu).map(([phase, c]) => {
    const top = Object.entries(c.redisCommands)
      .slice(0, 3)
      .map(([cmd, s]) => `${cmd} ${int(s.calls)}x${s.usecPerCall.toFixed(0)}us`)
      .join(', ');
    return [
      phase,
      c.wallSeconds.toFixed(2),
      c.clientCpuSeconds.toFixed(2),
      c.brokerCpuSeconds.toFixed(2),
      c.redisCpuSeconds.toFixed(2),
      `${c.otherCpuSeconds.toFixed(2)}${c.disturbed ? ' !' : ''}`,
      top,
    ];
  });
  if (cpuRows.length) {
    out.push('');
    out.push('CPU seconds per phase (2 cores shared by client, broker and Redis)');
    out.push(
      table(
        ['phase', 'wall s', 'client', 'broker', 'redis', 'other', 'top Redis commands (calls x usec/call)'],
        cpuRows,
        [false, true, true, true, true, true, false],
      ),
    );
    for (const [phase, c] of Object.entries(results.cpu)) {
      if (c.cpuByProcess)
        out.push(
          `  ${phase}: ${Object.entries(c.cpuByProcess)
            .map(([name, seconds]) => `${name} ${seconds.toFixed(2)}`)
            .join(', ')}`,
        );
    }
    out.push(
      `  ("other" = busy CPU of other processes during the phase; "!" = over ${DISTURBED_SHARE * 100}% of all cores: that phase's figures are depressed)`,
    );
  }

  out.push('');
  const b = results.broker;
  const mib = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;
  const parts = b.atMaxRss ? ` (anon ${mib(b.atMaxRss.anon)}, file ${mib(b.atMaxRss.file)})` : '';
  const peakPhase = Object.entries(b.maxRssBytesPerPhase).sort((x, y) => y[1] - x[1])[0]?.[0];
  out.push(
    b.rssSamples === 0
      ? `Broker (${b.entry}): no RSS samples (it never came up)`
      : `Broker (${b.entry}): max RSS ${mib(b.maxRssBytes)}${parts} ` +
          `during "${peakPhase}", ${mib(b.maxRssBytesPerPhase['idle after start'] ?? 0)} idle after start, ${b.rssSamples} samples; ` +
          `Redis max RSS ${mib(results.redis.maxRssBytes)}`,
  );
  const disturbed = Object.entries(results.cpu)
    .filter(([, c]) => c.disturbed)
    .map(([phase]) => phase);
  if (disturbed.length) {
    out.push(
      `WARNING: other processes competed for the CPU during: ${disturbed.join('; ')}. Re-run on a quiet machine.`,
    );
  }
  out.push('');
  out.push('Bars');
  out.push(
    table(
      ['bar', 'target', 'actual', 'result'],
      results.bars.map((bar) => [bar.name, bar.target, bar.actual, bar.status]),
      [false, false, true, false],
    ),
  );
  if (results.error) out.push(`\nERROR: ${results.error}`);
  return out.join('\n');
}

function fmtRatio(value: number | null | undefined, of: string): string | undefined {
  return value === null || value === undefined ? undefined : `${value.toFixed(2)}x ${of}`;
}

export function writeResults(file: string, results: BenchResults): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
}
