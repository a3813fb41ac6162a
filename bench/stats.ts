/** Latency histograms (hdr-histogram-js, microsecond resolution) and a concurrent-loop runner. */
import { build, type Histogram } from 'hdr-histogram-js';

export interface LatencySummary {
  count: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  meanMs: number;
}

export class Latency {
  private readonly histogram: Histogram = build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 10 * 60 * 1_000_000,
    numberOfSignificantValueDigits: 3,
  });

  /** Records one request that started at `startMs` (performance.now()). */
  since(startMs: number): void {
    this.record(performance.now() - startMs);
  }

  /** Records one duration in milliseconds. */
  record(ms: number): void {
    this.histogram.recordValue(Math.max(1, Math.round(ms * 1000)));
  }

  summary(): LatencySummary {
    const h = this.histogram;
    const ms = (us: number) => Math.round(us) / 1000;
    return {
      count: h.totalCount,
      p50Ms: ms(h.getValueAtPercentile(50)),
      p99Ms: ms(h.getValueAtPercentile(99)),
      maxMs: ms(h.maxValue),
      meanMs: Math.round(h.mean) / 1000,
    };
  }
}

/**
 * Runs `concurrency` copies of `loop` until all return; rejects on the first failure (the
 * others are told to stop through `shouldStop`) or when `timeoutMs` passes.
 */
export async function runConcurrently(
  concurrency: number,
  timeoutMs: number,
  what: string,
  loop: (worker: number, shouldStop: () => boolean) => Promise<void>,
): Promise<number> {
  let failed = false;
  let timedOut = false;
  const shouldStop = () => failed || timedOut;
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      reject(new Error(`${what}: timed out after ${timeoutMs / 1000} s`));
    }, timeoutMs).unref();
  });
  try {
    await Promise.race([
      Promise.all(
        Array.from({ length: concurrency }, (_, worker) =>
          loop(worker, shouldStop).catch((error: unknown) => {
            failed = true;
            throw error;
          }),
        ),
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
  return (performance.now() - started) / 1000;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Like sleep, but does not keep the process alive (for timeouts raced against work). */
export const unrefSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());
