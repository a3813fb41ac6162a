import type { Keys } from './keys.ts';
import type { RedisClient } from './scripts.ts';

/**
 * The layout of the data plane in Redis (SCHEMA.md), recorded in the store itself. A broker must
 * not serve a store laid out by another version: it would misread it, and a message whose body it
 * cannot find is dropped as gone. Format 2 keeps each publish's bodies in a block of their own
 * (`b:<block>`); before it (format 1, never recorded) a topic incarnation kept every body in one
 * `messages` hash.
 */
export const STORAGE_FORMAT = '2';

/**
 * Claims an unrecorded store for this format, or says why this broker must not serve the store:
 * undefined when it may. A store with no recorded format is either new or written by format 1;
 * it is claimed only if it holds no format-1 bodies (topics and subscriptions without messages
 * read the same in both formats). Brokers of the older version must be stopped first: one that
 * stores messages after the claim would have them misread.
 */
export async function claimStorageFormat(redis: RedisClient, keys: Keys): Promise<string | undefined> {
  const recorded = await redis.get(keys.storageFormat);
  if (recorded === STORAGE_FORMAT) return undefined;
  if (recorded !== null) {
    return `This Redis holds broker data in storage format ${recorded} (key ${keys.storageFormat}); this broker reads format ${STORAGE_FORMAT}. Run the broker version that wrote it.`;
  }
  const older = await findKey(redis, keys.everyTopicData('messages'));
  if (older !== undefined) {
    return (
      `This Redis holds messages stored by an earlier version of the broker (${older}), in a layout this version cannot read. ` +
      'Deliver them with that version first (until every subscription backlog is empty, then delete the keys ending in ":messages"), ' +
      'or start this version on an empty store (another DATA_DIR, Redis or KEY_PREFIX).'
    );
  }
  await redis.set(keys.storageFormat, STORAGE_FORMAT, 'NX');
  const claimed = await redis.get(keys.storageFormat);
  return claimed === STORAGE_FORMAT ? undefined : `Another broker recorded storage format ${claimed} at the same time; this broker reads format ${STORAGE_FORMAT}.`;
}

/** The first key matching `pattern` on any master, if there is one. */
async function findKey(redis: RedisClient, pattern: string): Promise<string | undefined> {
  const nodes = 'nodes' in redis ? redis.nodes('master') : [redis];
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, found] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      if (found.length > 0) return found[0];
      cursor = next;
    } while (cursor !== '0');
  }
  return undefined;
}
