// Single source of truth for where the test Redis servers live.
//
// Shared by the tap `before`/`after` programs (start-redis.ts, stop-redis.ts)
// and by the test helpers (test/helpers/redis.ts), so a port override set in
// the environment moves the servers and the clients together.

import os from 'node:os';
import path from 'node:path';

export const REDIS_HOST = '127.0.0.1';

export const DEFAULT_STANDALONE_PORT = 6391;
export const DEFAULT_CLUSTER_PORTS = [7391, 7392, 7393];

function parsePort(raw: string, what: string): number {
  const port = Number(raw.trim());
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new Error(`${what}: invalid port ${JSON.stringify(raw)}`);
  }
  return port;
}

/** Port of the standalone server (env TEST_REDIS_PORT overrides 6391). */
export function standalonePort(): number {
  const raw = process.env.TEST_REDIS_PORT;
  return raw ? parsePort(raw, 'TEST_REDIS_PORT') : DEFAULT_STANDALONE_PORT;
}

/**
 * Ports of the cluster masters (env TEST_CLUSTER_PORTS, comma separated,
 * overrides 7391,7392,7393). Redis Cluster needs at least 3 masters.
 * Note each node also opens its cluster bus on port + 10000.
 */
export function clusterPorts(): number[] {
  const raw = process.env.TEST_CLUSTER_PORTS;
  if (!raw) return [...DEFAULT_CLUSTER_PORTS];
  const ports = raw
    .split(',')
    .filter((s) => s.trim() !== '')
    .map((s) => parsePort(s, 'TEST_CLUSTER_PORTS'));
  if (ports.length < 3) throw new Error('TEST_CLUSTER_PORTS: Redis Cluster needs at least 3 ports');
  return ports;
}

/** TEST_SKIP_CLUSTER=1 (or "true") makes the helpers offer only the standalone target. */
export function skipCluster(): boolean {
  const v = process.env.TEST_SKIP_CLUSTER ?? '';
  return v !== '' && v !== '0' && v.toLowerCase() !== 'false';
}

/**
 * State file recording the running servers' PIDs, data dir and the test runs
 * using them. It lives in os.tmpdir() (not the repo) so it survives a crashed
 * run and a fresh checkout alike, and is keyed by the ports so runs with
 * different port overrides never touch each other's servers.
 */
export function stateFilePath(): string {
  const key = [standalonePort(), ...clusterPorts()].join('-');
  return path.join(os.tmpdir(), `redis-pubsub-broker-test-redis-${key}.json`);
}
