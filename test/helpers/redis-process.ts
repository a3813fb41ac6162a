// A redis-server process owned by one test: started on a free port with its own data directory,
// append-only with an fsync before every answer (a SIGKILL then loses nothing Redis acknowledged),
// and startable again on the same port and directory after it was killed.

import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { freePort, stopProcess, tempDir } from './processes.ts';

export interface RedisProcess {
  port: number;
  url: string;
  /** Starts the server (again) on the same port and data directory; resolves once it answers PING. */
  start(): Promise<void>;
  /** SIGKILL; resolves once the process has exited. */
  kill(): Promise<void>;
  /** Freezes the server (SIGSTOP): connections stay open but nothing answers, like a hung host. */
  pause(): void;
  /** SIGCONT after pause(). */
  resume(): void;
  /** The server's log file (all its starts). */
  log(): string;
}

/** Every server started here and not killed yet: none may outlive this process. */
const running = new Set<ChildProcess>();

/** SIGKILLs every server still running (for exit and timeout hooks: synchronous). */
export function killAllRedisProcesses(): void {
  for (const child of running) child.kill('SIGKILL');
  running.clear();
}
process.on('exit', killAllRedisProcesses);

/** Starts a redis-server for this test; t.teardown SIGKILLs it if it still runs. */
export async function startRedisProcess(t: { teardown(fn: () => unknown): void }, name: string): Promise<RedisProcess> {
  const dir = tempDir(t, name);
  const port = await freePort();
  const logFile = join(dir, 'redis.log');
  /** The running server, or undefined after kill(). */
  let current: ChildProcess | undefined;
  const server: RedisProcess = {
    port,
    url: `redis://127.0.0.1:${port}`,
    async start() {
      if (current) throw new Error(`redis-server on ${port} is already running`);
      const child = spawn(
        'redis-server',
        [
          '--port',
          String(port),
          '--bind',
          '127.0.0.1',
          '--dir',
          dir,
          '--appendonly',
          'yes',
          '--appendfsync',
          'always',
          '--save',
          '',
          '--daemonize',
          'no',
          '--logfile',
          logFile,
          '--maxmemory-policy',
          'noeviction',
        ],
        { stdio: 'ignore' },
      );
      current = child;
      running.add(child);
      child.once('exit', () => running.delete(child));
      const giveUpAt = Date.now() + 10_000;
      for (;;) {
        if (child.exitCode !== null || child.signalCode !== null)
          throw new Error(`redis-server on ${port} exited at start:\n${server.log()}`);
        if (await answersPing(port)) return;
        if (Date.now() > giveUpAt)
          throw new Error(`redis-server on ${port} does not answer after 10 s:\n${server.log()}`);
        await sleep(50);
      }
    },
    async kill() {
      const child = current;
      current = undefined;
      if (child) await stopProcess(child, 'SIGKILL');
    },
    pause() {
      current?.kill('SIGSTOP');
    },
    resume() {
      current?.kill('SIGCONT');
    },
    log() {
      try {
        return readFileSync(logFile, 'utf8');
      } catch {
        return '(no log)';
      }
    },
  };
  t.teardown(() => server.kill());
  await server.start();
  return server;
}

async function answersPing(port: number): Promise<boolean> {
  const client = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    connectTimeout: 1000,
  });
  client.on('error', () => {});
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}
