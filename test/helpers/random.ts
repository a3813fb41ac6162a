// A seeded random source for randomized tests: print the seed, replay a failure with SEED=.

/** mulberry32: small, fast, good enough to drive a test schedule. */
export function seededRandom(seed: number) {
  let a = seed >>> 0;
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let x = a;
    x = Math.imul(x ^ (x >>> 15), x | 1);
    x ^= x + Math.imul(x ^ (x >>> 7), x | 61);
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    /** An integer in [lo, hi], both included. */
    int: (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1)),
    pick: <T>(items: T[]): T => items[Math.floor(next() * items.length)],
    chance: (p: number) => next() < p,
    /** k distinct items, optionally drawn from the end of the list (the freshest). */
    someOf: <T>(items: T[], k: number, recentBias = false): T[] => {
      const pool = recentBias ? items.slice(-Math.max(k * 2, 1)) : items.slice();
      const out: T[] = [];
      while (out.length < k && pool.length > 0) out.push(pool.splice(Math.floor(next() * pool.length), 1)[0]);
      return out;
    },
  };
}

/** seededRandom from SEED (default: the clock), with the seed printed so that a failure can be replayed. */
export function randomFromEnv(t: { comment(message: string): unknown }) {
  const seed = Number(process.env.SEED ?? Date.now() % 1_000_000);
  t.comment(`SEED=${seed}`);
  return seededRandom(seed);
}
