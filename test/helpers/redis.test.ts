// Proves the test Redis servers started by tap's `before` program are usable,
// and that the cluster really enforces single-slot scripts (the reason it is
// part of the test setup: a Lua script touching keys outside one hash tag
// works on standalone Redis but fails in production on a cluster).
import t from 'tap';
import { redisTargets, testClusterNodes, testRedisUrl, uniquePrefix } from './redis.ts';

// Writes both keys; only legal on a cluster when both keys share a slot.
const MSET_SCRIPT = "return redis.call('MSET', KEYS[1], ARGV[1], KEYS[2], ARGV[2])";

t.test('defaults and prefixes', async (t) => {
  t.match(testRedisUrl(), /^redis:\/\/127\.0\.0\.1:\d+$/);
  t.ok(testClusterNodes().length >= 3, 'cluster has at least 3 seed nodes');
  const a = uniquePrefix('x');
  const b = uniquePrefix('x');
  t.not(a, b, 'each call gives a new namespace');
  t.match(a, /^t-x-[0-9a-f]{12}$/);
  t.notMatch(uniquePrefix('{tag}'), /[{}]/, 'names cannot inject a hash tag');
});

for (const target of redisTargets()) {
  t.test(`${target.name}: SET/GET`, async (t) => {
    const redis = target.connect();
    t.teardown(() => redis.quit());
    const key = `${uniquePrefix('smoke')}:k`;
    t.equal(await redis.set(key, 'v', 'EX', 60), 'OK');
    t.equal(await redis.get(key), 'v');
    await redis.del(key);
  });
}

t.test('standalone: cross-slot EVAL is allowed (so it cannot catch the bug)', async (t) => {
  const redis = redisTargets()
    .find((x) => x.name === 'standalone')!
    .connect();
  t.teardown(() => redis.quit());
  const p = uniquePrefix('crossslot');
  const keys = [`${p}:{a}`, `${p}:{b}`];
  t.equal(await redis.eval(MSET_SCRIPT, 2, ...keys, '1', '2'), 'OK');
  await redis.del(...keys);
});

const clusterTarget = redisTargets().find((x) => x.name === 'cluster');
t.test(
  'cluster: cross-slot EVAL fails with CROSSSLOT',
  { skip: clusterTarget ? false : 'TEST_SKIP_CLUSTER is set' },
  async (t) => {
    const redis = clusterTarget!.connect();
    t.teardown(() => redis.quit());
    const p = uniquePrefix('crossslot');

    // Hash tags {a} and {b} pin the keys to known, different slots.
    const crossKeys = [`${p}:{a}`, `${p}:{b}`];
    const slots = await Promise.all(crossKeys.map((k) => redis.cluster('KEYSLOT', k)));
    t.not(slots[0], slots[1], 'the two keys live in different slots');
    await t.rejects(redis.eval(MSET_SCRIPT, 2, ...crossKeys, '1', '2'), /CROSSSLOT/);

    // The same script is fine when the keys share a hash tag.
    const sameKeys = [`${p}:{a}:1`, `${p}:{a}:2`];
    t.equal(await redis.eval(MSET_SCRIPT, 2, ...sameKeys, '1', '2'), 'OK');
    await redis.del(...sameKeys);
  },
);
