import type { PublishBatches } from '../redis/calls/publish-batch.ts';
import type { Keys } from '../redis/keys.ts';
import type { RedisClient } from '../redis/client.ts';
import type { Scripts } from '../redis/scripts.ts';
import type { Clock, PublishClock } from './clock.ts';

/** What every broker service needs: the Redis handle, key builders, scripts and the clock. */
export interface BrokerContext {
  redis: RedisClient;
  keys: Keys;
  scripts: Scripts;
  clock: Clock;
  /** The publish time to stamp into messages stored on this Redis. */
  publishClock: PublishClock;
  /** Publishes to this Redis, gathered per turn of the event loop into one script each. */
  publishBatches: PublishBatches;
}
