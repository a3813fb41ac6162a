// A broker serves only a store in its own storage format (src/redis/storage-format.ts); on
// standalone and cluster:
//   - an empty store is claimed (its format recorded), and claiming again changes nothing; a
//     store of format 2 is claimed as it is (format 3 only adds to it), and so is one of format 7
//     (test/e2e/storage-format-7.test.ts delivers from one);
//   - a store that holds an earlier version's message bodies (`messages` hashes) is refused, and
//     so is one recorded in another format; a key prefix with SCAN pattern characters still
//     finds only its own keys;
//   - a drained store of the earlier format is claimed, and its next message IDs lie past the
//     ones it handed out;
//   - a broker app on a store it must not serve hears why and answers UNAVAILABLE to everything,
//     also when the store is found changed after Redis reconnects;
//   - with regions, a refused region is left out of use and out of the control plane: its
//     records are not copied into the others, nor theirs into it;
//   - the broker process refuses such a store: it exits with code 1 and says why, before it
//     listens.
import { Redis } from 'ioredis';
import t from 'tap';
import { buildApp } from '../../src/app.ts';
import { Keys } from '../../src/redis/keys.ts';
import { Scripts } from '../../src/redis/scripts.ts';
import { STORAGE_FORMAT, claimStorageFormat } from '../../src/redis/storage-format.ts';
import { jsonApi } from '../helpers/app.ts';
import { startBrokerProcess, stopProcess } from '../helpers/processes.ts';
import { redisTargets, scanKeys, testRedisUrl, uniquePrefix, type RedisClient } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';

for (const target of redisTargets()) {
  t.test(`${target.name}: claiming a store for the storage format`, async (t) => {
    const redis = target.connect();
    t.teardown(() => redis.quit());
    const scripts = new Scripts(redis);

    const fresh = new Keys(uniquePrefix('format-fresh'));
    t.equal(await claimStorageFormat(redis, fresh, scripts), undefined, 'an empty store is claimed');
    t.equal(await redis.get(fresh.storageFormat), STORAGE_FORMAT, 'its format is recorded');
    t.equal(await claimStorageFormat(redis, fresh, scripts), undefined, 'and claimed again without change');

    // Pattern characters in the prefix: the older keys of "x[ab]*" are found, those of "xa" not.
    const base = uniquePrefix('format-older');
    const older = new Keys(`${base}x[ab]*`);
    const neighbour = new Keys(`${base}xa`);
    await holdFormat1Messages(redis, neighbour, '0123456789abcdef');
    await redis.hset(older.topics, 'projects/p/topics/other', '{}');
    t.equal(await claimStorageFormat(redis, older, scripts), undefined, "another prefix's older bodies are no concern");
    await redis.del(older.storageFormat);
    await holdFormat1Messages(redis, older, 'fedcba9876543210');
    const problem = await claimStorageFormat(redis, older, scripts);
    t.match(problem, /earlier version of the broker \(.*:messages\)/, 'a store with older bodies is refused');
    t.equal(await redis.get(older.storageFormat), null, 'and not claimed');

    for (const format of ['2', '3', '4', '5', '6', '7']) {
      const upgraded = new Keys(uniquePrefix(`format-${format}`));
      await redis.set(upgraded.storageFormat, format);
      // Records put before the expiry indexes existed (its data not attached here: index-holds skips it).
      const subscription = 'projects/p/subscriptions/older';
      await redis.hset(upgraded.subscriptions, subscription, JSON.stringify({ topicUid: 'ab', uid: 'cd' }));
      await redis.hset(upgraded.snapshots, 'projects/p/snapshots/older', JSON.stringify({ topicUid: 'ab' }));
      // What retains: a topic with a retention, a subscription keeping acked messages, the
      // snapshot above; and an incarnation format 7 listed for its janitor.
      const retaining = { name: 'projects/p/topics/kept', uid: 'ef', messageRetentionDuration: '600s' };
      await redis.hset(upgraded.topics, retaining.name, JSON.stringify(retaining));
      await redis.hset(
        upgraded.subscriptions,
        'projects/p/subscriptions/keeps',
        JSON.stringify({ topicUid: 'ab', uid: 'gh', retainAckedMessages: true }),
      );
      await redis.sadd(upgraded.format7RetainingTopics, 'ij');
      t.equal(
        await claimStorageFormat(redis, upgraded, scripts),
        undefined,
        `a store of format ${format} is claimed as it is`,
      );
      t.equal(
        await redis.get(upgraded.storageFormat),
        STORAGE_FORMAT,
        `recorded as format ${STORAGE_FORMAT} from then on`,
      );
      if (format !== '7') {
        t.equal(
          await redis.zscore(upgraded.subscriptionExpiries, subscription),
          '0',
          'its subscriptions are due for a look',
        );
        t.equal(await redis.zscore(upgraded.snapshotExpiries, 'projects/p/snapshots/older'), '0', 'and its snapshots');
      }
      t.same(
        await redis.hgetall(upgraded.logRetention),
        { ab: '2', ef: '1', 'ef:topic': '600000000' },
        'what makes each topic incarnation retain is counted, with the topic retention',
      );
      t.same(
        await redis.zrange(upgraded.logExpiries, 0, -1, 'WITHSCORES'),
        ['ab', '0', 'ef', '0', 'ij', '0'],
        'and their logs, and those format 7 listed, are due for a look',
      );
      t.equal(await redis.exists(upgraded.format7RetainingTopics), 0, "format 7's list is gone");
    }

    // Format 7 has the expiry indexes already, and key states format 8 reads as they are.
    const seven = new Keys(uniquePrefix('format-7'));
    await redis.set(seven.storageFormat, '7');
    await redis.hset(seven.subscriptions, 'projects/p/subscriptions/indexed', '{}');
    t.equal(await claimStorageFormat(redis, seven, scripts), undefined, 'a store of format 7 is claimed as it is');
    t.equal(await redis.get(seven.storageFormat), STORAGE_FORMAT, `recorded as format ${STORAGE_FORMAT}`);
    t.equal(await redis.zcard(seven.subscriptionExpiries), 0, 'its expiry indexes left as they are');

    // Format 8 has the index of the retained logs already, and key states and keyed deliveries
    // format 9 reads as they are.
    const eight = new Keys(uniquePrefix('format-8'));
    await redis.set(eight.storageFormat, '8');
    await redis.hset(
      eight.topics,
      'projects/p/topics/kept',
      JSON.stringify({ name: 'projects/p/topics/kept', uid: 'ef', messageRetentionDuration: '600s' }),
    );
    t.equal(await claimStorageFormat(redis, eight, scripts), undefined, 'a store of format 8 is claimed as it is');
    t.equal(await redis.get(eight.storageFormat), STORAGE_FORMAT, `recorded as format ${STORAGE_FORMAT}`);
    t.equal(
      await redis.exists(eight.logRetention, eight.logExpiries),
      0,
      'its index of the retained logs left as it is',
    );

    const other = new Keys(uniquePrefix('format-other'));
    await redis.set(other.storageFormat, '99');
    t.match(
      await claimStorageFormat(redis, other, scripts),
      /storage format 99/,
      'a store recorded in another format is refused',
    );
  });

  t.test(`${target.name}: a drained store of the earlier format is claimed, and its message IDs go on`, async (t) => {
    const redis = target.connect();
    t.teardown(() => redis.quit());
    const prefix = uniquePrefix('format-drained');
    const keys = new Keys(prefix);
    // A topic and subscription made by this version, then rewound to what format 1 left behind.
    const made = await buildApp({ redis, keyPrefix: prefix });
    const api = jsonApi(made);
    await api('PUT', '/v1/projects/p/topics/drained', {});
    await api('PUT', '/v1/projects/p/subscriptions/drained', { topic: 'projects/p/topics/drained' });
    await made.close();
    const { uid } = JSON.parse((await redis.hget(keys.topics, 'projects/p/topics/drained'))!);
    await redis.del(keys.storageFormat);
    await redis.hdel(keys.topicData(uid).state, 'block', 'used');
    await redis.hset(keys.topicData(uid).state, 'seq', '5432');

    const app = await buildApp({ redis, keyPrefix: prefix });
    t.teardown(() => app.close());
    t.equal(await redis.get(keys.storageFormat), STORAGE_FORMAT, 'claimed');
    const { body } = await jsonApi(app)('POST', '/v1/projects/p/topics/drained:publish', {
      messages: [{ data: 'QUJD' }],
    });
    t.same(body.messageIds, ['6000'], 'the next message ID lies past every one format 1 handed out');
  });

  t.test(`${target.name}: a broker app on a store it must not serve never uses it`, async (t) => {
    const redis = target.connect();
    t.teardown(() => redis.quit());
    const keys = new Keys(uniquePrefix('format-refused'));
    await holdFormat1Messages(redis, keys, '0123456789abcdef');
    const problems: string[] = [];
    const app = await buildApp({
      redis,
      keyPrefix: keys.prefix,
      onStorageProblem: (problem) => problems.push(problem),
    });
    t.teardown(() => app.close());
    t.match(problems, [/earlier version of the broker/], 'it heard why');
    const api = jsonApi(app);
    for (const [method, url, body] of [
      ['GET', '/v1/projects/p/topics/orders', undefined],
      ['POST', '/v1/projects/p/topics/orders:publish', { messages: [{ data: 'QUJD' }] }],
      ['POST', '/v1/projects/p/subscriptions/orders:pull', { maxMessages: 1 }],
      ['GET', '/readyz', undefined],
    ] as const) {
      const answer = await api(method, url, body);
      t.equal(answer.status, 503, `${method} ${url}: UNAVAILABLE`);
    }
    t.equal(await redis.exists(keys.storageFormat), 0, 'the store was not claimed');
  });
}

t.test('a store refused when Redis reconnects takes the region out of use', async (t) => {
  const [standalone] = redisTargets();
  const redis = standalone.connect();
  t.teardown(() => redis.quit());
  const keys = new Keys(uniquePrefix('format-recheck'));
  const problems: string[] = [];
  const app = await buildApp({ redis, keyPrefix: keys.prefix, onStorageProblem: (problem) => problems.push(problem) });
  t.teardown(() => app.close());
  const api = jsonApi(app);
  t.equal((await api('PUT', '/v1/projects/p/topics/orders', {})).status, 200, 'served');
  await redis.set(keys.storageFormat, '99'); // another version took the store over meanwhile
  redis.disconnect(true); // and the connection was lost and made again
  t.ok(await waitUntil(() => problems.length > 0, 5_000), 'the check after the reconnect refused the store');
  t.equal((await api('GET', '/v1/projects/p/topics/orders')).status, 503, 'and the region is out of use');
  t.equal((await api('GET', '/readyz')).status, 503);
});

t.test('with regions, a refused region is left out of use and out of the control plane', async (t) => {
  // Two regions on one test server: region a in database 0, region b in database 1.
  const regionA = new Redis(testRedisUrl(), { maxRetriesPerRequest: 1 });
  const regionB = new Redis(`${testRedisUrl()}/1`, { maxRetriesPerRequest: 1 });
  t.teardown(() => Promise.all([regionA.quit(), regionB.quit()]));
  const keys = new Keys(uniquePrefix('format-regions'));
  await holdFormat1Messages(regionB, keys, '0123456789abcdef');
  const problems: string[] = [];
  const app = await buildApp({
    redis: regionA,
    keyPrefix: keys.prefix,
    regions: { local: 'a', others: [{ name: 'b', redis: regionB }] },
    onStorageProblem: (problem, region) => problems.push(`${region.name}: ${problem}`),
  });
  t.teardown(async () => {
    await app.close();
    for (const redis of [regionA, regionB]) {
      const left = await scanKeys(redis, `${keys.prefix}:*`);
      if (left.length > 0) await redis.del(...left);
    }
  });
  t.match(problems, [/^b: .*earlier version of the broker/], 'region b was refused');
  const api = jsonApi(app);
  t.ok(
    await waitUntil(async () => (await api('PUT', '/v1/projects/p/topics/fresh', {})).status === 200, 5_000),
    'region a serves',
  );
  t.equal(
    (await api('GET', '/v1/projects/p/topics/orders')).status,
    404,
    "region b's records were not copied into region a",
  );
  t.equal(await regionB.hexists(keys.topics, 'projects/p/topics/fresh'), 0, "nor region a's into region b");
});

/** What an earlier version of the broker left: a topic, and a message body in a `messages` hash. */
async function holdFormat1Messages(redis: RedisClient, keys: Keys, uid: string): Promise<void> {
  await redis.hset(
    keys.topics,
    'projects/p/topics/orders',
    JSON.stringify({ name: 'projects/p/topics/orders', uid, version: 1 }),
  );
  await redis.hset(keys.topicData(uid).state, 'seq', '1');
  await redis.hset(`${keys.prefix}:{t${uid}}:messages`, '1', 'a body of the earlier format');
}

t.test('the broker process refuses a store of an earlier format before it listens', async (t) => {
  const [standalone] = redisTargets();
  const redis = standalone.connect();
  t.teardown(() => redis.quit());
  const keys = new Keys(uniquePrefix('format-process'));
  await holdFormat1Messages(redis, keys, '0123456789abcdef');
  const started = startBrokerProcess({ REDIS_URL: testRedisUrl(), KEY_PREFIX: keys.prefix, LOG_LEVEL: 'info' });
  const error = await started.then(
    // Should it serve after all, it must not outlive the test.
    (broker) => void t.teardown(() => stopProcess(broker.child, 'SIGTERM', 5_000)),
    (failure: Error) => failure,
  );
  t.ok(error, 'it never became ready');
  t.match(error?.message, /broker exited early \(1\)/, 'it exited with code 1');
  t.match(error?.message, /earlier version of the broker/, 'saying why');
  t.notMatch(error?.message, /listening on/, 'without listening');
});
