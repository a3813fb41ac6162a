/**
 * Stand-in for src/server.ts while that file does not exist yet: the same environment
 * (REDIS_URL, PORT, HOST, KEY_PREFIX, LOG_LEVEL, PULL_WAIT_SECONDS), buildApp + listen, and a
 * graceful stop on SIGTERM/SIGINT (so `--cpu-prof` profiles get written). bench/run.ts starts
 * it as a child process exactly like src/server.ts, so its RSS is measured the same way.
 * It never starts a Redis of its own: REDIS_URL is required.
 */
import { Redis } from 'ioredis';
import { buildApp } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';

const config = loadConfig();
if (!config.REDIS_URL) throw new Error('standin-server: REDIS_URL is required');

const redis = new Redis(config.REDIS_URL, { maxRetriesPerRequest: 2 });
const app = await buildApp({
  redis,
  keyPrefix: config.KEY_PREFIX,
  pullWaitMs: config.PULL_WAIT_SECONDS * 1000,
  logger: { level: config.LOG_LEVEL },
});
await app.listen({ port: config.PORT, host: config.HOST });

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  try {
    await app.close();
  } finally {
    redis.disconnect();
    process.exit(0);
  }
};
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
