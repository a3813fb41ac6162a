// Lifecycle of the throw-away Redis servers the test suite runs against:
// one standalone server and one 3-master Redis Cluster, all on 127.0.0.1.
//
// start-redis.ts / stop-redis.ts (tap's `before` / `after` programs) are thin
// wrappers around startServers() / stopServers() below.
//
// Design notes (why it looks like this):
// - The servers must outlive the short-lived `before` process, so they are
//   spawned detached with stdio ignored (an inherited stdout would keep tap's
//   output pipe open until Redis dies) and logged to files instead.
// - Several tap runs may overlap on one machine (two people, or an editor
//   plugin, running tests in the same checkout). So the state file keeps a list
//   of "users" (the PID of each tap runner that started/reused the servers):
//   a run reuses healthy servers, and `after` only stops them when the last
//   live user leaves. Users that died without running `after` (Ctrl-C, crash)
//   are pruned by liveness, so a crashed run never blocks or breaks the next.
// - If the servers are unhealthy or nobody alive uses them, they are replaced
//   by fresh ones, and anything else still answering on our ports (a leftover
//   from a run whose state file was lost) is asked to SHUTDOWN first.

import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { REDIS_HOST, clusterPorts, standalonePort, stateFilePath } from './redis-config.ts';

type Role = 'standalone' | 'cluster';

interface ServerInfo {
  role: Role;
  port: number;
  pid: number;
  logFile: string;
}

interface State {
  dir: string;
  servers: ServerInfo[];
  /** PIDs of the tap runners currently relying on these servers. */
  users: number[];
}

const log = (msg: string): void => {
  // stderr, because stdout of the before/after program is tap's TAP stream.
  process.stderr.write(`[test-redis] ${msg}\n`);
};

// ---------------------------------------------------------------- processes

/**
 * True if the process exists and is not a zombie. Zombies matter: in
 * containers without a reaping init, a killed redis-server can linger as a
 * zombie, which kill(pid, 0) still reports as alive.
 */
export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    // EPERM: exists but is someone else's. Count as alive; never ours to kill.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 3 (after the parenthesised command name) is the state letter.
    const stateLetter = stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3);
    return stateLetter !== 'Z' && stateLetter !== 'X';
  } catch {
    return true; // no /proc (macOS): trust kill(pid, 0)
  }
}

/** Guards against killing an unrelated process that reused a recorded PID. */
function looksLikeRedis(pid: number): boolean {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('redis-server');
  } catch {
    return process.platform !== 'linux'; // without /proc we cannot tell; trust the state file
  }
}

async function waitUntil(what: string, timeoutMs: number, check: () => Promise<boolean> | boolean): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await check()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(100);
  }
}

function portIsOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = net.connect({ host: REDIS_HOST, port });
    sock.setTimeout(1000);
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('timeout', () => {
      sock.destroy();
      resolve(false);
    });
    sock.once('error', () => resolve(false));
  });
}

// --------------------------------------------------------------- redis calls

/** Runs one command on a fresh connection; throws if the server is unreachable. */
async function redisCall(port: number, ...args: string[]): Promise<unknown> {
  const client = new Redis({
    host: REDIS_HOST,
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null, // fail fast: callers poll/retry themselves
    connectTimeout: 1000,
    enableOfflineQueue: false,
  });
  client.on('error', () => {}); // surfaced through the rejected promises instead
  try {
    await client.connect();
    return await client.call(args[0]!, ...args.slice(1));
  } finally {
    client.disconnect();
  }
}

async function pingOk(port: number): Promise<boolean> {
  try {
    return (await redisCall(port, 'PING')) === 'PONG';
  } catch {
    return false;
  }
}

async function clusterInfo(port: number): Promise<Record<string, string>> {
  const text = String(await redisCall(port, 'CLUSTER', 'INFO'));
  return Object.fromEntries(
    text
      .split(/\r?\n/)
      .filter((l) => l.includes(':'))
      .map((l) => [l.slice(0, l.indexOf(':')), l.slice(l.indexOf(':') + 1).trim()]),
  );
}

/** Every node agrees the cluster is up, sees all nodes and has all slots covered. */
async function clusterOk(ports: number[]): Promise<boolean> {
  try {
    for (const port of ports) {
      const info = await clusterInfo(port);
      if (info.cluster_state !== 'ok') return false;
      if (Number(info.cluster_known_nodes) !== ports.length) return false;
      if (Number(info.cluster_slots_ok) !== 16384) return false;
    }
    return true;
  } catch {
    return false;
  }
}

async function healthy(state: State): Promise<boolean> {
  const expected = [standalonePort(), ...clusterPorts()].sort().join(',');
  const have = state.servers
    .map((s) => s.port)
    .sort()
    .join(',');
  if (expected !== have) return false;
  if (!state.servers.every((s) => isAlive(s.pid))) return false;
  if (!(await pingOk(standalonePort()))) return false;
  return clusterOk(clusterPorts());
}

// ------------------------------------------------------------ state and lock

function readState(): State | undefined {
  try {
    return JSON.parse(fs.readFileSync(stateFilePath(), 'utf8')) as State;
  } catch {
    return undefined; // missing or half-written: treated as "nothing known"
  }
}

function writeState(state: State): void {
  // Write-then-rename so a crash never leaves a truncated state file behind.
  const file = stateFilePath();
  fs.writeFileSync(`${file}.tmp`, JSON.stringify(state, null, 2));
  fs.renameSync(`${file}.tmp`, file);
}

function removeState(): void {
  fs.rmSync(stateFilePath(), { force: true });
}

/**
 * Serialises start/stop across concurrent tap runs. The lock file holds its
 * owner's PID; a lock whose owner died (crashed before/after program) is
 * broken instead of waited on.
 */
async function withLock<T>(fn: () => Promise<T>): Promise<T> {
  const lockFile = `${stateFilePath()}.lock`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    try {
      fs.writeFileSync(lockFile, String(process.pid), { flag: 'wx' });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      let owner = 0;
      let ageMs = 0;
      try {
        owner = Number(fs.readFileSync(lockFile, 'utf8'));
        ageMs = Date.now() - fs.statSync(lockFile).mtimeMs;
      } catch {
        continue; // released between our attempt and the read: retry at once
      }
      // Break the lock if its owner died. An empty file (owner 0) may be a
      // lock being written right now, so only break that once it is old.
      if ((owner && !isAlive(owner)) || (!owner && ageMs > 2000)) {
        fs.rmSync(lockFile, { force: true });
        continue;
      }
      if (Date.now() > deadline) throw new Error(`could not take lock ${lockFile} (held by pid ${owner})`);
      await sleep(100);
    }
  }
  try {
    return await fn();
  } finally {
    fs.rmSync(lockFile, { force: true });
  }
}

/**
 * Who is "using" the servers. Both the before and the after program are
 * spawned by the same tap runner process, so their parent PID identifies the
 * run. (Run by hand from a shell, the shell is the user; that works too.)
 */
function currentUser(): number {
  return process.ppid;
}

// ------------------------------------------------------------------ killing

async function killServers(state: State): Promise<void> {
  for (const s of state.servers) {
    if (isAlive(s.pid) && looksLikeRedis(s.pid)) {
      try {
        process.kill(s.pid, 'SIGTERM'); // with --save "" this exits in milliseconds
      } catch {
        /* already gone */
      }
    }
  }
  for (const s of state.servers) {
    try {
      await waitUntil(`redis-server pid ${s.pid} to exit`, 5000, () => !isAlive(s.pid));
    } catch {
      if (looksLikeRedis(s.pid)) process.kill(s.pid, 'SIGKILL');
    }
  }
  if (state.dir && path.basename(state.dir).startsWith('redis-pubsub-broker-test-')) {
    fs.rmSync(state.dir, { recursive: true, force: true });
  }
}

/**
 * Frees our ports of servers we have no PID for (state file lost, e.g. tmp
 * cleaned). Only a Redis can be asked to SHUTDOWN; anything else on the port
 * is a real conflict the user must resolve by moving ports.
 */
async function clearPorts(ports: number[]): Promise<void> {
  for (const port of ports) {
    if (!(await portIsOpen(port))) continue;
    log(`port ${port} is busy (leftover from an earlier run?); sending SHUTDOWN NOSAVE`);
    await redisCall(port, 'SHUTDOWN', 'NOSAVE').catch(() => {}); // connection drop is the success case
    try {
      await waitUntil(`port ${port} to be free`, 5000, async () => !(await portIsOpen(port)));
    } catch {
      throw new Error(
        `port ${port} is in use by something that is not a Redis we can shut down; ` +
          'free it or set TEST_REDIS_PORT / TEST_CLUSTER_PORTS',
      );
    }
  }
}

// ----------------------------------------------------------------- starting

function redisServerBin(): string {
  return process.env.REDIS_SERVER_BIN || 'redis-server';
}

/** redis-cli from env, else next to a custom redis-server binary, else PATH. */
function redisCliBin(): string {
  if (process.env.REDIS_CLI_BIN) return process.env.REDIS_CLI_BIN;
  const server = process.env.REDIS_SERVER_BIN;
  if (server?.includes('/')) {
    const sibling = path.join(path.dirname(server), 'redis-cli');
    if (fs.existsSync(sibling)) return sibling;
  }
  return 'redis-cli';
}

function tail(file: string, lines = 20): string {
  try {
    return fs.readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log)';
  }
}

function spawnServer(dir: string, role: Role, port: number): Promise<ServerInfo> {
  const nodeDir = path.join(dir, `${role}-${port}`);
  fs.mkdirSync(nodeDir);
  const logFile = path.join(nodeDir, 'redis.log');
  const args = [
    '--port',
    String(port),
    '--bind',
    REDIS_HOST,
    '--dir',
    nodeDir,
    '--logfile',
    logFile,
    '--daemonize',
    'no',
    // Pure in-memory: tests never need persistence, and fsyncs slow them down.
    '--save',
    '',
    '--appendonly',
    'no',
  ];
  if (role === 'cluster') {
    args.push(
      '--cluster-enabled',
      'yes',
      '--cluster-config-file',
      path.join(nodeDir, 'nodes.conf'),
      '--cluster-node-timeout',
      '5000',
    );
  }
  return new Promise((resolve, reject) => {
    const child = spawn(redisServerBin(), args, { cwd: nodeDir, detached: true, stdio: 'ignore' });
    child.once('error', (err) =>
      reject(
        new Error(`cannot run ${redisServerBin()} (${err.message}); install redis-server or set REDIS_SERVER_BIN`),
      ),
    );
    child.once('spawn', () => {
      child.unref(); // let the before program exit while Redis keeps running
      resolve({ role, port, pid: child.pid!, logFile });
    });
  });
}

function createCluster(ports: number[]): Promise<void> {
  const args = [
    '--cluster',
    'create',
    ...ports.map((p) => `${REDIS_HOST}:${p}`),
    '--cluster-replicas',
    '0',
    '--cluster-yes',
  ];
  return new Promise((resolve, reject) => {
    execFile(redisCliBin(), args, { timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) {
        reject(new Error(`redis-cli --cluster create failed: ${err.message}\n${stdout}\n${stderr}`));
      } else {
        resolve(); // its chatty output is only interesting on failure
      }
    });
  });
}

async function startFresh(): Promise<State> {
  const sPort = standalonePort();
  const cPorts = clusterPorts();
  await clearPorts([sPort, ...cPorts, ...cPorts.map((p) => p + 10000)]);

  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redis-pubsub-broker-test-'));
  const state: State = { dir, servers: [], users: [] };
  try {
    for (const [role, port] of [['standalone', sPort] as const, ...cPorts.map((p) => ['cluster', p] as const)]) {
      state.servers.push(await spawnServer(dir, role, port));
      // Record every PID as soon as it exists so that, if we die half-way,
      // the next run (or stop-redis) can still find and kill it.
      writeState(state);
    }
    for (const s of state.servers) {
      await waitUntil(`redis-server on port ${s.port}`, 10_000, async () => {
        if (!isAlive(s.pid)) throw new Error(`redis-server on port ${s.port} exited:\n${tail(s.logFile)}`);
        return pingOk(s.port);
      });
    }
    await createCluster(cPorts);
    await waitUntil('cluster_state:ok on all cluster nodes', 30_000, () => clusterOk(cPorts));
    return state;
  } catch (err) {
    await killServers(state);
    removeState();
    throw err;
  }
}

// --------------------------------------------------------------- public API

/** Ensures healthy servers are running and registers this run as a user. */
export async function startServers(): Promise<void> {
  const started = Date.now();
  await withLock(async () => {
    const me = currentUser();
    const old = readState();
    if (old) {
      const liveUsers = old.users.filter((u) => u !== me && isAlive(u));
      if (liveUsers.length > 0 && (await healthy(old))) {
        writeState({ ...old, users: [...liveUsers, me] });
        log(`reusing servers already used by pid(s) ${liveUsers.join(', ')}`);
        return;
      }
      // Nobody alive needs them (or they are broken): start clean.
      await killServers(old);
      removeState();
    }
    const state = await startFresh();
    state.users = [me];
    writeState(state);
    log(
      `standalone on ${REDIS_HOST}:${standalonePort()}, cluster on ${clusterPorts().join(',')} ` +
        `(${Date.now() - started} ms, dir ${state.dir})`,
    );
  });
}

/** Unregisters this run; stops the servers if no other live run uses them. */
export async function stopServers(): Promise<void> {
  await withLock(async () => {
    const state = readState();
    if (!state) return;
    const me = currentUser();
    const others = state.users.filter((u) => u !== me && isAlive(u));
    if (others.length > 0) {
      writeState({ ...state, users: others });
      log(`leaving servers running for pid(s) ${others.join(', ')}`);
      return;
    }
    await killServers(state);
    removeState();
    log('stopped');
  });
}
