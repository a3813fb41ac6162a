// The periodic control-plane sync (control-plane.ts, every 30 s) compares the regions' records
// only when some region's store changed since the last sync that completed: its count of puts
// (`control-changes`), its identity (`store-id`, gone with a store that lost its data) or its ack
// ID secret. With nothing changed it reads one MGET per region, however many records there are.
// Counted, never timed. A sync asked for otherwise (a reconnect, a failed copy) compares them all.

import t from 'tap';
import type { Region } from '../../src/broker/regions.ts';
import { putTopic } from '../../src/redis/calls/control-plane.ts';
import { countCommands } from '../helpers/commands.ts';
import { startRegions } from '../helpers/regions.ts';

const P = '/v1/projects/p';
const RECORDS = 50;

t.test(
  'the periodic sync reads one MGET per region while nothing changed, and syncs a region that changed',
  async (t) => {
    const d = await startRegions(t, ['a', 'b', 'c']);
    for (let i = 0; i < RECORDS; i++) {
      t.equal((await d.api('a', 'PUT', `${P}/topics/idle-${i}`, {})).status, 200);
      const subscription = await d.api('a', 'PUT', `${P}/subscriptions/idle-${i}`, {
        topic: `projects/p/topics/idle-${i}`,
      });
      t.equal(subscription.status, 200);
    }
    const broker = d.brokers.get('a')!.app.broker;
    const { controlPlane } = broker;
    const count = (regions: readonly Region[]) => regions.map((region) => countCommands(region.ctx.redis as never));
    // A full sync (its own copies, if any, move the counts: a second one settles them).
    await controlPlane.requestSync();
    await controlPlane.requestSync(false);

    for (let round = 0; round < 3; round++) {
      const counts = count(broker.regions.all);
      await controlPlane.requestSync(false);
      for (const counted of counts) counted.stop();
      t.same(
        counts.map((counted) => Object.fromEntries(counted.byName)),
        [{ MGET: 1 }, { MGET: 1 }, { MGET: 1 }],
        `round ${round}: one MGET per region, nothing else (${2 * RECORDS} records)`,
      );
    }

    // A put that reached region c only (a write whose copies to a and b were lost).
    const c = broker.regions.byName('c')!;
    const record = { name: 'projects/p/topics/only-in-c', uid: '0123456789abcdef', version: 1 };
    const json = JSON.stringify(record);
    const put = { mode: 'newer', expected: '', name: record.name, json, version: 1, tombstone: false } as const;
    await putTopic(c.ctx.scripts, c.ctx.keys, record.uid, { ...put, time: '', retentionUs: undefined });
    t.equal((await d.api('a', 'GET', `${P}/topics/only-in-c`)).status, 404, 'a does not have it');
    await controlPlane.requestSync(false);
    for (const region of ['a', 'b', 'c']) {
      t.equal(
        (await d.api(region, 'GET', `${P}/topics/only-in-c`)).status,
        200,
        `the periodic sync copied it to ${region}`,
      );
    }

    // (The copies it made moved a's and b's counts: the next periodic sync compares once more.)
    await controlPlane.requestSync(false);

    // Region c's store loses data (a restart without persistence): its identity goes with it (and
    // another node's sync may already have made a new one), even where its count of puts happens
    // to be back where it was.
    const changes = await c.ctx.redis.get(c.ctx.keys.controlChanges);
    await c.ctx.redis.hdel(c.ctx.keys.topics, 'projects/p/topics/idle-0');
    await c.ctx.redis.zrem(c.ctx.keys.topicIndex, 'projects/p/topics/idle-0');
    await c.ctx.redis.set(c.ctx.keys.storeId, 'made-by-another-node');
    await c.ctx.redis.set(c.ctx.keys.controlChanges, changes!);
    t.equal((await d.api('c', 'GET', `${P}/topics/idle-0`)).status, 404, 'c lost a record');
    await controlPlane.requestSync(false);
    t.equal((await d.api('c', 'GET', `${P}/topics/idle-0`)).status, 200, 'the periodic sync restores it');

    // The ack ID secret, which no put counts (made where none is, on first use): a store without
    // it gets it from the periodic sync.
    const a = broker.regions.byName('a')!;
    const secret = 'ab'.repeat(32);
    await a.ctx.redis.set(a.ctx.keys.ackSecret, secret);
    await controlPlane.requestSync(false);
    t.equal(await c.ctx.redis.get(c.ctx.keys.ackSecret), secret, 'the periodic sync shares a new one');
    await controlPlane.requestSync(false);
    await c.ctx.redis.del(c.ctx.keys.ackSecret);
    await controlPlane.requestSync(false);
    t.equal(await c.ctx.redis.get(c.ctx.keys.ackSecret), secret, 'c gets it back from the periodic sync');
  },
);
