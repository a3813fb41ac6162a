import type { RedisClient } from '../redis/scripts.ts';

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
 * and refuses one that strays (see publish.lua), handing back its time to stamp again from; a
 * reading is always a little behind (it aged on its way back), so stamps trail, never lead.
 *
 * Stamping in the broker spares Redis from building each message again inside Lua just to put
 * the time in front of it: about a microsecond of Redis CPU per published message.
 */
export class PublishClock {
  /** The last reading of the one clock (µs), and performance.now() when it arrived. */
  #readingUs: number | undefined;
  #readAtMs = 0;

  constructor(
    private readonly clock: Clock,
    private readonly readOneClockUs: () => Promise<number>,
  ) {}

  /** The time to stamp now, in microseconds (a test's manual time as it is). */
  async stampUs(): Promise<number> {
    const manual = this.clock.scriptTime();
    if (manual !== '') return Number(manual);
    if (this.#readingUs === undefined) this.observe(await this.readOneClockUs());
    return this.#readingUs! + Math.floor((performance.now() - this.#readAtMs) * 1000);
  }

  /** Takes a reading of the one clock that a script just returned. */
  observe(oneClockUs: number): void {
    this.#readingUs = oneClockUs;
    this.#readAtMs = performance.now();
  }
}

/** Redis TIME in microseconds. */
export async function redisTimeUs(redis: RedisClient): Promise<number> {
  const [seconds, microseconds] = await redis.time();
  return Number(seconds) * 1_000_000 + Number(microseconds);
}
