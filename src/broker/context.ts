import type { Keys } from '../redis/keys.ts';
import type { RedisClient, Scripts } from '../redis/scripts.ts';
import type { Clock } from './clock.ts';

/** What every broker service needs: the Redis handle, key builders, scripts and the clock. */
export interface BrokerContext {
  redis: RedisClient;
  keys: Keys;
  scripts: Scripts;
  clock: Clock;
}
