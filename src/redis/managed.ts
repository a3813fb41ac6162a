import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, mkdirSync } from 'node:fs';
import { delimiter, join, resolve } from 'node:path';
import { Redis } from 'ioredis';

/**
 * The embedded default: a redis-server that the broker starts, owns and stops, with its data
 * (append-only file on) in DATA_DIR. If an earlier broker was killed and left it running, the
 * new broker re-adopts it (same port, same data directory) instead of failing to start.
 * If it dies while the broker runs, the broker starts it again; the append-only file brings
 * every acknowledged write back.
 */
export interface ManagedRedisOptions {
  binary?: string;
  port: number;
  dataDir: string;
  appendfsync: 'everysec' | 'always';
  log: (message: string) => void;
}

export class ManagedRedisError extends Error {}

export class ManagedRedis {
  private child?: ChildProcess;
  private stopping = false;
  readonly url: string;
  private readonly dataDir: string;

  private constructor(private readonly options: ManagedRedisOptions) {
    this.url = `redis://127.0.0.1:${options.port}`;
    this.dataDir = resolve(options.dataDir);
  }

  static async start(options: ManagedRedisOptions): Promise<ManagedRedis> {
    const managed = new ManagedRedis(options);
    mkdirSync(managed.dataDir, { recursive: true });
    const existingDir = await managed.probeDataDir();
    if (existingDir === managed.dataDir) {
      options.log(`re-adopting the redis-server already serving ${managed.dataDir} on port ${options.port}`);
    } else if (existingDir !== undefined) {
      throw new ManagedRedisError(
        `Port ${options.port} is taken by another Redis (data in ${existingDir}). ` +
          'Set REDIS_PORT to a free port, or REDIS_URL to use that Redis.',
      );
    } else {
      managed.spawn(findRedisServer(options.binary));
    }
    await managed.waitUntilReady();
    return managed;
  }

  /** Stops the server cleanly (SHUTDOWN flushes the append-only file) and waits for it. */
  async stop(): Promise<void> {
    this.stopping = true;
    const client = this.probeClient();
    try {
      await client.connect();
      await client.call('SHUTDOWN').catch(() => {}); // the connection drops as the server exits
    } catch {
      // Already gone.
    } finally {
      client.disconnect();
    }
    const child = this.child;
    if (child && child.exitCode === null && child.signalCode === null) {
      await new Promise((done) => child.once('exit', done));
    }
  }

  /** A short-lived connection that never retries and reports failures only through promises. */
  private probeClient(): Redis {
    const client = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    client.on('error', () => {});
    return client;
  }

  private spawn(binary: string): void {
    const args = [
      '--port',
      String(this.options.port),
      '--bind',
      '127.0.0.1',
      '--dir',
      this.dataDir,
      '--appendonly',
      'yes',
      '--appendfsync',
      this.options.appendfsync,
      '--save',
      '',
      '--maxmemory-policy',
      'noeviction',
      '--pidfile',
      join(this.dataDir, 'redis.pid'),
      '--logfile',
      join(this.dataDir, 'redis.log'),
    ];
    // Detached: a terminal's Ctrl-C reaches only the broker, which then stops Redis cleanly.
    const child = spawn(binary, args, { stdio: 'ignore', detached: true });
    this.child = child;
    child.on('error', (error) => this.options.log(`redis-server failed to start: ${error.message}`));
    child.on('exit', (code, signal) => {
      if (this.stopping) return;
      this.options.log(`redis-server exited (${signal ?? code}); starting it again`);
      setTimeout(() => {
        if (!this.stopping) this.spawn(binary);
      }, 500).unref();
    });
  }

  /** The data directory of whatever Redis answers on our port, or undefined if none does. */
  private async probeDataDir(): Promise<string | undefined> {
    const client = this.probeClient();
    try {
      await client.connect();
      const [, dir] = (await client.config('GET', 'dir')) as [string, string];
      return dir;
    } catch {
      return undefined;
    } finally {
      client.disconnect();
    }
  }

  private async waitUntilReady(): Promise<void> {
    const client = this.probeClient();
    const giveUpAt = Date.now() + 30_000;
    try {
      for (;;) {
        try {
          if (client.status !== 'ready') await client.connect();
          await client.ping(); // answers LOADING while the append-only file is read back
          return;
        } catch (error) {
          if (Date.now() > giveUpAt) {
            throw new ManagedRedisError(
              `redis-server did not become ready on port ${this.options.port}: ${(error as Error).message}. ` +
                `See ${join(this.dataDir, 'redis.log')}.`,
            );
          }
          client.disconnect();
          await new Promise((done) => setTimeout(done, 100));
        }
      }
    } finally {
      client.disconnect();
    }
  }
}

function findRedisServer(configured: string | undefined): string {
  const candidates = configured
    ? [configured]
    : (process.env.PATH ?? '').split(delimiter).map((dir) => join(dir, 'redis-server'));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // keep looking
    }
  }
  throw new ManagedRedisError(
    (configured ? `REDIS_SERVER_BIN=${configured} is not an executable.` : 'No redis-server found on PATH.') +
      '\nInstall Redis 7 or newer (Debian/Ubuntu: sudo apt-get install -y redis-server; macOS: brew install redis),' +
      '\nor point the broker at a running Redis with REDIS_URL=redis://host:6379.',
  );
}
