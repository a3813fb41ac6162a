// A broker serves only a store in its own storage format (src/redis/storage-format.ts); on
// standalone and cluster:
//   - an empty store is claimed (its format recorded), and claiming again changes nothing;
//   - a store that holds an earlier version's message bodies (`messages` hashes) is refused, and
//     so is one recorded in another format; a key prefix with SCAN pattern characters still
//     finds only its own keys;
//   - the broker process refuses such a store: it exits with code 1 and says why, before it
//     listens.
import t from 'tap';
import { Keys } from '../../src/redis/keys.ts';
import { STORAGE_FORMAT, claimStorageFormat } from '../../src/redis/storage-format.ts';
import { startBrokerProcess } from '../helpers/processes.ts';
import { redisTargets, testRedisUrl, uniquePrefix } from '../helpers/redis.ts';

for (const target of redisTargets()) {
  t.test(`${target.name}: claiming a store for the storage format`, async (t) => {
    const redis = target.connect();
    t.teardown(() => redis.quit());

    const fresh = new Keys(uniquePrefix('format-fresh'));
    t.equal(await claimStorageFormat(redis, fresh), undefined, 'an empty store is claimed');
    t.equal(await redis.get(fresh.storageFormat), STORAGE_FORMAT, 'its format is recorded');
    t.equal(await claimStorageFormat(redis, fresh), undefined, 'and claimed again without change');

    // Pattern characters in the prefix: the older keys of "x[ab]*" are found, those of "xa" not.
    const base = uniquePrefix('format-older');
    const older = new Keys(`${base}x[ab]*`);
    const neighbour = new Keys(`${base}xa`);
    await redis.hset(neighbour.topicData('0123456789abcdef').state, 'seq', '3');
    await redis.hset(`${neighbour.prefix}:{t0123456789abcdef}:messages`, '1', 'a body of the earlier format');
    t.equal(await claimStorageFormat(redis, older), undefined, 'another prefix\'s older bodies are no concern');
    await redis.del(older.storageFormat);
    await redis.hset(`${older.prefix}:{tfedcba9876543210}:messages`, '1', 'a body of the earlier format');
    const problem = await claimStorageFormat(redis, older);
    t.match(problem, /earlier version of the broker \(.*:messages\)/, 'a store with older bodies is refused');
    t.equal(await redis.get(older.storageFormat), null, 'and not claimed');

    const other = new Keys(uniquePrefix('format-other'));
    await redis.set(other.storageFormat, '99');
    t.match(await claimStorageFormat(redis, other), /storage format 99/, 'a store recorded in another format is refused');
  });
}

t.test('the broker process refuses a store of an earlier format before it listens', async (t) => {
  const [standalone] = redisTargets();
  const redis = standalone.connect();
  t.teardown(() => redis.quit());
  const keys = new Keys(uniquePrefix('format-process'));
  await redis.hset(`${keys.prefix}:{t0123456789abcdef}:messages`, '1', 'a body of the earlier format');
  const started = startBrokerProcess({ REDIS_URL: testRedisUrl(), KEY_PREFIX: keys.prefix, LOG_LEVEL: 'info' });
  const error = await started.then(
    () => undefined,
    (failure: Error) => failure,
  );
  t.ok(error, 'it never became ready');
  t.match(error?.message, /broker exited early \(1\)/, 'it exited with code 1');
  t.match(error?.message, /earlier version of the broker/, 'saying why');
  t.notMatch(error?.message, /listening on/, 'without listening');
});
