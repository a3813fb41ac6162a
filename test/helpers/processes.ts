// Runs real broker processes (src/server.ts) for crash and multi-process tests.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const REPO = new URL('../../', import.meta.url).pathname;

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export function tempDir(t: { teardown(fn: () => unknown): void }, name: string): string {
  const dir = mkdtempSync(join(tmpdir(), `${name}-`));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export interface BrokerProcess {
  url: string;
  child: ChildProcess;
  output: () => string;
}

/**
 * Starts `node src/server.ts` with the given environment and waits until /readyz answers 200.
 * Without a PORT in `env` it takes a free one, and another if something else (an outgoing
 * connection of a test running alongside, say) took that one before the broker could listen.
 */
export async function startBrokerProcess(env: Record<string, string>, nodeArgs: string[] = []): Promise<BrokerProcess> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startBrokerOnce(env, nodeArgs);
    } catch (error) {
      const portTaken = env.PORT === undefined && /EADDRINUSE/.test((error as Error).message);
      if (!portTaken || attempt === 3) throw error;
    }
  }
}

async function startBrokerOnce(env: Record<string, string>, nodeArgs: string[]): Promise<BrokerProcess> {
  const port = env.PORT ?? String(await freePort());
  const child = spawn(process.execPath, ['--import=tsx', ...nodeArgs, 'src/server.ts'], {
    cwd: REPO,
    env: { ...process.env, LOG_LEVEL: 'warn', HOST: '127.0.0.1', ...env, PORT: port },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const url = `http://127.0.0.1:${port}`;
  const giveUpAt = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`broker exited early (${child.exitCode}):\n${output}`);
    try {
      const response = await fetch(`${url}/readyz`);
      if (response.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > giveUpAt) {
      child.kill('SIGKILL');
      throw new Error(`broker not ready after 30 s:\n${output}`);
    }
    await new Promise((done) => setTimeout(done, 100));
  }
  return { url, child, output: () => output };
}

/** Sends `signal` and resolves once the process has exited; SIGKILLs it if it still runs after `killAfterMs` (when given). */
export async function stopProcess(
  child: ChildProcess,
  signal: NodeJS.Signals = 'SIGTERM',
  killAfterMs?: number,
): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((done) => child.once('exit', done));
  child.kill(signal);
  const fallback = killAfterMs === undefined ? undefined : setTimeout(() => child.kill('SIGKILL'), killAfterMs);
  await exited;
  clearTimeout(fallback);
}

/** JSON over HTTP against a broker process; network failures come back as status 0. */
export async function call(baseUrl: string, method: string, path: string, body?: unknown) {
  try {
    const response = await fetch(`${baseUrl}${path}`, {
      method,
      headers: { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : undefined };
  } catch {
    return { status: 0, body: undefined };
  }
}

/**
 * Pulls and acks everything a subscription (its REST path) holds, until three pulls in a row find
 * nothing; `onMessage` sees each received message (data decoded as text) as it comes.
 */
export async function drainOver(
  baseUrl: string,
  subscriptionPath: string,
  onMessage: (text: string, message: { messageId: string }) => void,
): Promise<void> {
  for (let idle = 0; idle < 3; ) {
    const pulled = await call(baseUrl, 'POST', `${subscriptionPath}:pull`, {
      maxMessages: 1000,
      returnImmediately: true,
    });
    const received: { ackId: string; message: { data: string; messageId: string } }[] =
      pulled.body?.receivedMessages ?? [];
    if (received.length === 0) {
      idle++;
      await new Promise((done) => setTimeout(done, 200));
      continue;
    }
    for (const { message } of received) onMessage(Buffer.from(message.data, 'base64').toString(), message);
    await call(baseUrl, 'POST', `${subscriptionPath}:acknowledge`, { ackIds: received.map((r) => r.ackId) });
  }
}
