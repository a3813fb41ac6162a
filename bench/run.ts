/**
 * `npm run bench`: starts a private redis-server and the broker (a child process), runs the
 * broker workloads and the BullMQ baseline against the same Redis, prints a table with
 * PASS/FAIL bars, and writes bench/results/latest.json. See bench/config.ts for settings.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  createTopic,
  deleteTopic,
  memoryWorkload,
  OrderChecker,
  PROJECT,
  publishWorkload,
  pullAckWorkload,
  subscriptionPath,
  topicPath,
  type PulledMessage,
  type ThroughputResult,
} from './broker-workloads.ts';
import { messageOrigin } from '../src/broker/message-ids.ts';
import { pushWorkload } from './push-workloads.ts';
import { seekWorkload } from './replay-workloads.ts';
import { ClientWorker, officialPublishWorkload, streamingReceiveWorkload } from './client-workloads.ts';
import { bullmqAddWorkload, bullmqEndToEndWorkload, bullmqProcessWorkload } from './bullmq-workloads.ts';
import { loadBenchConfig, type WorkloadName } from './config.ts';
import { HttpClient } from './http.ts';
import { housekeepingPasses } from './housekeeping-workload.ts';
import { scrapeMetrics, setUpMetricsWorkload, tearDownMetricsWorkload } from './metrics-workload.ts';
import { Latency, runConcurrently, sleep } from './stats.ts';
import { idempotentBodies, OrderedBodies, publishBodies, randomPayloads } from './payloads.ts';
import {
  cleanup,
  cleanupSync,
  buildBrokerBundle,
  compactAof,
  onCleanup,
  sampleRss,
  startBroker,
  startRedis,
  type BrokerProcess,
  type RedisServer,
  type RssSampler,
} from './processes.ts';
import { streamingLatencyWorkload, streamingThroughputWorkload, type StreamSettings } from './streaming-workloads.ts';
import { longPollWakeupWorkload } from './waiters-workloads.ts';
import {
  acknowledgeRequests,
  bareRequests,
  modifyRequests,
  publishRequests,
  pullRequests,
  requestLoop,
  SMALL_MESSAGE,
  startBareRoute,
} from './small-requests.ts';
import {
  computeBars,
  computeRatios,
  DISTURBED_SHARE,
  E2E_LATENCY,
  KEYS,
  keepMedianRound,
  renderReport,
  writeResults,
  type BenchResults,
  type PhaseCpu,
} from './report.ts';

const KEY_PREFIX = 'bench';
/** How far ahead the scheduled workload sets its delivery time: past the end of its publish. */
const SCHEDULED_LEAD_MS = 20_000;
/** The keys workload: its messages, one per key over many keys, a hundred per key over few. */
const MANY_ORDERING_KEYS = 100_000;
const FEW_ORDERING_KEYS = 1_000;
/** Messages per pull in the outbox workload, each batch settled with its follow-ups. */
const OUTBOX_BATCH = 100;
/** Pages of 1,000 read from each backlog in each round of the backlog workload, and its rounds. */
const BACKLOG_PAGES = 10;
const BACKLOG_ROUNDS = 5;
/** The regions of the regions workload; pulls and acks all go through the first one's endpoint. */
const REGION_NAMES = ['region-a', 'region-b'];
const config = loadBenchConfig();
const log = (message: string) => process.stderr.write(`[bench] ${message}\n`);

// ------------------------------------------------------------------ exit handling

process.on('exit', cleanupSync);
let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => {
    if (interrupted) {
      cleanupSync();
      process.exit(130);
    }
    interrupted = true;
    log(`${signal}: stopping children and removing temp dirs...`);
    cleanup().finally(() => process.exit(130));
  });
}

// ------------------------------------------------------------------ CPU accounting

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;
  } catch {
    return 100;
  }
})();

function processCpuSeconds(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
  } catch {
    return 0;
  }
}

/** Busy CPU seconds of the whole machine (all processes), from /proc/stat. */
function machineBusySeconds(): number {
  try {
    const fields = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
    const [user, nice, system, , , irq, softirq, steal] = fields;
    return (user + nice + system + irq + softirq + (steal ?? 0)) / CLK_TCK;
  } catch {
    return 0;
  }
}

/**
 * On a shared machine: waits (up to `maxMs`) until other processes use less than
 * DISTURBED_SHARE of the cores over a 1 s window, so a phase does not start in someone
 * else's burst. Our own children are idle between phases, so all busy time counts.
 */
async function waitForQuiet(maxMs: number, ownCpu: () => number): Promise<number> {
  const started = Date.now();
  const capacity = os.cpus().length;
  for (;;) {
    const busy0 = machineBusySeconds();
    const own0 = ownCpu();
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const share = (machineBusySeconds() - busy0 - (ownCpu() - own0)) / capacity;
    const waited = Date.now() - started;
    if (share < DISTURBED_SHARE || waited >= maxMs) return share;
  }
}

function clientCpuSeconds(): number {
  const usage = process.cpuUsage();
  return (usage.user + usage.system) / 1e6;
}

/** INFO commandstats of one or more Redis servers, summed per command; the top 8 by time. */
function parseCommandstats(infos: string[]): PhaseCpu['redisCommands'] {
  const stats: PhaseCpu['redisCommands'] = {};
  for (const info of infos) {
    for (const match of info.matchAll(/^cmdstat_([^:]+):calls=(\d+),usec=(\d+)/gm)) {
      const entry = (stats[match[1]] ??= { calls: 0, usec: 0, usecPerCall: 0 });
      entry.calls += Number(match[2]);
      entry.usec += Number(match[3]);
    }
  }
  for (const entry of Object.values(stats))
    entry.usecPerCall = Math.round((entry.usec / Math.max(1, entry.calls)) * 100) / 100;
  return Object.fromEntries(
    Object.entries(stats)
      .sort((a, b) => b[1].usec - a[1].usec)
      .slice(0, 8),
  );
}

/** The broker and Redis processes a phase runs on: the single-region pair, or one of each per region. */
interface Deployment {
  /** Broker pid by name ('' for the single-region broker). */
  brokers: Record<string, number>;
  redis: Record<string, RedisServer>;
}

/** The commit under test, "+dirty" when src/ or routes/ have uncommitted changes. */
function gitDescribe(): string | undefined {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { stdio: ['ignore', 'pipe', 'ignore'] })
      .toString()
      .trim();
    const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src', 'routes'], {
      stdio: ['ignore', 'pipe', 'ignore'],
    })
      .toString()
      .trim();
    return dirty ? `${commit}+dirty` : commit;
  } catch {
    return undefined;
  }
}

/** The slowest commands of the run (threshold 10 ms), script names guessed from their keys. */
async function readSlowlog(redis: RedisServer): Promise<NonNullable<BenchResults['redis']['slowlog']>> {
  const entries = (await redis.admin.call('SLOWLOG', 'GET', '10')) as [number, number, number, string[]][];
  return entries
    .map(([, , usec, args]) => ({
      usec,
      command: args
        .slice(0, 4)
        .map((arg) => (arg.length > 60 ? `${arg.slice(0, 60)}...` : arg))
        .join(' '),
    }))
    .sort((a, b) => b.usec - a.usec);
}

// ------------------------------------------------------------------ main

async function main(): Promise<void> {
  const entry = config.brokerEntry ?? buildBrokerBundle();
  const n = config.messages;
  const c = config.concurrency;
  const runs = (name: WorkloadName) => config.only.has(name);
  const results: BenchResults = {
    startedAt: new Date().toISOString(),
    config: {
      messages: n,
      concurrency: c,
      memoryMessages: config.memoryMessages,
      warmupMessages: config.warmupMessages,
      bullmqWorkerConcurrency: config.bullmqConcurrency,
      orderingKeys: config.orderingKeys,
      streamSubscribers: config.streamSubscribers,
      streamMaxOutstandingMessages: config.streamMaxOutstanding,
      ...(runs('waiters')
        ? {
            waitersMessages: config.waitersMessages,
            waitersStreams: config.waitersStreams,
            waitersLongPolls: config.waitersPolls,
            waitersRounds: config.waitersRounds,
          }
        : {}),
      latencyRate: config.latencyRate,
      latencySeconds: config.latencySeconds,
      latencyMessagesPerRequest: config.latencyBatch,
      bullmqE2eWorkers: config.bullmqE2eWorkers,
      bullmqE2eWorkerConcurrency: config.bullmqE2eConcurrency,
      ...(runs('small')
        ? {
            smallConnections: config.smallConnections,
            smallSeconds: config.smallSeconds,
            smallRounds: config.smallRounds,
            smallBacklog: config.smallBacklog,
          }
        : {}),
      ...(runs('clients')
        ? { clientMessages: config.clientMessages, clientPublishWindow: config.clientPublishWindow }
        : {}),
      publishBatch: config.publishBatch,
      pullMaxMessages: config.pullMax,
      dataBytes: config.dataBytes,
      ...(runs('regions') ? { regions: REGION_NAMES, regionsPullThrough: REGION_NAMES[0] } : {}),
      only: [...config.only],
      brokerNodeArgs: config.brokerNodeArgs,
    },
    environment: {
      node: process.version,
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model,
      platform: `${os.platform()} ${os.release()}`,
      commit: gitDescribe(),
    },
    workloads: {},
    ratios: {},
    broker: { entry, maxRssBytes: 0, rssSamples: 0, maxRssBytesPerPhase: {} },
    redis: { maxRssBytes: 0 },
    cpu: {},
    bars: [],
  };

  let redis: RedisServer | undefined;
  let broker: BrokerProcess | undefined;
  let brokerRss: RssSampler | undefined;
  let redisRss: RssSampler | undefined;
  try {
    redis = await startRedis(config.redisServer);
    results.environment.redis = redis.version;
    log(`redis-server ${redis.version} on port ${redis.port} (pid ${redis.pid}, dir ${redis.dir})`);
    broker = await startBroker({ redisUrl: redis.url, entry, nodeArgs: config.brokerNodeArgs, keyPrefix: KEY_PREFIX });
    log(`broker ${entry} on port ${broker.port} (pid ${broker.pid})`);
    brokerRss = sampleRss(broker.pid);
    redisRss = sampleRss(redis.pid);
    brokerRss.phase('idle after start');

    const client = new HttpClient(broker.baseUrl, c + 2);
    onCleanup(() => client.close());
    const bodies = publishBodies(64, config.publishBatch, config.dataBytes);
    const admin = redis.admin;
    const single: Deployment = { brokers: { '': broker.pid }, redis: { '': redis } };
    /** Every broker and Redis this run started: their CPU is never "other". */
    const ownPids = [broker.pid, redis.pid];
    /** Client processes besides this one (the client comparison's worker): their CPU is the client's. */
    const clientPids: number[] = [];
    const allClientCpu = () => clientPids.reduce((sum, pid) => sum + processCpuSeconds(pid), clientCpuSeconds());
    const ownCpu = () => ownPids.reduce((sum, pid) => sum + processCpuSeconds(pid), allClientCpu());

    /** Runs one measured phase on `on` (the single-region broker and Redis unless told otherwise). */
    const measure = async <T>(phase: string, fn: () => Promise<T>, on: Deployment = single): Promise<T> => {
      if (interrupted) throw new Error('interrupted');
      const processes = [
        ...Object.entries(on.brokers).map(([name, pid]) => ({ kind: 'broker' as const, name, pid })),
        ...Object.entries(on.redis).map(([name, server]) => ({ kind: 'redis' as const, name, pid: server.pid })),
      ];
      const admins = Object.values(on.redis).map((server) => server.admin);
      // The append-only file is rewritten between phases (compactAof).
      await Promise.all(admins.map(compactAof));
      if (config.quietWaitMs > 0) {
        const waitStarted = Date.now();
        const share = await waitForQuiet(config.quietWaitMs, ownCpu);
        const waited = ((Date.now() - waitStarted) / 1000).toFixed(0);
        if (share >= DISTURBED_SHARE)
          log(`other processes still use ${(share * 100).toFixed(0)}% of the CPU after ${waited} s; measuring anyway`);
        else if (Date.now() - waitStarted > 1500) log(`waited ${waited} s for other processes to quiet down`);
      }
      log(`${phase}...`);
      brokerRss!.phase(phase);
      await Promise.all(admins.map((redisAdmin) => redisAdmin.config('RESETSTAT')));
      const monoStartUs = Number(process.hrtime.bigint() / 1000n);
      const before = {
        wall: performance.now(),
        processes: processes.map(({ pid }) => processCpuSeconds(pid)),
        own: ownCpu(),
        client: allClientCpu(),
        machine: machineBusySeconds(),
      };
      const value = await fn();
      const monoEndUs = Number(process.hrtime.bigint() / 1000n);
      const used = processes.map(({ pid }, i) => processCpuSeconds(pid) - before.processes[i]);
      const sumOf = (kind: 'broker' | 'redis') =>
        processes.reduce((sum, { kind: k }, i) => sum + (k === kind ? used[i] : 0), 0);
      const clientCpu = allClientCpu() - before.client;
      const wallSeconds = (performance.now() - before.wall) / 1000;
      const otherCpuSeconds = Math.max(0, machineBusySeconds() - before.machine - (ownCpu() - before.own));
      results.cpu[phase] = {
        wallSeconds,
        brokerCpuSeconds: sumOf('broker'),
        redisCpuSeconds: sumOf('redis'),
        clientCpuSeconds: clientCpu,
        otherCpuSeconds,
        disturbed: otherCpuSeconds > DISTURBED_SHARE * os.cpus().length * wallSeconds,
        monoStartUs,
        monoEndUs,
        redisCommands: parseCommandstats(
          await Promise.all(admins.map((redisAdmin) => redisAdmin.info('commandstats'))),
        ),
        ...(processes.length > 2
          ? {
              cpuByProcess: Object.fromEntries(
                processes.map(({ kind, name }, i) => [`${kind} ${name}`, Math.round(used[i] * 100) / 100]),
              ),
            }
          : {}),
      };
      brokerRss!.phase('between phases');
      return value;
    };
    const record = (key: string, result: ThroughputResult) => {
      results.workloads[key] = { ...result, workload: key };
      log(`  ${key}: ${Math.round(result.msgPerSec).toLocaleString('en-US')} msg/s in ${result.seconds.toFixed(2)} s`);
    };
    const roundToBatch = (count: number) =>
      Math.max(config.publishBatch, Math.ceil(count / config.publishBatch) * config.publishBatch);
    const messages = roundToBatch(n);
    /** Publishes `count` messages of the standard bodies to `topicId`; `more` sets any other option. */
    const publishMessages = (
      workload: string,
      topicId: string,
      count = messages,
      more: Partial<Parameters<typeof publishWorkload>[0]> = {},
    ) =>
      publishWorkload({
        workload,
        client,
        topicId,
        messages: count,
        batch: config.publishBatch,
        concurrency: c,
        bodies,
        timeoutMs: config.timeoutMs,
        ...more,
      });

    /** Pulls and acks `count` messages of a subscription on this endpoint; `more` sets any other option. */
    const drainMessages = (
      workload: string,
      subscriptionId: string,
      count = messages,
      more: Partial<Parameters<typeof pullAckWorkload>[0]> = {},
    ) =>
      pullAckWorkload({
        workload,
        client,
        subscriptionId,
        messages: count,
        maxMessages: config.pullMax,
        concurrency: c,
        timeoutMs: config.timeoutMs,
        ...more,
      });

    const publishAndDrain = async (
      topicId: string,
      subscriptionId: string,
      exactlyOnce: boolean,
      publishKey: string,
      pullKey: string | undefined,
    ) => {
      await createTopic(client, topicId, [{ id: subscriptionId, exactlyOnce }]);
      record(publishKey, await measure(publishKey, () => publishMessages(publishKey, topicId)));
      if (pullKey) record(pullKey, await measure(pullKey, () => drainMessages(pullKey, subscriptionId)));
      // Every workload leaves the project as it found it: the metrics workload fills it up to its
      // limit of subscriptions.
      await deleteTopic(client, topicId, [subscriptionId]);
    };

    /**
     * Ordered: `messages` messages over `orderingKeys` keys (request i carries key i mod keys,
     * 100 messages of one key per request), then pull+ack as for unordered subscriptions, with
     * every delivery checked against the key's publish order. No `keys`: a warm-up.
     */
    const standardOrderedBodies = new OrderedBodies(64, config.publishBatch, config.dataBytes, config.orderingKeys);
    const orderedPublishAndDrain = async (
      topicId: string,
      exactlyOnce: boolean,
      count: number,
      keys?: { publish: string; pull: string },
      /** The keys and the messages of one key per request (default: BENCH_ORDERING_KEYS, a batch). */
      orderedBodies = standardOrderedBodies,
    ) => {
      await createTopic(client, topicId, [{ id: topicId, exactlyOnce, ordered: true }]);
      const checker = new OrderChecker();
      const K = orderedBodies.keys;
      // Round-robin: with fewer requests than keys, only the first keys get messages.
      const keysUsed = Math.min(K, count / orderedBodies.batch);
      const publish = () =>
        publishMessages(keys?.publish ?? 'warm-up (ordered)', topicId, count, {
          batch: orderedBodies.batch,
          body: (i) => orderedBodies.body(i, i % K),
          orderingKeyOf: (i) => i % K,
          onPublished: (i, ids) => checker.record(orderedBodies.keyName(i % K), ids),
        });
      const pull = async () => {
        const workload = keys?.pull ?? 'warm-up (ordered)';
        const result = await drainMessages(workload, topicId, count, { onBatch: (batch) => checker.check(batch) });
        if (checker.violations > 0)
          throw new Error(
            `${workload}: ${checker.violations} deliveries out of order; first: ${checker.firstViolation}`,
          );
        result.notes = { ...result.notes, orderingKeys: keysUsed, orderViolations: checker.violations };
        return result;
      };
      if (keys) {
        const published = await measure(keys.publish, publish);
        published.notes = { orderingKeys: keysUsed, messagesPerKey: Math.round(count / keysUsed) };
        record(keys.publish, published);
        record(keys.pull, await measure(keys.pull, pull));
      } else {
        await publish();
        await pull();
      }
      await deleteTopic(client, topicId, [topicId]);
    };

    /** Streaming: a fresh topic and subscription per run, `streamSubscribers` WebSockets on it. */
    const stream: StreamSettings = {
      wsBase: broker.baseUrl.replace(/^http/, 'ws'),
      subscribers: config.streamSubscribers,
      maxOutstandingMessages: config.streamMaxOutstanding,
      ackDeadlineSeconds: 60,
    };
    const streamingThroughput = async (
      workload: string,
      topicId: string,
      count: number,
      more: { subscribers?: number; measure?: <T>(run: () => Promise<T>) => Promise<T> } = {},
    ) => {
      await createTopic(client, topicId, [{ id: topicId }]);
      const result = await streamingThroughputWorkload({
        workload,
        client,
        admin,
        keyPrefix: KEY_PREFIX,
        topicId,
        subscriptionId: topicId,
        stream: { ...stream, subscribers: more.subscribers ?? stream.subscribers },
        measure: more.measure,
        messages: count,
        batch: config.publishBatch,
        concurrency: c,
        bodies,
        timeoutMs: config.timeoutMs,
      });
      await deleteTopic(client, topicId, [topicId]);
      return result;
    };
    let bullPayloads: string[] | undefined;
    const bullmqPayloads = () => (bullPayloads ??= randomPayloads(6400, config.dataBytes));
    const bullmqEndToEnd = (workload: string, queueName: string, count: number) =>
      bullmqEndToEndWorkload({
        workload,
        target: { host: '127.0.0.1', port: redis!.port },
        queueName,
        messages: count,
        batch: config.publishBatch,
        concurrency: c,
        payloads: bullmqPayloads(),
        workers: config.bullmqE2eWorkers,
        workerConcurrency: config.bullmqE2eConcurrency,
        timeoutMs: config.timeoutMs,
      });

    /**
     * Regions: a fresh topic with one subscription, created through the first endpoint; `count`
     * messages published through every endpoint in turn (each stores in its own region), then
     * drained by `c` pullers that all pull and ack through the first endpoint, which pulls from
     * every region. The notes count messages by the region in their ID. No `measured`: a warm-up.
     */
    const regionsPublishAndDrain = async (
      endpoints: HttpClient[],
      topicId: string,
      count: number,
      measured?: { publish: string; pull: string; on: Deployment },
    ) => {
      const [subscriberEndpoint] = endpoints;
      await createTopic(subscriberEndpoint, topicId, [{ id: topicId }]);
      const stored = new Map<string, number>();
      const pulled = new Map<string, number>();
      const tally = (counts: Map<string, number>, messageIds: string[]) => {
        for (const id of messageIds) {
          const { region } = messageOrigin(id);
          counts.set(region, (counts.get(region) ?? 0) + 1);
        }
      };
      const byRegion = (what: string, counts: Map<string, number>) =>
        Object.fromEntries(
          [...counts].sort(([a], [b]) => (a < b ? -1 : 1)).map(([region, n]) => [`${what} ${region}`, n]),
        );
      const publish = () =>
        publishMessages(measured?.publish ?? 'warm-up (regions)', topicId, count, {
          client: endpoints,
          onPublished: (_, ids) => tally(stored, ids),
        });
      const pull = () =>
        pullAckWorkload({
          workload: measured?.pull ?? 'warm-up (regions)',
          client: subscriberEndpoint,
          subscriptionId: topicId,
          messages: count,
          maxMessages: config.pullMax,
          concurrency: c,
          timeoutMs: config.timeoutMs,
          onBatch: (batch) =>
            tally(
              pulled,
              batch.map(({ message }) => message.messageId),
            ),
        });
      if (measured) {
        const published = await measure(measured.publish, publish, measured.on);
        published.notes = byRegion('stored in', stored);
        record(measured.publish, published);
        const drained = await measure(measured.pull, pull, measured.on);
        drained.notes = { ...drained.notes, ...byRegion('pulled from', pulled) };
        record(measured.pull, drained);
      } else {
        await publish();
        await pull();
      }
      await deleteTopic(subscriberEndpoint, topicId, [topicId]);
    };

    /**
     * Starts one redis-server and one broker per region (REGION/REGIONS), warms them up like the
     * single-region broker, measures regionsPublishAndDrain, and stops the brokers (gracefully,
     * so --cpu-prof writes their profiles); the Redis servers go at the end of the run.
     */
    const regionsWorkload = async () => {
      const servers: RedisServer[] = [];
      for (const name of REGION_NAMES) {
        const server = await startRedis(config.redisServer);
        log(`region ${name}: redis-server on port ${server.port} (pid ${server.pid})`);
        servers.push(server);
        ownPids.push(server.pid);
      }
      const all = REGION_NAMES.map((name, i) => ({ name, redisUrl: servers[i].url }));
      const brokers: BrokerProcess[] = [];
      try {
        for (const [i, name] of REGION_NAMES.entries()) {
          const regionBroker = await startBroker({
            redisUrl: servers[i].url,
            entry,
            nodeArgs: config.brokerNodeArgs,
            keyPrefix: KEY_PREFIX,
            regions: { local: name, all },
          });
          log(`region ${name}: broker on port ${regionBroker.port} (pid ${regionBroker.pid})`);
          brokers.push(regionBroker);
          ownPids.push(regionBroker.pid);
        }
        const endpoints = brokers.map((regionBroker) => new HttpClient(regionBroker.baseUrl, c + 2));
        onCleanup(() => {
          for (const endpoint of endpoints) endpoint.close();
        });
        if (config.warmupMessages > 0) {
          const warm = roundToBatch(config.warmupMessages);
          log(`warm-up regions (${warm} messages)...`);
          await regionsPublishAndDrain(endpoints, 'warmup-regions', warm);
        }
        const on: Deployment = {
          brokers: Object.fromEntries(REGION_NAMES.map((name, i) => [name, brokers[i].pid])),
          redis: Object.fromEntries(REGION_NAMES.map((name, i) => [name, servers[i]])),
        };
        await regionsPublishAndDrain(endpoints, 'bench-regions', messages, {
          publish: KEYS.publishRegions,
          pull: KEYS.pullRegions,
          on,
        });
      } finally {
        await Promise.all(brokers.map((regionBroker) => regionBroker.stop().catch(() => {})));
      }
    };

    /**
     * The client comparison: a fresh topic with one subscription per round; one publisher fills
     * it (the official client over gRPC or REST, or the bench's HTTP client over REST), then one
     * subscriber drains it (the official client over gRPC StreamingPull, src/client over
     * WebSocket, or the bench's HTTP client with unary pull+ack). Publish and receive are
     * separate phases: a receive phase times a backlog that is already stored. A round without a
     * publish key fills its topic unmeasured. The clients other than the bench's HTTP client run
     * in a child process (bench/client-worker.ts).
     */
    const clientsWorkload = async () => {
      const worker = await ClientWorker.start(`127.0.0.1:${broker!.port}`);
      log(`client worker (pid ${worker.pid})`);
      clientPids.push(worker.pid);
      onCleanup(() => worker.close());
      type Round = {
        topic: string;
        publisher: 'grpc' | 'rest' | 'raw';
        subscriber: 'grpc' | 'ws' | 'raw';
        publish?: string;
        receive: string;
        /** The official client's flowControl.maxMessages: the whole backlog. */
        windowIsBacklog?: boolean;
      };
      const rounds: Round[] = [
        {
          topic: 'grpc',
          publisher: 'grpc',
          subscriber: 'grpc',
          publish: KEYS.clientPublishGrpc,
          receive: KEYS.clientReceiveGrpc,
        },
        {
          topic: 'grpc-open',
          publisher: 'raw',
          subscriber: 'grpc',
          receive: KEYS.clientReceiveGrpcOpen,
          windowIsBacklog: true,
        },
        {
          topic: 'rest',
          publisher: 'rest',
          subscriber: 'ws',
          publish: KEYS.clientPublishRest,
          receive: KEYS.clientReceiveWs,
        },
        {
          topic: 'raw',
          publisher: 'raw',
          subscriber: 'raw',
          publish: KEYS.clientPublishRaw,
          receive: KEYS.clientPullRaw,
        },
      ];
      /** `receivePhase`: the name the receive is measured under (default: the spec's receive key). */
      const round = async (spec: Round, topicId: string, count: number, measured: boolean, receivePhase?: string) => {
        await createTopic(client, topicId, [{ id: topicId }]);
        const publish = () =>
          spec.publisher === 'raw'
            ? publishMessages(spec.publish ?? `${spec.receive} (backlog)`, topicId, count)
            : officialPublishWorkload({
                workload: spec.publish ?? `${spec.receive} (backlog)`,
                worker,
                transport: spec.publisher,
                topicId,
                messages: count,
                window: config.clientPublishWindow,
              });
        const receive = () =>
          spec.subscriber === 'raw'
            ? drainMessages(spec.receive, topicId, count)
            : streamingReceiveWorkload({
                workload: spec.receive,
                worker,
                transport: spec.subscriber,
                admin,
                keyPrefix: KEY_PREFIX,
                subscriptionId: topicId,
                messages: count,
                timeoutMs: config.timeoutMs,
                maxMessages: spec.windowIsBacklog ? count : undefined,
              });
        if (measured && spec.publish && !receivePhase) record(spec.publish, await measure(spec.publish, publish));
        else await publish();
        const phase = receivePhase ?? spec.receive;
        if (measured) record(phase, await measure(phase, receive));
        else await receive();
        await deleteTopic(client, topicId, [topicId]);
      };
      try {
        if (config.warmupMessages > 0) {
          const warm = roundToBatch(config.warmupMessages);
          log(`warm-up clients (${warm} messages per client)...`);
          // Every client and transport once; the gRPC receive with the window that never fills.
          for (const spec of [rounds[0], rounds[2]]) {
            await round(
              { ...spec, windowIsBacklog: spec.subscriber === 'grpc' },
              `warmup-clients-${spec.topic}`,
              warm,
              false,
            );
          }
        }
        const count = roundToBatch(config.clientMessages);
        for (const spec of rounds) await round(spec, `bench-clients-${spec.topic}`, count, true);
        // A receive of 30,000 messages lasts a second or two on a machine whose two cores it
        // saturates: one round's broker CPU per message varies by half. The two receives the
        // gRPC/WebSocket bar compares run again, alternating, and each keeps its median round.
        const compared = [rounds[0], rounds[2]];
        const repeats = (spec: Round) =>
          Array.from({ length: config.clientReceiveRounds - 1 }, (_, i) => `${spec.receive} (round ${i + 2})`);
        for (let i = 0; i < config.clientReceiveRounds - 1; i++) {
          for (const spec of compared) {
            await round(spec, `bench-clients-${spec.topic}-${i + 2}`, count, true, repeats(spec)[i]);
          }
        }
        for (const spec of compared) keepMedianRound(results, spec.receive, repeats(spec));
      } finally {
        await worker.close();
      }
    };

    /**
     * Pull+ack drains compared in one run: each of BENCH_POLICIES_ROUNDS rounds publishes a
     * backlog to every drain's topic, then drains them in alternating order; each keeps its
     * median round by throughput.
     */
    const alternatingDrains = async (
      label: string,
      drains: { key: string; topicId: string; subscriptionId: string }[],
    ) => {
      const repeats = (key: string) =>
        Array.from({ length: config.policiesRounds - 1 }, (_, i) => `${key} (round ${i + 2})`);
      for (let round = 0; round < config.policiesRounds; round++) {
        for (const topicId of new Set(drains.map((drain) => drain.topicId))) {
          log(`${label} round ${round + 1}: publishing ${messages} messages to ${topicId}...`);
          await publishMessages(`${label} round ${round + 1}`, topicId);
        }
        for (const { key, subscriptionId } of round % 2 === 0 ? drains : [...drains].reverse()) {
          const phase = round === 0 ? key : repeats(key)[round - 1];
          record(phase, await measure(phase, () => drainMessages(phase, subscriptionId)));
        }
      }
      for (const { key } of drains) keepMedianRound(results, key, repeats(key), 'msgPerSec');
    };

    /** Pull+ack on a subscription with a dead-letter and a retry policy against one without, both of one topic. */
    const policiesWorkload = async () => {
      const topicId = 'bench-policies';
      const deadLetterTopic = `${topicId}-dead-letters`;
      const plain = `${topicId}-none`;
      const withPolicies = `${topicId}-dead-letter-retry`;
      await createTopic(client, deadLetterTopic, []);
      await createTopic(client, topicId, [
        { id: plain },
        {
          id: withPolicies,
          deadLetterPolicy: {
            deadLetterTopic: `projects/${PROJECT}/topics/${deadLetterTopic}`,
            maxDeliveryAttempts: 5,
          },
          retryPolicy: { minimumBackoff: '10s', maximumBackoff: '600s' },
        },
      ]);
      await alternatingDrains('policies', [
        { key: KEYS.pullNoPolicies, topicId, subscriptionId: plain },
        { key: KEYS.pullPolicies, topicId, subscriptionId: withPolicies },
      ]);
      await deleteTopic(client, topicId, [plain, withPolicies]);
      await deleteTopic(client, deadLetterTopic, []);
    };

    /**
     * Bearer-token authentication: a second broker on the same Redis checks a token
     * (AUTH_TOKENS_FILE) on every request. Each of BENCH_POLICIES_ROUNDS rounds publishes a
     * backlog through each broker, then drains it through the same one, the two in alternating
     * order; each keeps its median round by throughput.
     */
    const authWorkload = async () => {
      const token = randomBytes(32).toString('base64url');
      const tokensFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'bench-tokens-')), 'tokens');
      fs.writeFileSync(tokensFile, `serviceAccount:bench@${PROJECT}.iam.gserviceaccount.com ${token}\n`);
      onCleanup(() => fs.rmSync(path.dirname(tokensFile), { recursive: true, force: true }));
      const authBroker = await startBroker({
        redisUrl: redis!.url,
        entry,
        nodeArgs: config.brokerNodeArgs,
        keyPrefix: KEY_PREFIX,
        settings: { AUTH_TOKENS_FILE: tokensFile },
      });
      log(`broker with token authentication on port ${authBroker.port} (pid ${authBroker.pid})`);
      ownPids.push(authBroker.pid);
      const authClient = new HttpClient(authBroker.baseUrl, c + 2, { authorization: `Bearer ${token}` });
      onCleanup(() => authClient.close());
      const sides = [
        { topicId: 'bench-auth-off', http: client, on: single, publish: KEYS.publishAuthOff, pull: KEYS.pullAuthOff },
        {
          topicId: 'bench-auth-on',
          http: authClient,
          on: { brokers: { '': authBroker.pid }, redis: single.redis },
          publish: KEYS.publishAuthOn,
          pull: KEYS.pullAuthOn,
        },
      ];
      try {
        for (const side of sides) await createTopic(side.http, side.topicId, [{ id: side.topicId }]);
        if (config.warmupMessages > 0) {
          const warm = roundToBatch(config.warmupMessages);
          log(`warm-up of the broker with token authentication (${warm} messages)...`);
          await publishMessages('warmup-auth', sides[1].topicId, warm, { client: authClient });
          await drainMessages('warmup-auth', sides[1].topicId, warm, { client: authClient });
        }
        const repeats = (key: string) =>
          Array.from({ length: config.policiesRounds - 1 }, (_, i) => `${key} (round ${i + 2})`);
        const phaseOf = (key: string, round: number) => (round === 0 ? key : repeats(key)[round - 1]);
        for (let round = 0; round < config.policiesRounds; round++) {
          const order = round % 2 === 0 ? sides : [...sides].reverse();
          for (const side of order) {
            const phase = phaseOf(side.publish, round);
            const publish = () => publishMessages(phase, side.topicId, messages, { client: side.http });
            record(phase, await measure(phase, publish, side.on));
          }
          for (const side of order) {
            const phase = phaseOf(side.pull, round);
            const drain = () => drainMessages(phase, side.topicId, messages, { client: side.http });
            record(phase, await measure(phase, drain, side.on));
          }
        }
        for (const side of sides) {
          keepMedianRound(results, side.publish, repeats(side.publish), 'msgPerSec');
          keepMedianRound(results, side.pull, repeats(side.pull), 'msgPerSec');
        }
        for (const side of sides) await deleteTopic(side.http, side.topicId, [side.topicId]);
      } finally {
        await authBroker.stop().catch(() => {});
      }
    };

    /**
     * Small requests (bench/small-requests.ts): BENCH_SMALL_ROUNDS rounds, each running for
     * BENCH_SMALL_SECONDS the bare Fastify route and one-message publishes (in alternating
     * order), then pulls of up to 5 from a fresh backlog, deadline changes of what they got, and
     * acknowledgements of all of it. Each keeps its median round by throughput.
     */
    const smallWorkload = async () => {
      const bare = await startBareRoute(redis!.url);
      ownPids.push(bare.pid);
      onCleanup(() => bare.stop());
      log(`bare Fastify route on ${bare.baseUrl} (pid ${bare.pid})`);
      const onBare: Deployment = { brokers: { '': bare.pid }, redis: single.redis };
      const topicId = 'bench-small';
      await createTopic(client, topicId, [{ id: topicId }]);
      // Nothing pulled may run out while the deadline changes and acknowledgements wait their turn.
      await client.json('PATCH', subscriptionPath(topicId), {
        subscription: { ackDeadlineSeconds: 600 },
        updateMask: 'ackDeadlineSeconds',
      });
      const loop = (workload: string, baseUrl: string, next: Parameters<typeof requestLoop>[0]['next']) =>
        requestLoop({ workload, baseUrl, connections: config.smallConnections, seconds: config.smallSeconds, next });
      const fill = async (count: number) => {
        const batch = { messages: Array.from({ length: config.publishBatch }, () => SMALL_MESSAGE) };
        let left = Math.ceil(count / config.publishBatch);
        await runConcurrently(c, config.timeoutMs, 'small: backlog', async () => {
          while (left-- > 0) await client.json('POST', `${topicPath(topicId)}:publish`, batch);
        });
      };
      const sides = [
        { key: KEYS.smallBare, baseUrl: bare.baseUrl, next: bareRequests(), on: onBare },
        { key: KEYS.smallPublish, baseUrl: broker!.baseUrl, next: publishRequests(topicId), on: single },
      ];
      const repeats = (key: string) =>
        Array.from({ length: config.smallRounds - 1 }, (_, i) => `${key} (round ${i + 2})`);
      const phaseOf = (key: string, round: number) => (round === 0 ? key : repeats(key)[round - 1]);
      try {
        // Warm-up, not measured: both servers compile their paths.
        for (const side of sides)
          await requestLoop({
            workload: 'warm-up',
            baseUrl: side.baseUrl,
            connections: config.smallConnections,
            seconds: 1,
            next: side.next,
          });
        for (let round = 0; round < config.smallRounds; round++) {
          for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
            const phase = phaseOf(side.key, round);
            record(phase, await measure(phase, () => loop(phase, side.baseUrl, side.next), side.on));
          }
          await fill(config.smallBacklog);
          const leased: string[][] = [];
          const modified: string[][] = [];
          const pullPhase = phaseOf(KEYS.smallPull, round);
          record(
            pullPhase,
            await measure(pullPhase, () => loop(pullPhase, broker!.baseUrl, pullRequests(topicId, 5, leased))),
          );
          const modifyPhase = phaseOf(KEYS.smallModify, round);
          record(
            modifyPhase,
            await measure(modifyPhase, () =>
              loop(modifyPhase, broker!.baseUrl, modifyRequests(topicId, leased, modified)),
            ),
          );
          // Every group is acknowledged: those whose deadline changed, then the rest.
          const ackPhase = phaseOf(KEYS.smallAck, round);
          const groups = [...modified, ...leased.slice(modified.length)];
          record(
            ackPhase,
            await measure(ackPhase, () =>
              requestLoop({
                workload: ackPhase,
                baseUrl: broker!.baseUrl,
                connections: config.smallConnections,
                seconds: config.timeoutMs / 1000,
                next: acknowledgeRequests(topicId, groups),
              }),
            ),
          );
        }
        for (const key of [KEYS.smallBare, KEYS.smallPublish, KEYS.smallPull, KEYS.smallModify, KEYS.smallAck]) {
          keepMedianRound(results, key, repeats(key), 'msgPerSec');
        }
        await deleteTopic(client, topicId, [topicId]);
      } finally {
        bare.stop();
      }
    };

    /**
     * Replay: pull+ack with retainAckedMessages against without (two topics: the log is the
     * topic's), then seeks over a backlog of BENCH_SEEK_MESSAGES retained messages.
     */
    const replayWorkload = async () => {
      const drains = [
        { key: KEYS.pullNotRetained, topicId: 'bench-replay-none', subscriptionId: 'bench-replay-none' },
        { key: KEYS.pullRetained, topicId: 'bench-replay-retained', subscriptionId: 'bench-replay-retained' },
      ];
      for (const { topicId, subscriptionId, key } of drains) {
        await createTopic(client, topicId, [{ id: subscriptionId, retainAckedMessages: key === KEYS.pullRetained }]);
      }
      await alternatingDrains('replay', drains);
      for (const { topicId, subscriptionId } of drains) await deleteTopic(client, topicId, [subscriptionId]);
      results.replay = await seekWorkload({
        client,
        admin,
        keyPrefix: KEY_PREFIX,
        messages: roundToBatch(config.seekMessages),
        publish: (workload, topicId, count) => publishMessages(workload, topicId, count),
        drain: (workload, subscriptionId, count) => drainMessages(workload, subscriptionId, count),
        measure,
        log,
      });
    };

    /**
     * Scheduled delivery and idempotent publish: a publish whose every message carries a delivery
     * time, and one whose every message carries an idempotency key of its own, against one
     * without, back to back on three topics; then pull+ack of the messages published for now
     * against the same number that all fall due at one moment (their time is set past the end
     * of their publish, and the drain starts once it has come).
     */
    const scheduledWorkload = async () => {
      const now = 'bench-scheduled-now';
      const later = 'bench-scheduled-later';
      await createTopic(client, now, [{ id: now }]);
      await createTopic(client, later, [{ id: later }]);
      record(KEYS.publishNow, await measure(KEYS.publishNow, () => publishMessages(KEYS.publishNow, now)));
      // Idempotent publish, on a third topic: every message with a key of its own.
      const keyed = 'bench-idempotent';
      await createTopic(client, keyed, [{ id: keyed }]);
      record(
        KEYS.publishIdempotent,
        await measure(KEYS.publishIdempotent, () =>
          publishMessages(KEYS.publishIdempotent, keyed, messages, {
            body: idempotentBodies(config.publishBatch, config.dataBytes, String(Date.now())),
          }),
        ),
      );
      await deleteTopic(client, keyed, [keyed]);
      // The delivery time is set when the publish starts (a phase may first wait for a quiet
      // machine): far enough ahead for it to end before, near enough not to keep the run waiting.
      let dueAtMs = 0;
      let publishEndedBeforeDue = false;
      record(
        KEYS.publishScheduled,
        await measure(KEYS.publishScheduled, async () => {
          dueAtMs = Date.now() + SCHEDULED_LEAD_MS;
          const dueAt = new Date(dueAtMs).toISOString();
          const scheduledBodies = publishBodies(64, config.publishBatch, config.dataBytes, () => ({
            'pubsub-broker/delivery-time': dueAt,
          }));
          const published = await publishMessages(KEYS.publishScheduled, later, messages, { bodies: scheduledBodies });
          publishEndedBeforeDue = Date.now() < dueAtMs;
          return published;
        }),
      );
      record(KEYS.pullNow, await measure(KEYS.pullNow, () => drainMessages(KEYS.pullNow, now)));
      // Well before the time, a pull finds nothing (one that did would lease what it found).
      if (publishEndedBeforeDue && Date.now() < dueAtMs - 1000) {
        const early = (await client.json('POST', `${subscriptionPath(later)}:pull`, {
          maxMessages: 10,
          returnImmediately: true,
        })) as { receivedMessages?: unknown[] };
        if (early.receivedMessages?.length) {
          throw new Error(`${KEYS.pullFallenDue}: a message was delivered before its delivery time`);
        }
      }
      log(`waiting ${(Math.max(0, dueAtMs - Date.now()) / 1000).toFixed(1)} s for the delivery time...`);
      await sleep(Math.max(0, dueAtMs - Date.now()) + 100);
      const fallenDue = await measure(KEYS.pullFallenDue, () => drainMessages(KEYS.pullFallenDue, later));
      fallenDue.notes = { ...fallenDue.notes, publishEndedBeforeDue: String(publishEndedBeforeDue) };
      record(KEYS.pullFallenDue, fallenDue);
      await deleteTopic(client, now, [now]);
      await deleteTopic(client, later, [later]);
    };

    /**
     * The outbox step: drains of two backlogs in which every message gets a follow-up on its own
     * topic, one acknowledging and then publishing the follow-ups in two calls, the other with
     * one :acknowledgeAndPublish (every key of the call shares the topic's hash tag: one
     * script). On each topic the drained subscription takes the jobs, and a second one the
     * follow-ups (filters on the attribute FOLLOW_UP), so that a drain ends with its backlog.
     */
    const outboxWorkload = async () => {
      const FOLLOW_UP = 'followUp';
      const drains = [
        { key: KEYS.ackThenPublish, topicId: 'bench-outbox-two-calls' },
        { key: KEYS.ackAndPublish, topicId: 'bench-outbox-one-call' },
      ];
      const followUpsOf = (topicId: string) => `${topicId}-follow-ups`;
      for (const { key, topicId } of drains) {
        await createTopic(client, topicId, [
          { id: topicId, filter: `NOT attributes:${FOLLOW_UP}` },
          { id: followUpsOf(topicId), filter: `attributes:${FOLLOW_UP}` },
        ]);
        await publishMessages(`${key} (backlog)`, topicId);
      }
      const followUpsFor = (batch: PulledMessage[]) =>
        batch.map((m) => ({
          data: Buffer.from(`done ${m.message.messageId}`).toString('base64'),
          attributes: { [FOLLOW_UP]: '1' },
        }));
      const send = async (
        kind: string,
        path: string,
        body: unknown,
        latency: (kind: string, started: number) => void,
      ) => {
        const started = performance.now();
        const response = await client.request('POST', path, JSON.stringify(body));
        latency(kind, started);
        if (response.status !== 200)
          throw new Error(`${kind} -> HTTP ${response.status}: ${response.body.toString().slice(0, 300)}`);
      };
      for (const { key, topicId } of drains) {
        const oneCall = key === KEYS.ackAndPublish;
        record(
          key,
          await measure(key, () =>
            pullAckWorkload({
              workload: key,
              client,
              subscriptionId: topicId,
              messages,
              maxMessages: OUTBOX_BATCH,
              concurrency: c,
              timeoutMs: config.timeoutMs,
              settle: async (batch, latency) => {
                const ackIds = batch.map((m) => m.ackId);
                if (oneCall) {
                  await send(
                    'acknowledgeAndPublish',
                    `${subscriptionPath(topicId)}:acknowledgeAndPublish`,
                    {
                      ackIds,
                      publish: [{ topic: `projects/${PROJECT}/topics/${topicId}`, messages: followUpsFor(batch) }],
                    },
                    latency,
                  );
                } else {
                  await send('ack', `${subscriptionPath(topicId)}:acknowledge`, { ackIds }, latency);
                  await send('publish', `${topicPath(topicId)}:publish`, { messages: followUpsFor(batch) }, latency);
                }
              },
            }),
          ),
        );
      }
      for (const { topicId } of drains) await deleteTopic(client, topicId, [topicId, followUpsOf(topicId)]);
    };

    /**
     * The backlog view: pages of 1,000 available messages (full view, data included) read one
     * after the other, following each page's token, from a subscription with 10,000 waiting and
     * from one with BENCH_BACKLOG_MESSAGES waiting; BACKLOG_ROUNDS rounds in alternating order,
     * each keeping its median round by rate. Rate = messages read per second, latency per page.
     */
    const backlogWorkload = async () => {
      const backlogs = [
        { key: KEYS.backlogPagesSmall, topicId: 'bench-backlog-small', waiting: roundToBatch(10_000) },
        { key: KEYS.backlogPagesLarge, topicId: 'bench-backlog-large', waiting: roundToBatch(config.backlogMessages) },
      ];
      for (const { key, topicId, waiting } of backlogs) {
        await createTopic(client, topicId, [{ id: topicId }]);
        log(`backlog: publishing ${waiting.toLocaleString('en-US')} messages...`);
        await publishMessages(`${key} (backlog)`, topicId, waiting);
      }
      const readPages = (workload: string, topicId: string, waiting: number) => async (): Promise<ThroughputResult> => {
        const latency = new Latency();
        let read = 0;
        let token = '';
        const started = performance.now();
        for (let page = 0; page < BACKLOG_PAGES; page++) {
          const query = `pageSize=1000&state=AVAILABLE${token ? `&pageToken=${encodeURIComponent(token)}` : ''}`;
          const pageStarted = performance.now();
          const response = await client.request('GET', `${subscriptionPath(topicId)}/messages?${query}`);
          latency.since(pageStarted);
          if (response.status !== 200) {
            throw new Error(`${workload} -> HTTP ${response.status}: ${response.body.toString().slice(0, 300)}`);
          }
          const body = JSON.parse(response.body.toString()) as { messages?: unknown[]; nextPageToken?: string };
          read += body.messages?.length ?? 0;
          token = body.nextPageToken ?? '';
        }
        const seconds = (performance.now() - started) / 1000;
        return {
          workload,
          messages: read,
          seconds,
          msgPerSec: read / seconds,
          latency: { page: latency.summary() },
          notes: { waiting },
        };
      };
      const repeats = (key: string) => Array.from({ length: BACKLOG_ROUNDS - 1 }, (_, i) => `${key} (round ${i + 2})`);
      for (let round = 0; round < BACKLOG_ROUNDS; round++) {
        for (const { key, topicId, waiting } of round % 2 === 0 ? backlogs : [...backlogs].reverse()) {
          const phase = round === 0 ? key : repeats(key)[round - 1];
          record(phase, await measure(phase, readPages(phase, topicId, waiting)));
        }
      }
      for (const { key, topicId } of backlogs) {
        keepMedianRound(results, key, repeats(key), 'msgPerSec');
        await deleteTopic(client, topicId, [topicId]);
      }
    };

    // Warm-up: JIT, connection pools, script cache. Not reported.
    if (config.warmupMessages > 0) {
      const warm = roundToBatch(config.warmupMessages);
      log(`warm-up (${warm} messages)...`);
      brokerRss.phase('warm-up');
      await createTopic(client, 'warmup', [{ id: 'warmup' }, { id: 'warmup-eo', exactlyOnce: true }]);
      await publishMessages('warm-up', 'warmup', warm);
      for (const id of ['warmup', 'warmup-eo']) {
        await drainMessages('warm-up', id, warm);
      }
      await deleteTopic(client, 'warmup', ['warmup', 'warmup-eo']);
      if (runs('ordered') || runs('keys')) {
        log(`warm-up ordered (${warm} messages, twice)...`);
        await orderedPublishAndDrain('warmup-ordered', false, warm);
        await orderedPublishAndDrain('warmup-ordered-eo', true, warm);
      }
      if (runs('streaming')) {
        log(`warm-up streaming and BullMQ end-to-end (${warm} messages each)...`);
        await streamingThroughput('warm-up (streaming)', 'warmup-stream', warm);
        await bullmqEndToEnd('warm-up (BullMQ end-to-end)', 'warmup-e2e', warm);
      }
    }

    if (runs('publish') || runs('pull'))
      await publishAndDrain('bench-1sub', 'bench-1sub', false, KEYS.publish, runs('pull') ? KEYS.pull : undefined);
    // Right after the single-region pull+ack, which its bar compares with.
    if (runs('regions')) await regionsWorkload();
    if (runs('eo')) await publishAndDrain('bench-eo', 'bench-eo', true, KEYS.publishEo, KEYS.pullEo);
    if (runs('ordered')) {
      await orderedPublishAndDrain('bench-ordered', false, messages, {
        publish: KEYS.publishOrdered,
        pull: KEYS.pullOrdered,
      });
      await orderedPublishAndDrain('bench-ordered-eo', true, messages, {
        publish: KEYS.publishOrderedEo,
        pull: KEYS.pullOrderedEo,
      });
    }
    if (runs('keys')) {
      // The same messages over few keys (a hundred each, published a hundred per request) and
      // over many (one each, one per request): pull+ack must cost Redis as much per message.
      // The sides alternate over BENCH_KEYS_ROUNDS rounds, so both see the machine at its
      // fastest and its slowest; each keeps its median round.
      const sides = [
        {
          topicId: 'bench-keys-few',
          keys: { publish: KEYS.publishFewKeys, pull: KEYS.pullFewKeys },
          bodies: new OrderedBodies(64, MANY_ORDERING_KEYS / FEW_ORDERING_KEYS, config.dataBytes, FEW_ORDERING_KEYS),
        },
        {
          topicId: 'bench-keys-many',
          keys: { publish: KEYS.publishManyKeys, pull: KEYS.pullManyKeys },
          bodies: new OrderedBodies(64, 1, config.dataBytes, MANY_ORDERING_KEYS),
        },
      ];
      const roundPhase = (key: string, round: number) => (round === 0 ? key : `${key} (round ${round + 1})`);
      const repeats = (key: string) => Array.from({ length: config.keysRounds - 1 }, (_, i) => roundPhase(key, i + 1));
      for (let round = 0; round < config.keysRounds; round++) {
        for (const side of round % 2 === 0 ? sides : [...sides].reverse()) {
          const phases = { publish: roundPhase(side.keys.publish, round), pull: roundPhase(side.keys.pull, round) };
          await orderedPublishAndDrain(side.topicId, false, MANY_ORDERING_KEYS, phases, side.bodies);
        }
      }
      for (const side of sides) {
        keepMedianRound(results, side.keys.publish, repeats(side.keys.publish), 'msgPerSec');
        keepMedianRound(results, side.keys.pull, repeats(side.keys.pull), 'redisUsPerMessage');
      }
    }
    if (runs('publish2')) {
      await createTopic(client, 'bench-2subs', [{ id: 'bench-2subs-a' }, { id: 'bench-2subs-b' }]);
      record(KEYS.publish2, await measure(KEYS.publish2, () => publishMessages(KEYS.publish2, 'bench-2subs')));
      await deleteTopic(client, 'bench-2subs', ['bench-2subs-a', 'bench-2subs-b']);
    }
    if (runs('filters')) {
      // Ten subscriptions of one topic, unfiltered (each takes every message) against filtered
      // (each takes the tenth of the messages whose "tenant" attribute it names).
      const tenants = 10;
      const tenantBodies = publishBodies(64, config.publishBatch, config.dataBytes, (i) => ({
        tenant: String(i % tenants),
      }));
      for (const [key, topicId, filtered] of [
        [KEYS.publishFanout, 'bench-fanout', false],
        [KEYS.publishFiltered, 'bench-filtered', true],
      ] as const) {
        const subscriptions = Array.from({ length: tenants }, (_, tenant) => ({
          id: `${topicId}-${tenant}`,
          ...(filtered ? { filter: `attributes.tenant = "${tenant}"` } : {}),
        }));
        await createTopic(client, topicId, subscriptions);
        record(key, await measure(key, () => publishMessages(key, topicId, messages, { bodies: tenantBodies })));
        await deleteTopic(
          client,
          topicId,
          subscriptions.map((sub) => sub.id),
        );
      }
    }
    if (runs('policies')) await policiesWorkload();
    if (runs('auth')) await authWorkload();
    if (runs('scheduled')) await scheduledWorkload();
    if (runs('outbox')) await outboxWorkload();
    if (runs('backlog')) await backlogWorkload();
    if (runs('metrics')) {
      const layout = { subscriptions: config.metricsSubscriptions, topics: config.metricsTopics };
      const brokerPid = broker.pid;
      log(`metrics: ${layout.subscriptions.toLocaleString('en-US')} subscriptions on ${layout.topics} topics...`);
      await setUpMetricsWorkload(client, layout, c);
      await client.request('GET', '/metrics'); // the first reads every record; not measured
      record(
        KEYS.metricsScrape,
        await measure(KEYS.metricsScrape, () => scrapeMetrics(client, KEYS.metricsScrape, brokerPid)),
      );
      record(
        KEYS.housekeepingPass,
        await measure(KEYS.housekeepingPass, () => housekeepingPasses(redis!.url, KEY_PREFIX, KEYS.housekeepingPass)),
      );
      await tearDownMetricsWorkload(client, layout);
    }
    if (runs('replay')) await replayWorkload();
    if (runs('push')) {
      record(
        KEYS.push,
        await pushWorkload({
          workload: KEYS.push,
          client,
          admin,
          keyPrefix: KEY_PREFIX,
          topicId: 'bench-push',
          messages,
          timeoutMs: config.timeoutMs,
          publish: () => publishMessages(KEYS.push, 'bench-push'),
          measure: (run) => measure(KEYS.push, run),
        }),
      );
    }
    if (runs('streaming')) {
      record(
        KEYS.streamE2e,
        await measure(KEYS.streamE2e, () => streamingThroughput(KEYS.streamE2e, 'bench-stream', messages)),
      );
      await createTopic(client, 'bench-stream-paced', [{ id: 'bench-stream-paced' }]);
      record(
        KEYS.streamLatency,
        await measure(KEYS.streamLatency, () =>
          streamingLatencyWorkload({
            workload: KEYS.streamLatency,
            client,
            admin,
            keyPrefix: KEY_PREFIX,
            topicId: 'bench-stream-paced',
            subscriptionId: 'bench-stream-paced',
            stream,
            rate: config.latencyRate,
            seconds: config.latencySeconds,
            batch: config.latencyBatch,
            dataBytes: config.dataBytes,
            timeoutMs: config.timeoutMs,
          }),
        ),
      );
      const paced = results.workloads[KEYS.streamLatency].latency[E2E_LATENCY];
      log(`  ${E2E_LATENCY} p50 ${paced.p50Ms} ms, p99 ${paced.p99Ms} ms, max ${paced.maxMs} ms`);
      await deleteTopic(client, 'bench-stream-paced', ['bench-stream-paced']);
      record(KEYS.bullE2e, await measure(KEYS.bullE2e, () => bullmqEndToEnd(KEYS.bullE2e, 'bench-e2e', messages)));
    }
    if (runs('waiters')) {
      // Many consumers waiting on one subscription: the same streaming end-to-end run with 1, 100
      // and BENCH_WAITERS_STREAMS connected streams (opening them is not measured), then single
      // messages published to 1 and to BENCH_WAITERS_POLLS waiting long polls.
      const count = roundToBatch(config.waitersMessages);
      for (const [key, subscribers] of [
        [KEYS.streamOne, 1],
        [KEYS.streamHundred, 100],
        [KEYS.streamMany, config.waitersStreams],
      ] as const) {
        const measured = <T>(run: () => Promise<T>) => measure(key, run);
        record(key, await streamingThroughput(key, 'bench-waiters-stream', count, { subscribers, measure: measured }));
      }
      for (const [key, waiters] of [
        [KEYS.longPollOne, 1],
        [KEYS.longPollMany, config.waitersPolls],
      ] as const) {
        await createTopic(client, 'bench-waiters-poll', [{ id: 'bench-waiters-poll' }]);
        const result = await measure(key, () =>
          longPollWakeupWorkload({
            workload: key,
            baseUrl: broker!.baseUrl,
            admin,
            topicId: 'bench-waiters-poll',
            subscriptionId: 'bench-waiters-poll',
            waiters,
            rounds: config.waitersRounds,
            timeoutMs: config.timeoutMs,
          }),
        );
        record(key, result);
        const arrival = result.latency['publish->arrival'];
        log(`  publish->arrival p50 ${arrival.p50Ms} ms; ${result.notes?.scriptsPerPublishMean} scripts per publish`);
        await deleteTopic(client, 'bench-waiters-poll', ['bench-waiters-poll']);
      }
    }
    if (runs('clients')) await clientsWorkload();
    if (runs('small')) await smallWorkload();
    if (runs('memory')) {
      const memory = await measure('memory (2 subs, retained)', () =>
        memoryWorkload({
          client,
          admin,
          keyPrefix: KEY_PREFIX,
          topicId: 'bench-memory',
          subscriptionIds: ['bench-memory-a', 'bench-memory-b'],
          messages: roundToBatch(config.memoryMessages),
          batch: config.publishBatch,
          concurrency: c,
          bodies,
          timeoutMs: config.timeoutMs,
        }),
      );
      const { publish: _publish, ...rest } = memory;
      results.memory = rest;
      log(`  ${memory.bytesPerMessage.toFixed(1)} B per retained message`);
    }

    if (runs('bullmq')) {
      const target = { host: '127.0.0.1', port: redis.port };
      const payloads = bullmqPayloads();
      if (config.warmupMessages > 0) {
        const warm = roundToBatch(config.warmupMessages);
        log(`BullMQ warm-up (${warm} jobs)...`);
        await bullmqAddWorkload({
          workload: 'warm-up',
          target,
          queueName: 'warmup',
          messages: warm,
          batch: config.publishBatch,
          concurrency: c,
          payloads,
          timeoutMs: config.timeoutMs,
        });
        await bullmqProcessWorkload({
          workload: 'warm-up',
          target,
          queueName: 'warmup',
          messages: warm,
          concurrency: config.bullmqConcurrency,
          timeoutMs: config.timeoutMs,
        });
      }
      record(
        KEYS.bullAdd,
        await measure(KEYS.bullAdd, () =>
          bullmqAddWorkload({
            workload: KEYS.bullAdd,
            target,
            queueName: 'bench',
            messages,
            batch: config.publishBatch,
            concurrency: c,
            payloads,
            timeoutMs: config.timeoutMs,
          }),
        ),
      );
      record(
        KEYS.bullProcess,
        await measure(KEYS.bullProcess, () =>
          bullmqProcessWorkload({
            workload: KEYS.bullProcess,
            target,
            queueName: 'bench',
            messages,
            concurrency: config.bullmqConcurrency,
            timeoutMs: config.timeoutMs,
          }),
        ),
      );
    }
  } catch (error) {
    results.error = (error as Error).stack ?? String(error);
    process.exitCode = 1;
  } finally {
    brokerRss?.stop();
    redisRss?.stop();
    if (brokerRss) {
      results.broker.maxRssBytes = brokerRss.maxBytes;
      const atMax = brokerRss.atMax;
      if (atMax) results.broker.atMaxRss = { anon: atMax.anon, file: atMax.file, shmem: atMax.shmem };
      results.broker.rssSamples = brokerRss.samples;
      results.broker.maxRssBytesPerPhase = brokerRss.perPhaseMaxBytes;
    }
    if (redisRss) results.redis.maxRssBytes = redisRss.maxBytes;
    if (redis) results.redis.slowlog = await readSlowlog(redis).catch(() => undefined);
    // A graceful stop lets `--cpu-prof` in BENCH_BROKER_NODE_ARGS write its profile.
    await broker?.stop().catch(() => {});
    await cleanup();
  }

  results.finishedAt = new Date().toISOString();
  computeRatios(results);
  computeBars(results);
  process.stdout.write(`\n${renderReport(results)}\n`);
  writeResults(config.resultsFile, results);
  log(`results written to ${config.resultsFile}`);
  // BENCH_STRICT=1: a failed bar fails the run (for CI); otherwise only errors do.
  if (process.env.BENCH_STRICT === '1' && results.bars.some((bar) => bar.status === 'FAIL')) {
    process.exitCode = process.exitCode || 2;
  }
}

await main();
// Everything is closed by now; do not let a stray client handle keep the run from ending.
process.exit();
