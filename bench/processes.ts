/**
 * The processes a benchmark run owns: its own redis-server (temp dir, AOF everysec like the
 * broker's managed Redis, no RDB snapshots) and the broker as a separate child process, whose
 * RSS is sampled from /proc; for the regions workload, one redis-server and one broker per region. Everything registered here is torn down by `cleanup()`, which
 * run.ts calls on normal exit, on errors, and on SIGINT/SIGTERM.
 */
import { execFileSync, fork, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';

const HOST = '127.0.0.1';

// ------------------------------------------------------------------ clean-up registry

const children = new Set<ChildProcess>();
const tempDirs = new Set<string>();
const closers = new Set<() => Promise<void> | void>();

/** Registers an async closer (clients, samplers); run before children are killed. */
export function onCleanup(fn: () => Promise<void> | void): void {
  closers.add(fn);
}

let cleaning: Promise<void> | undefined;

/** Closes clients, stops children (TERM, then KILL after 5 s) and removes temp dirs. Idempotent. */
export function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    for (const close of [...closers].reverse()) {
      try {
        await Promise.race([close(), sleep(2000, undefined, { ref: false })]);
      } catch {
        // best effort
      }
    }
    closers.clear();
    await Promise.all([...children].map((child) => stopChild(child, 5000)));
    cleanupSync();
  })();
  return cleaning;
}

/** Last resort from process.on('exit'): no awaiting possible, so KILL and rm synchronously. */
export function cleanupSync(): void {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        child.kill('SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  children.clear();
  for (const dir of tempDirs) fs.rmSync(dir, { recursive: true, force: true });
  tempDirs.clear();
}

async function stopChild(child: ChildProcess, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timedOut = await Promise.race([
    exited.then(() => false),
    sleep(graceMs, undefined, { ref: false }).then(() => true),
  ]);
  if (timedOut) {
    child.kill('SIGKILL');
    await exited;
  }
  children.delete(child);
}

export function makeTempDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  tempDirs.add(dir);
  return dir;
}

// ------------------------------------------------------------------ helpers

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, HOST, () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

async function waitUntil(
  what: string,
  timeoutMs: number,
  child: ChildProcess,
  check: () => Promise<boolean>,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(
        `${what}: the process exited (code ${child.exitCode}, signal ${child.signalCode}) before it was ready`,
      );
    }
    if (await check().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`${what}: not ready after ${timeoutMs} ms`);
    await sleep(100);
  }
}

export interface RssReading {
  /** VmRSS */
  rss: number;
  /** RssAnon (heap, malloc, thread stacks), RssFile (mapped binary and libraries), RssShmem. */
  anon: number;
  file: number;
  shmem: number;
}

/** Reads VmRSS and its parts of a process in bytes, or undefined once it is gone. */
export function readRss(pid: number): RssReading | undefined {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+)\\s+kB`, 'm').exec(status)?.[1] ?? NaN) * 1024;
    const rss = kb('VmRSS');
    if (!Number.isFinite(rss)) return undefined;
    return { rss, anon: kb('RssAnon'), file: kb('RssFile'), shmem: kb('RssShmem') };
  } catch {
    return undefined;
  }
}

// ------------------------------------------------------------------ redis-server

export interface RedisServer {
  port: number;
  url: string;
  pid: number;
  dir: string;
  version: string;
  /** A client for the bench's own use (INFO, SLOWLOG...); closed by cleanup(). */
  admin: Redis;
}

export async function startRedis(binary: string): Promise<RedisServer> {
  const dir = makeTempDir('pubsub-bench-redis-');
  const port = await freePort();
  const args = [
    '--port',
    String(port),
    '--bind',
    HOST,
    '--dir',
    dir,
    '--appendonly',
    'yes',
    '--appendfsync',
    'everysec',
    // The append-only file is rewritten between phases (compactAof), never during one.
    '--auto-aof-rewrite-percentage',
    '0',
    '--save',
    '',
    '--daemonize',
    'no',
    '--logfile',
    path.join(dir, 'redis.log'),
    '--slowlog-log-slower-than',
    '10000',
    '--slowlog-max-len',
    '256',
  ];
  const child = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  children.add(child);
  const stderr: Buffer[] = [];
  child.stderr?.on('data', (chunk: Buffer) => stderr.push(chunk));
  child.once('error', (error) => stderr.push(Buffer.from(String(error))));
  const admin = new Redis({ host: HOST, port, lazyConnect: true, maxRetriesPerRequest: 1, enableOfflineQueue: false });
  admin.on('error', () => {});
  try {
    await waitUntil(`redis-server on port ${port}`, 10_000, child, async () => {
      if (admin.status !== 'ready') {
        if (admin.status === 'wait' || admin.status === 'end') await admin.connect();
        else return false;
      }
      return (await admin.ping()) === 'PONG';
    });
  } catch (error) {
    admin.disconnect();
    throw new Error(`${(error as Error).message}\n${Buffer.concat(stderr).toString()}`);
  }
  onCleanup(() => {
    admin.disconnect();
  });
  const info = await admin.info('server');
  const version = /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
  return { port, url: `redis://${HOST}:${port}`, pid: child.pid!, dir, version, admin };
}

/**
 * Rewrites the append-only file, when it has grown by more than a mebibyte since it was last
 * rewritten (BGREWRITEAOF), and waits until no rewrite runs: before each phase. The bench's
 * Redis rewrites it only here. Left to itself, Redis starts a rewrite whenever the file has
 * doubled since the last (and is over 64 MB): the rewrite forks, its child competes for the
 * cores, and until it is done every page the server writes is copied first. Which phase paid
 * for it was chance: one that began where another's writes left the file, or the one that
 * wrote the most. Between phases, it costs none of them.
 */
export async function compactAof(admin: Redis): Promise<void> {
  const readPersistence = async () => {
    const info = await admin.info('persistence');
    return (field: string) => persistenceField(info, field);
  };
  let field = await readPersistence();
  if (field('aof_current_size') - field('aof_base_size') > 1024 * 1024) {
    // A rewrite already under way does as well as one begun now.
    await admin.call('BGREWRITEAOF').catch((error: Error) => {
      if (!/already in progress/.test(error.message)) throw error;
    });
    field = await readPersistence();
  }
  const busyFields = ['aof_rewrite_in_progress', 'aof_rewrite_scheduled', 'rdb_bgsave_in_progress'];
  while (busyFields.some((name) => field(name) > 0)) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    field = await readPersistence();
  }
}

function persistenceField(info: string, field: string): number {
  return Number(new RegExp(`^${field}:(\\d+)`, 'm').exec(info)?.[1] ?? 0);
}

// ------------------------------------------------------------------ broker child

export interface BrokerProcess {
  port: number;
  baseUrl: string;
  pid: number;
  entry: string;
  child: ChildProcess;
  /** Stops the broker gracefully (lets --cpu-prof write its profile). */
  stop(): Promise<void>;
}

/** What `npm start` runs: the esbuild bundle of src/server.ts, built now so it is current. */
export function buildBrokerBundle(): string {
  execFileSync('npm', ['run', 'build', '--silent'], { stdio: 'inherit' });
  return 'dist/server.mjs';
}

/** One region of a deployment with regions: its name and its Redis. */
export interface RegionTarget {
  name: string;
  redisUrl: string;
}

/**
 * Without `regions`, a single-region broker on `redisUrl`. With `regions`, the endpoint of
 * `regions.local` (REGION) in a deployment of `regions.all` (REGIONS, every region's Redis);
 * `redisUrl` must then be the local region's.
 */
export async function startBroker(options: {
  redisUrl: string;
  entry: string;
  nodeArgs: string[];
  keyPrefix: string;
  regions?: { local: string; all: RegionTarget[] };
  /** Any other settings (AUTH_TOKENS_FILE, say). */
  settings?: Record<string, string>;
}): Promise<BrokerProcess> {
  const port = await freePort();
  const env = {
    ...process.env,
    REDIS_URL: options.redisUrl,
    PORT: String(port),
    HOST,
    KEY_PREFIX: options.keyPrefix,
    LOG_LEVEL: 'warn',
    ...(options.regions
      ? {
          REGION: options.regions.local,
          REGIONS: options.regions.all.map((region) => `${region.name}=${region.redisUrl}`).join(','),
        }
      : {}),
    ...options.settings,
  };
  // A compiled entry (.js/.mjs) runs without the tsx loader, to compare with a production build.
  const loader = /\.[cm]?js$/.test(options.entry) ? [] : ['--import=tsx'];
  const child = spawn(process.execPath, [...options.nodeArgs, ...loader, options.entry], {
    env,
    stdio: ['ignore', 'inherit', 'inherit'],
  });
  children.add(child);
  const baseUrl = `http://${HOST}:${port}`;
  await waitUntil(`broker (${options.entry}) on port ${port}`, 30_000, child, async () => {
    const response = await fetch(`${baseUrl}/readyz`, { signal: AbortSignal.timeout(2000) });
    await response.arrayBuffer();
    return response.status === 200;
  });
  return {
    port,
    baseUrl,
    pid: child.pid!,
    entry: options.entry,
    child,
    stop: () => stopChild(child, 10_000),
  };
}

// ------------------------------------------------------------------ client children

/**
 * A Node script of the bench as a child process with an IPC channel (through tsx), stopped by
 * cleanup() like the broker: for clients whose CPU should not share the bench process.
 */
export function forkScript(script: string, env: Record<string, string>): ChildProcess {
  const child = fork(script, [], {
    env: { ...process.env, ...env },
    execArgv: ['--import=tsx'],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  return child;
}

// ------------------------------------------------------------------ RSS sampling

export interface RssSampler {
  /** Starts attributing samples to a named phase (max RSS per phase). */
  phase(name: string): void;
  stop(): void;
  readonly maxBytes: number;
  /** The whole reading (anon/file/shmem parts) at the maximum. */
  readonly atMax: RssReading | undefined;
  readonly samples: number;
  readonly perPhaseMaxBytes: Record<string, number>;
}

export function sampleRss(pid: number, intervalMs = 200): RssSampler {
  let maxBytes = 0;
  let atMax: RssReading | undefined;
  let samples = 0;
  let current = 'startup';
  const perPhaseMaxBytes: Record<string, number> = {};
  const take = () => {
    const reading = readRss(pid);
    if (reading === undefined) return;
    const { rss } = reading;
    samples++;
    if (rss > maxBytes) {
      maxBytes = rss;
      atMax = reading;
    }
    perPhaseMaxBytes[current] = Math.max(perPhaseMaxBytes[current] ?? 0, rss);
  };
  take();
  const timer = setInterval(take, intervalMs);
  timer.unref();
  const sampler: RssSampler = {
    phase(name: string) {
      take();
      current = name;
    },
    stop() {
      take();
      clearInterval(timer);
    },
    get maxBytes() {
      return maxBytes;
    },
    get atMax() {
      return atMax;
    },
    get samples() {
      return samples;
    },
    get perPhaseMaxBytes() {
      return perPhaseMaxBytes;
    },
  };
  onCleanup(() => clearInterval(timer));
  return sampler;
}
