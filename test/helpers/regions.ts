// In-process brokers of a deployment with regions: one redis-server process per region (started
// here, so that a test can kill and restart a region's Redis), and one app per region, built
// with buildApp the way src/server.ts builds it (fail-fast connections that reconnect).
//
//   const deployment = await startRegions(t, ['a', 'b', 'c']);
//   await deployment.api('a', 'PUT', '/v1/projects/p/topics/t1', {});
//   await deployment.redis.get('c')!.kill();   // ... and later .restart(), then waitReady('c')

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { buildApp } from '../../src/app.ts';
import { freePort, tempDir } from './processes.ts';
import { uniquePrefix } from './redis.ts';

interface Teardown {
  teardown(fn: () => unknown): void;
}

/** A redis-server process with its own data dir; fsync on every write, so a SIGKILL loses nothing answered. */
export class RedisServer {
  private child?: ChildProcess;

  private constructor(
    readonly port: number,
    private readonly dir: string,
  ) {}

  static async start(t: Teardown, name: string): Promise<RedisServer> {
    const server = new RedisServer(await freePort(), tempDir(t, `redis-${name}`));
    t.teardown(() => server.kill());
    await server.restart();
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts the server (again, on the same port and data). Resolves once it answers PING. */
  async restart(): Promise<void> {
    this.child = spawn(
      'redis-server',
      ['--port', String(this.port), '--bind', '127.0.0.1', '--dir', this.dir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', ''],
      { stdio: 'ignore' },
    );
    for (let attempt = 0; ; attempt++) {
      const probe = new Redis(this.port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      probe.on('error', () => {});
      try {
        await probe.connect();
        if ((await probe.ping()) === 'PONG') return;
      } catch {
        if (attempt > 100) throw new Error(`redis-server on ${this.port} did not start`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      } finally {
        probe.disconnect();
      }
    }
  }

  /** Freezes the server (SIGSTOP): connections stay open but nothing answers, like a hung host. */
  pause(): void {
    this.child?.kill('SIGSTOP');
  }

  resume(): void {
    this.child?.kill('SIGCONT');
  }

  async kill(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || (child.signalCode !== null && child.signalCode !== 'SIGSTOP')) return;
    const exited = once(child, 'exit');
    child.kill('SIGKILL');
    await exited;
  }
}

/** The connection settings of src/server.ts: fail fast while a region is away, reconnect quickly. */
function connect(url: string, queueWhileOffline = false): Redis {
  const client = new Redis(url, {
    enableOfflineQueue: queueWhileOffline,
    maxRetriesPerRequest: 1,
    commandTimeout: 3_000,
    retryStrategy: () => 50,
  });
  client.on('error', () => {});
  return client;
}

export interface RegionBroker {
  app: FastifyInstance;
  connections: Redis[];
}

export interface Deployment {
  redis: Map<string, RedisServer>;
  brokers: Map<string, RegionBroker>;
  prefix: string;
  /** A JSON request through one region's endpoint. */
  api: (region: string, method: string, url: string, body?: unknown) => Promise<{ status: number; body: any }>;
  /** Waits until the region's endpoint reports itself ready (its Redis reachable and synced). */
  waitReady: (region: string) => Promise<void>;
}

export async function startRegions(t: Teardown, names: string[], options: { pullWaitMs?: number } = {}): Promise<Deployment> {
  const prefix = uniquePrefix('regions');
  const redis = new Map<string, RedisServer>();
  for (const name of names) redis.set(name, await RedisServer.start(t, name));
  const brokers = new Map<string, RegionBroker>();
  for (const local of names) {
    const connections: Redis[] = [];
    const region = (name: string) => {
      const url = redis.get(name)!.url;
      const pair = { name, redis: connect(url), subscriber: connect(url, true) };
      connections.push(pair.redis, pair.subscriber);
      return pair;
    };
    const own = region(local);
    const app = await buildApp({
      redis: own.redis,
      subscriber: own.subscriber,
      keyPrefix: prefix,
      pullWaitMs: options.pullWaitMs ?? 300,
      regions: { local, others: names.filter((name) => name !== local).map(region) },
    });
    brokers.set(local, { app, connections });
    t.teardown(async () => {
      await app.close();
      for (const connection of connections) connection.disconnect();
    });
  }
  const api = async (region: string, method: string, url: string, body?: unknown) => {
    const response = await brokers.get(region)!.app.inject({
      method: method as 'GET',
      url,
      ...(body === undefined ? {} : { payload: body as object, headers: { 'content-type': 'application/json' } }),
    });
    return { status: response.statusCode, body: response.body ? parseBody(response.body) : undefined };
  };
  const waitReady = async (region: string) => {
    const giveUpAt = Date.now() + 15_000;
    while ((await api(region, 'GET', '/readyz')).status !== 200) {
      if (Date.now() > giveUpAt) throw new Error(`region ${region} not ready after 15 s`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  };
  for (const name of names) await waitReady(name);
  return { redis, brokers, prefix, api, waitReady };
}

function parseBody(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
