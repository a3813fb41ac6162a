/**
 * The BullMQ baseline, on the same redis-server in the same run: Queue.addBulk of 1 KB jobs
 * in batches, then one Worker with a no-op processor draining them. Completed and failed jobs
 * are removed (removeOnComplete/removeOnFail), the counterpart of an acknowledged message
 * being deleted by the broker.
 */
import { Queue, Worker } from 'bullmq';
import type { ThroughputResult } from './broker-workloads.ts';
import { Latency, runConcurrently, unrefSleep } from './stats.ts';

export interface BullConnection {
  host: string;
  port: number;
}

const PREFIX = 'bullbench';

function connection(target: BullConnection) {
  return { host: target.host, port: target.port, maxRetriesPerRequest: null };
}

/** Adding `messages` jobs with 1 KB payloads in batches of `batch`, from `concurrency` adders. */
interface AddOptions {
  workload: string;
  target: BullConnection;
  queueName: string;
  messages: number;
  batch: number;
  concurrency: number;
  payloads: string[];
  timeoutMs: number;
}

/**
 * Adds `messages` 1 KB jobs with addBulk in batches, from `concurrency` concurrent adders, like
 * the broker's publishers; jobs are removed on completion (the counterpart of an acked message).
 * Returns the seconds it took.
 */
function addJobs(queue: Queue, options: AddOptions, latency: Latency): Promise<number> {
  const batches = Math.ceil(options.messages / options.batch);
  let next = 0;
  let payloadIndex = 0;
  return runConcurrently(options.concurrency, options.timeoutMs, options.workload, async (_, stop) => {
    while (!stop()) {
      const index = next++;
      if (index >= batches) return;
      const size = Math.min(options.batch, options.messages - index * options.batch);
      const jobs = Array.from({ length: size }, () => ({
        name: 'm',
        data: { data: options.payloads[payloadIndex++ % options.payloads.length] },
        opts: { removeOnComplete: true, removeOnFail: true },
      }));
      const started = performance.now();
      await queue.addBulk(jobs);
      latency.since(started);
    }
  });
}

export async function bullmqAddWorkload(options: AddOptions): Promise<ThroughputResult> {
  const queue = new Queue(options.queueName, { connection: connection(options.target), prefix: PREFIX });
  try {
    await queue.waitUntilReady();
    const latency = new Latency();
    const seconds = await addJobs(queue, options, latency);
    const waiting = await queue.getWaitingCount();
    if (waiting < options.messages)
      throw new Error(`${options.workload}: only ${waiting} jobs are waiting after adding ${options.messages}`);
    return {
      workload: options.workload,
      messages: options.messages,
      seconds,
      msgPerSec: options.messages / seconds,
      latency: { addBulk: latency.summary() },
    };
  } finally {
    await queue.close();
  }
}

/** One Worker (autorun) with a no-op processor until `messages` jobs have completed. */
export async function bullmqProcessWorkload(options: {
  workload: string;
  target: BullConnection;
  queueName: string;
  messages: number;
  concurrency: number;
  timeoutMs: number;
}): Promise<ThroughputResult> {
  let completed = 0;
  let failed = 0;
  let done!: () => void;
  const finished = new Promise<void>((resolve) => (done = resolve));
  const started = performance.now();
  const worker = new Worker(options.queueName, async () => {}, {
    connection: connection(options.target),
    prefix: PREFIX,
    concurrency: options.concurrency,
    autorun: true,
  });
  worker.on('completed', () => {
    if (++completed >= options.messages) done();
  });
  worker.on('failed', () => {
    failed++;
  });
  worker.on('error', () => {});
  try {
    const timedOut = await Promise.race([finished.then(() => false), unrefSleep(options.timeoutMs).then(() => true)]);
    const seconds = (performance.now() - started) / 1000;
    if (timedOut)
      throw new Error(`${options.workload}: timed out with ${completed}/${options.messages} jobs completed`);
    if (failed > 0) throw new Error(`${options.workload}: ${failed} jobs failed`);
    return {
      workload: options.workload,
      messages: completed,
      seconds,
      msgPerSec: completed / seconds,
      latency: {},
      notes: { workerConcurrency: options.concurrency },
    };
  } finally {
    await worker.close();
  }
}

/**
 * BullMQ end to end, the counterpart of the streaming workload: `workers` Workers (each with
 * `workerConcurrency`, no-op processor) are started on an empty queue, then `concurrency`
 * callers addBulk `messages` 1 KB jobs (batches of `batch`) at full speed. Rate = messages /
 * (first add -> last completion).
 */
export async function bullmqEndToEndWorkload(
  options: AddOptions & { workers: number; workerConcurrency: number },
): Promise<ThroughputResult> {
  const queue = new Queue(options.queueName, { connection: connection(options.target), prefix: PREFIX });
  let completed = 0;
  let failed = 0;
  let lastCompletedAt = 0;
  let done!: () => void;
  const finished = new Promise<void>((resolve) => (done = resolve));
  const workers = Array.from(
    { length: options.workers },
    () =>
      new Worker(options.queueName, async () => {}, {
        connection: connection(options.target),
        prefix: PREFIX,
        concurrency: options.workerConcurrency,
        autorun: true,
      }),
  );
  for (const worker of workers) {
    worker.on('completed', () => {
      lastCompletedAt = performance.now();
      if (++completed >= options.messages) done();
    });
    worker.on('failed', () => {
      failed++;
    });
    worker.on('error', () => {});
  }
  try {
    await queue.waitUntilReady();
    await Promise.all(workers.map((w) => w.waitUntilReady()));
    const addLatency = new Latency();
    const started = performance.now();
    const addSeconds = await addJobs(queue, options, addLatency);
    const timedOut = await Promise.race([
      finished.then(() => false),
      unrefSleep(Math.max(0, options.timeoutMs - (performance.now() - started))).then(() => true),
    ]);
    if (timedOut)
      throw new Error(`${options.workload}: timed out with ${completed}/${options.messages} jobs completed`);
    if (failed > 0) throw new Error(`${options.workload}: ${failed} jobs failed`);
    const seconds = (lastCompletedAt - started) / 1000;
    return {
      workload: options.workload,
      messages: completed,
      seconds,
      msgPerSec: completed / seconds,
      latency: { addBulk: addLatency.summary() },
      notes: {
        workers: options.workers,
        workerConcurrency: options.workerConcurrency,
        addSeconds: Math.round(addSeconds * 1000) / 1000,
        addJobsPerSec: Math.round(options.messages / addSeconds),
      },
    };
  } finally {
    await Promise.all(workers.map((w) => w.close()));
    await queue.close();
  }
}
