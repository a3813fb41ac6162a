import type { RedisClient } from '../redis/client.ts';

/**
 * Where the time of a state change comes from. Production uses the Redis server's TIME
 * inside each script (one clock for every broker node); tests use a ManualClock and move
 * time forward explicitly instead of sleeping.
 */
export interface Clock {
  /** '' = let the script read Redis TIME; otherwise the time in microseconds. */
  scriptTime(): string;
}

export const redisClock: Clock = { scriptTime: () => '' };

export class ManualClock implements Clock {
  constructor(private nowUs: number = Date.UTC(2026, 0, 1) * 1000) {}

  scriptTime(): string {
    return String(this.nowUs);
  }

  advanceSeconds(seconds: number): void {
    this.nowUs += Math.round(seconds * 1_000_000);
  }
}

/**
 * The publish time a broker node stamps into new messages: the one clock's time as the node last
 * read it from one Redis server (a region), moved on by the node's own monotonic clock, which a
 * wrong wall clock does not affect. The publish script judges each stamp against its own TIME
 * and refuses one that strays (see publish.lua), handing back its time to stamp again from. A
 * reading from the same server is always a little behind (it aged on its way back), so there a
 * stamp trails the one clock by about the time the call waited; a reading older than a second is
 * taken again, so that an idle node's own clock never carries one far. On Redis Cluster the
 * shards' clocks may differ: a stamp may then lead or trail the shard that stores it by that
 * difference, within the script's window.
 *
 * Stamping in the broker spares Redis from building each message again inside Lua just to put
 * the time in front of it: about a microsecond of Redis CPU per published message.
 */
export class PublishClock {
  #last: ClockReading | undefined;

  constructor(
    private readonly clock: Clock,
    private readonly readOneClockUs: () => Promise<number>,
    private readonly monotonicMs: () => number = () => performance.now(),
  ) {}

  /** The time to stamp now, in microseconds (a test's manual time as it is). */
  async stampUs(): Promise<number> {
    const manual = this.clock.scriptTime();
    if (manual !== '') return Number(manual);
    if (this.#last === undefined || this.monotonicMs() - this.#last.takenAtMs > MAX_READING_AGE_MS) {
      this.observe(await this.readOneClockUs());
    }
    return this.stampFrom(this.#last!);
  }

  /** Takes a reading of the one clock that a script just returned, and returns it. */
  observe(oneClockUs: number): ClockReading {
    this.#last = { oneClockUs, takenAtMs: this.monotonicMs() };
    return this.#last;
  }

  /** The time to stamp now from one given reading (a refused publish retries from its own). */
  stampFrom(reading: ClockReading): number {
    return reading.oneClockUs + Math.floor((this.monotonicMs() - reading.takenAtMs) * 1000);
  }
}

/** A reading of the one clock (µs), and the node's monotonic time (ms) when it was taken. */
export interface ClockReading {
  oneClockUs: number;
  takenAtMs: number;
}

const MAX_READING_AGE_MS = 1000;

/** The time now (µs): a test's manual time, else the Redis server's TIME. */
export async function nowUs(clock: Clock, redis: RedisClient): Promise<number> {
  const manual = clock.scriptTime();
  return manual === '' ? redisTimeUs(redis) : Number(manual);
}

/** Redis TIME in microseconds. */
export async function redisTimeUs(redis: RedisClient): Promise<number> {
  const [seconds, microseconds] = await redis.time();
  return Number(seconds) * 1_000_000 + Number(microseconds);
}

/** This node's idea of the time (µs): a test's manual time, else its own wall clock (no call to Redis). */
export function localNowUs(clock: Clock): number {
  const manual = clock.scriptTime();
  return manual === '' ? Date.now() * 1000 : Number(manual);
}
