// Publish times are stamped by the broker from its reading of the one clock (Redis TIME) and
// judged by the publish script (PublishClock in src/broker/clock.ts, publish.lua). Checked here,
// on standalone and cluster:
//   - a stamp from 10 s behind to 1 s ahead of Redis TIME is stored as stamped; a stamp outside
//     that window is refused with the script's time and changes nothing (bodies passed in the
//     call or staged: a refusal deletes the staged ones);
//   - a broker whose reading is an hour behind or ahead (a machine that slept, a Redis clock set
//     anew) still publishes, and the message's publishTime lies between two readings of Redis
//     TIME taken before and after the publish (less the time a reply takes to reach the broker,
//     by which a stamp may trail);
//   - a broker that cannot produce an acceptable stamp answers UNAVAILABLE and stores nothing.
import t, { type Test } from 'tap';
import { redisTimeUs } from '../../src/broker/clock.ts';
import { unpackMessage } from '../../src/broker/message-codec.ts';
import { SEQS_PER_BLOCK } from '../../src/redis/keys.ts';
import { b64, startBroker, type TestBroker } from '../helpers/app.ts';
import { redisTargets, storedBodies } from '../helpers/redis.ts';
import { callPublishScript, pullNow, topicData } from '../helpers/topic.ts';

const P = '/v1/projects/p';
const HOUR_US = 3_600_000_000;
const STAMP_TRAIL_ALLOWANCE_US = 250_000;

/** Microseconds since the epoch of a publishTime such as 2026-01-01T00:00:00.123456Z. */
const timestampUs = (text: string) => Date.parse(`${text.slice(0, 23)}Z`) * 1000 + Number(text.slice(23, 26));

async function topicWithSubscription(t: Test, broker: TestBroker, id: string): Promise<void> {
  t.equal((await broker.api('PUT', `${P}/topics/${id}`, {})).status, 200);
  t.equal((await broker.api('PUT', `${P}/subscriptions/${id}`, { topic: `projects/p/topics/${id}` })).status, 200);
}

for (const target of redisTargets()) {
  for (const staged of [false, true]) {
    const how = staged ? 'staged bodies' : 'bodies in the call';
    t.test(
      `${target.name}, ${how}: the publish script stores a stamp within its window and refuses one outside`,
      async (t) => {
        const broker = await startBroker(t, { target, name: 'stamp-window' });
        await topicWithSubscription(t, broker, 'window');
        const topic = await topicData(broker, 'window');
        const { ctx, data } = topic;
        const stagingKey = data.staging('stamp-window');
        const publishAt = (stampUs: number) =>
          callPublishScript(topic, { text: `at ${stampUs}`, stampUs, staged, stagingKey });

        for (const offsetUs of [-HOUR_US, -10_500_000, 1_500_000, HOUR_US]) {
          const before = await redisTimeUs(ctx.redis);
          const { result } = await publishAt(before + offsetUs);
          const after = await redisTimeUs(ctx.redis);
          t.equal(result.kind, 'stamp-refused', `a stamp ${offsetUs / 1e6} s off is refused`);
          t.ok(
            result.kind === 'stamp-refused' && result.redisTimeUs >= before && result.redisTimeUs <= after,
            'the refusal carries the script time',
          );
        }
        t.equal(await ctx.redis.hget(data.state, 'block'), null, 'no refused publish took a sequence number');
        t.equal((await storedBodies(ctx.redis, data)).size, 0, 'no refused publish stored a body');
        t.equal(await ctx.redis.exists(stagingKey), 0, 'nor left its staged bodies');

        for (const offsetUs of [-9_000_000, 0, 500_000]) {
          const stampUs = (await redisTimeUs(ctx.redis)) + offsetUs;
          const { result, body } = await publishAt(stampUs);
          t.equal(result.kind, 'published', `a stamp ${offsetUs / 1e6} s off is accepted`);
          const firstSeq = result.kind === 'published' ? result.firstSeq : NaN;
          const stored = (await storedBodies(ctx.redis, data)).get(String(firstSeq));
          t.same(stored, body, 'the body is stored exactly as sent');
          t.equal(unpackMessage(stored!).publishTimeUs, stampUs, 'with the stamped time');
          t.equal(
            await ctx.redis.ttl(data.bodyBlock(Math.floor(firstSeq / SEQS_PER_BLOCK))),
            -1,
            'its body block does not expire',
          );
        }
        t.equal(await ctx.redis.exists(stagingKey), 0, 'no staging key is left');
        t.equal((await pullNow(broker, 'window')).length, 3, 'the three accepted messages are delivered');
      },
    );
  }

  for (const [reading, offsetUs] of [
    ['an hour behind', -HOUR_US],
    ['an hour ahead', HOUR_US],
  ] as const) {
    t.test(
      `${target.name}: a broker whose reading of the clock is ${reading} still stamps the right time`,
      async (t) => {
        const broker = await startBroker(t, { target, name: 'stale-reading' });
        await topicWithSubscription(t, broker, 'stale');
        const ctx = broker.app.broker.ctx;
        ctx.publishClock.observe((await redisTimeUs(ctx.redis)) + offsetUs);
        for (const round of [1, 2]) {
          const before = await redisTimeUs(ctx.redis);
          const { status, body } = await broker.api('POST', `${P}/topics/stale:publish`, {
            messages: [{ data: b64(`round ${round}`) }],
          });
          const after = await redisTimeUs(ctx.redis);
          t.equal(status, 200, `publish ${round} succeeds`);
          t.equal(body.messageIds.length, 1);
          const [received] = await pullNow(broker, 'stale');
          const publishedUs = timestampUs(received.message.publishTime);
          // A stamp may trail by how long the reply it was read from took to reach the broker
          // (clock.ts): a quarter of a second allows a busy test machine, and an hour off would show.
          t.ok(
            publishedUs >= before - STAMP_TRAIL_ALLOWANCE_US && publishedUs <= after,
            `publish ${round}: publishTime lies within the publish (${received.message.publishTime})`,
          );
          await broker.api('POST', `${P}/subscriptions/stale:acknowledge`, { ackIds: [received.ackId] });
        }
      },
    );
  }

  t.test(`${target.name}: a publish whose every stamp is refused answers UNAVAILABLE after three`, async (t) => {
    const broker = await startBroker(t, { target, name: 'no-stamp' });
    await topicWithSubscription(t, broker, 'nostamp');
    const scripts = broker.app.broker.ctx.scripts;
    const runEncoded = scripts.runEncoded.bind(scripts);
    const stamps: string[] = [];
    // A Redis whose clock jumps ahead by an hour before every call: no stamp can keep up.
    scripts.runEncoded = async (_name, _keys, args) => {
      stamps.push(args[1]);
      return [-3, (await redisTimeUs(broker.redis)) + HOUR_US * stamps.length];
    };
    const { status, body } = await broker.api('POST', `${P}/topics/nostamp:publish`, {
      messages: [{ data: b64('never') }],
    });
    scripts.runEncoded = runEncoded;
    t.equal(status, 503);
    t.equal(body.error.status, 'UNAVAILABLE');
    t.match(body.error.message, /publish time/);
    t.equal(stamps.length, 3, 'three stamps were tried');
    t.ok(Number(stamps[1]) - Number(stamps[0]) > HOUR_US / 2, 'the second stamp came from the first refusal');
    t.ok(Number(stamps[2]) - Number(stamps[1]) > HOUR_US / 2, 'the third from the second');
    t.same(await pullNow(broker, 'nostamp'), [], 'nothing was stored');
  });
}
