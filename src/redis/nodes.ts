import type { Redis } from 'ioredis';
import type { RedisClient } from './client.ts';

/** The connections to every master: the client itself, or each master of a cluster. */
export function masterNodes(redis: RedisClient): Redis[] {
  return 'nodes' in redis ? redis.nodes('master') : [redis];
}

/** The keys matching `pattern` on every master (with `first`, at most the first one found). */
export async function scanKeys(redis: RedisClient, pattern: string, { first = false } = {}): Promise<string[]> {
  const found: string[] = [];
  for (const node of masterNodes(redis)) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      found.push(...keys);
      if (first && found.length > 0) return found.slice(0, 1);
      cursor = next;
    } while (cursor !== '0');
  }
  return found;
}
