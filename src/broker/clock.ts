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
