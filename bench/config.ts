/**
 * Benchmark settings, all from the environment (see bench/README.md):
 *
 *   BENCH_MESSAGES          messages per throughput workload (default 100000)
 *   BENCH_CONCURRENCY       concurrent HTTP clients / addBulk callers (default 8)
 *   BENCH_MEMORY_MESSAGES   messages retained for the memory figure (default 50000)
 *   BENCH_WARMUP            messages published and pulled before measuring (default 20000; 0 = none)
 *   BENCH_BULLMQ_CONCURRENCY  BullMQ Worker concurrency (default 100)
 *   BENCH_ONLY              comma list of: publish, pull, eo, publish2, filters, policies, replay,
 *                           push, memory, bullmq, ordered, keys, streaming, regions, clients,
 *                           scheduled, outbox, backlog, metrics, auth, waiters, small (default all)
 *   BENCH_BACKLOG_MESSAGES  the large backlog the backlog pages are read from (default 1000000)
 *   BENCH_METRICS_SUBSCRIPTIONS  subscriptions of the metrics workload (default 10000)
 *   BENCH_METRICS_TOPICS    the topics they are spread over (default 100)
 *   BENCH_ORDERING_KEYS     ordering keys of the ordered workload (default 1000)
 *   BENCH_KEYS_ROUNDS       rounds of the keys workload, its two sides alternating; each reports
 *                           its median round by Redis CPU per message (default 5)
 *   BENCH_STREAM_SUBSCRIBERS  streaming pull subscribers (WebSockets) of the streaming workload (default 4)
 *   BENCH_STREAM_MAX_OUTSTANDING  their maxOutstandingMessages (default 2000)
 *   BENCH_WAITERS_MESSAGES  messages of each streaming run of the waiters workload (default 20000)
 *   BENCH_WAITERS_STREAMS   connected streams of its largest streaming run (default 1000)
 *   BENCH_WAITERS_POLLS     waiting long polls of its one-message publishes (default 1000)
 *   BENCH_WAITERS_ROUNDS    one-message publishes per long-poll run (default 20)
 *   BENCH_SMALL_CONNECTIONS connections of the small-requests workload, each sending one request at a
 *                           time (default 16)
 *   BENCH_SMALL_SECONDS     how long each of its loops sends (default 5)
 *   BENCH_SMALL_ROUNDS      its rounds, the loops alternating; each reports its median round (default 3)
 *   BENCH_SMALL_BACKLOG     messages (64 bytes each) published before each round's pulls (default 150000)
 *   BENCH_LATENCY_RATE      messages/s of the paced latency run (default 5000)
 *   BENCH_LATENCY_SECONDS   its length (default 10)
 *   BENCH_LATENCY_BATCH     messages per publish request in it (default 10)
 *   BENCH_BULLMQ_E2E_WORKERS      BullMQ Workers of the end-to-end baseline (default 4)
 *   BENCH_BULLMQ_E2E_CONCURRENCY  concurrency of each of them (default 100)
 *   BENCH_CLIENT_MESSAGES   messages per workload of the client comparison (default 30000)
 *   BENCH_CLIENT_PUBLISH_WINDOW  unresolved publishMessage calls of the official client (default 5000)
 *   BENCH_CLIENT_RECEIVE_ROUNDS  rounds of the streaming receives behind the gRPC/WebSocket CPU bar,
 *                           alternating; each reports its median round (default 3)
 *   BENCH_POLICIES_ROUNDS   rounds of the pull+ack with and without policies, alternating; each
 *                           reports its median round by throughput (default 3; also the
 *                           pull+ack with and without retainAckedMessages)
 *   BENCH_SEEK_MESSAGES     retained messages the seeks go over (default 1000000)
 *   BENCH_BROKER_NODE_ARGS  extra node flags for the broker child, e.g. "--cpu-prof --cpu-prof-dir=/tmp/prof"
 *   BENCH_BROKER_ENTRY      broker entry file (default: the dist/server.mjs bundle that npm start runs; src/server.ts runs through tsx)
 *   BENCH_REDIS_SERVER      redis-server binary (default: redis-server on PATH)
 *   BENCH_TIMEOUT_SECONDS   give up on one workload after this long (default 600)
 *   BENCH_QUIET_WAIT_SECONDS  before each phase, wait up to this long for other processes to use
 *                           < 10% of the CPU (default 30; 0 = never wait)
 *   BENCH_RESULTS           where to write the JSON results (default bench/results/latest.json)
 */
export const WORKLOAD_NAMES = [
  'publish',
  'pull',
  'eo',
  'publish2',
  'filters',
  'policies',
  'replay',
  'push',
  'memory',
  'bullmq',
  'ordered',
  'keys',
  'streaming',
  'regions',
  'clients',
  'scheduled',
  'outbox',
  'backlog',
  'metrics',
  'auth',
  'waiters',
  'small',
] as const;
export type WorkloadName = (typeof WORKLOAD_NAMES)[number];

export interface BenchConfig {
  messages: number;
  concurrency: number;
  memoryMessages: number;
  warmupMessages: number;
  bullmqConcurrency: number;
  orderingKeys: number;
  keysRounds: number;
  streamSubscribers: number;
  streamMaxOutstanding: number;
  waitersMessages: number;
  waitersStreams: number;
  waitersPolls: number;
  waitersRounds: number;
  smallConnections: number;
  smallSeconds: number;
  smallRounds: number;
  smallBacklog: number;
  latencyRate: number;
  latencySeconds: number;
  latencyBatch: number;
  bullmqE2eWorkers: number;
  bullmqE2eConcurrency: number;
  clientMessages: number;
  clientPublishWindow: number;
  clientReceiveRounds: number;
  policiesRounds: number;
  seekMessages: number;
  backlogMessages: number;
  metricsSubscriptions: number;
  metricsTopics: number;
  only: Set<WorkloadName>;
  brokerNodeArgs: string[];
  brokerEntry?: string;
  redisServer: string;
  timeoutMs: number;
  quietWaitMs: number;
  resultsFile: string;
  publishBatch: number;
  pullMax: number;
  dataBytes: number;
}

function positiveInt(env: NodeJS.ProcessEnv, name: string, fallback: number, min = 1): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min) throw new Error(`${name} must be an integer >= ${min}, got "${raw}"`);
  return value;
}

export function loadBenchConfig(env: NodeJS.ProcessEnv = process.env): BenchConfig {
  const onlyRaw = (env.BENCH_ONLY ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const name of onlyRaw) {
    if (!(WORKLOAD_NAMES as readonly string[]).includes(name)) {
      throw new Error(`BENCH_ONLY: unknown workload "${name}" (known: ${WORKLOAD_NAMES.join(', ')})`);
    }
  }
  return {
    messages: positiveInt(env, 'BENCH_MESSAGES', 100_000),
    concurrency: positiveInt(env, 'BENCH_CONCURRENCY', 8),
    memoryMessages: positiveInt(env, 'BENCH_MEMORY_MESSAGES', 50_000),
    warmupMessages: positiveInt(env, 'BENCH_WARMUP', 20_000, 0),
    bullmqConcurrency: positiveInt(env, 'BENCH_BULLMQ_CONCURRENCY', 100),
    orderingKeys: positiveInt(env, 'BENCH_ORDERING_KEYS', 1000),
    keysRounds: positiveInt(env, 'BENCH_KEYS_ROUNDS', 5),
    streamSubscribers: positiveInt(env, 'BENCH_STREAM_SUBSCRIBERS', 4),
    streamMaxOutstanding: positiveInt(env, 'BENCH_STREAM_MAX_OUTSTANDING', 2000),
    waitersMessages: positiveInt(env, 'BENCH_WAITERS_MESSAGES', 20_000),
    waitersStreams: positiveInt(env, 'BENCH_WAITERS_STREAMS', 1000),
    waitersPolls: positiveInt(env, 'BENCH_WAITERS_POLLS', 1000),
    waitersRounds: positiveInt(env, 'BENCH_WAITERS_ROUNDS', 20),
    smallConnections: positiveInt(env, 'BENCH_SMALL_CONNECTIONS', 16),
    smallSeconds: positiveInt(env, 'BENCH_SMALL_SECONDS', 5),
    smallRounds: positiveInt(env, 'BENCH_SMALL_ROUNDS', 3),
    smallBacklog: positiveInt(env, 'BENCH_SMALL_BACKLOG', 150_000),
    latencyRate: positiveInt(env, 'BENCH_LATENCY_RATE', 5000),
    latencySeconds: positiveInt(env, 'BENCH_LATENCY_SECONDS', 10),
    latencyBatch: positiveInt(env, 'BENCH_LATENCY_BATCH', 10),
    bullmqE2eWorkers: positiveInt(env, 'BENCH_BULLMQ_E2E_WORKERS', 4),
    bullmqE2eConcurrency: positiveInt(env, 'BENCH_BULLMQ_E2E_CONCURRENCY', 100),
    clientMessages: positiveInt(env, 'BENCH_CLIENT_MESSAGES', 30_000),
    clientPublishWindow: positiveInt(env, 'BENCH_CLIENT_PUBLISH_WINDOW', 5000),
    clientReceiveRounds: positiveInt(env, 'BENCH_CLIENT_RECEIVE_ROUNDS', 3),
    policiesRounds: positiveInt(env, 'BENCH_POLICIES_ROUNDS', 3),
    seekMessages: positiveInt(env, 'BENCH_SEEK_MESSAGES', 1_000_000),
    backlogMessages: positiveInt(env, 'BENCH_BACKLOG_MESSAGES', 1_000_000),
    metricsSubscriptions: positiveInt(env, 'BENCH_METRICS_SUBSCRIPTIONS', 10_000),
    metricsTopics: positiveInt(env, 'BENCH_METRICS_TOPICS', 100),
    only: new Set((onlyRaw.length ? onlyRaw : WORKLOAD_NAMES) as WorkloadName[]),
    brokerNodeArgs: (env.BENCH_BROKER_NODE_ARGS ?? '').split(/\s+/).filter(Boolean),
    brokerEntry: env.BENCH_BROKER_ENTRY || undefined,
    redisServer: env.BENCH_REDIS_SERVER || 'redis-server',
    timeoutMs: positiveInt(env, 'BENCH_TIMEOUT_SECONDS', 600) * 1000,
    quietWaitMs: positiveInt(env, 'BENCH_QUIET_WAIT_SECONDS', 30, 0) * 1000,
    resultsFile: env.BENCH_RESULTS || 'bench/results/latest.json',
    publishBatch: 100,
    pullMax: 1000,
    dataBytes: 1024,
  };
}
