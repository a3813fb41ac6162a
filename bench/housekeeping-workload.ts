/**
 * The housekeeping workload: the janitor's pass (src/broker/broker.ts, collectGarbage: clean-ups
 * left by interrupted deletes, subscription and snapshot expiration, the retained logs) over the
 * metrics workload's subscriptions, ten passes in a row. The bench's broker runs it once a minute
 * on its own; here a broker made in this process on the same Redis and key prefix runs it, so
 * that its CPU can be told apart: this process's CPU during the passes (in the notes, and in the
 * phase's "client" column). Rate = passes per second. The notes add the retained logs' part of a
 * pass alone (expireLogsMsPerPass: ten more passes of it, timed apart).
 */
import { Redis } from 'ioredis';
import { createBroker } from '../src/broker/broker.ts';
import type { ThroughputResult } from './broker-workloads.ts';
import { Latency } from './stats.ts';

export const HOUSEKEEPING_PASSES = 10;

export async function housekeepingPasses(
  redisUrl: string,
  keyPrefix: string,
  workload: string,
): Promise<ThroughputResult> {
  const redis = new Redis(redisUrl);
  const broker = await createBroker({ redis, keyPrefix });
  try {
    await broker.collectGarbage(); // the first one connects and loads the scripts; not measured
    const latency = new Latency();
    const cpuBefore = process.cpuUsage();
    const started = performance.now();
    for (let i = 0; i < HOUSEKEEPING_PASSES; i++) {
      const passStarted = performance.now();
      await broker.collectGarbage();
      latency.since(passStarted);
    }
    const seconds = (performance.now() - started) / 1000;
    const cpu = process.cpuUsage(cpuBefore);
    // The retained logs' part alone (replay.ts): one read of its index while nothing is due.
    const logsStarted = performance.now();
    for (let i = 0; i < HOUSEKEEPING_PASSES; i++) await broker.replay.expireLogs();
    const expireLogsMsPerPass = (performance.now() - logsStarted) / HOUSEKEEPING_PASSES;
    return {
      workload,
      messages: HOUSEKEEPING_PASSES,
      seconds,
      msgPerSec: HOUSEKEEPING_PASSES / seconds,
      latency: { pass: latency.summary() },
      notes: { brokerCpuMsPerPass: (cpu.user + cpu.system) / 1000 / HOUSEKEEPING_PASSES, expireLogsMsPerPass },
    };
  } finally {
    await broker.close();
    redis.disconnect();
  }
}
