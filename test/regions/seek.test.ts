// Seek with regions: a subscription's messages may be stored in every region (each publish in
// its endpoint's), and a seek through any endpoint applies in all of them; a snapshot records them
// in every region.

import t from 'tap';
import { b64, unb64 } from '../helpers/app.ts';
import { startRegions } from '../helpers/regions.ts';

const P = '/v1/projects/p';

t.test('a seek through one endpoint replays and purges the messages of every region', async (t) => {
  const d = await startRegions(t, ['a', 'b']);
  t.equal((await d.api('a', 'PUT', `${P}/topics/everywhere`, {})).status, 200);
  const created = await d.api('a', 'PUT', `${P}/subscriptions/everywhere`, {
    topic: 'projects/p/topics/everywhere',
    retainAckedMessages: true,
  });
  t.equal(created.status, 200);
  const before = new Date(Date.now() - 1000).toISOString();
  for (const region of ['a', 'b']) {
    const published = await d.api(region, 'POST', `${P}/topics/everywhere:publish`, {
      messages: [{ data: b64(`stored in ${region}`) }],
    });
    t.equal(published.status, 200, `published through ${region}`);
  }
  const pullAll = async (region: string) => {
    const { body } = await d.api(region, 'POST', `${P}/subscriptions/everywhere:pull`, {
      maxMessages: 10,
      returnImmediately: true,
    });
    return (body.receivedMessages ?? []) as { ackId: string; message: { data: string } }[];
  };
  const first = await pullAll('a');
  t.same(first.map((m) => unb64(m.message.data)).sort(), ['stored in a', 'stored in b'], 'both delivered');
  t.equal(
    (await d.api('a', 'POST', `${P}/subscriptions/everywhere:acknowledge`, { ackIds: first.map((m) => m.ackId) }))
      .status,
    200,
  );

  t.equal((await d.api('b', 'POST', `${P}/subscriptions/everywhere:seek`, { time: before })).status, 200);
  const replayed = await pullAll('a');
  t.same(
    replayed.map((m) => unb64(m.message.data)).sort(),
    ['stored in a', 'stored in b'],
    'a seek through b brings back the messages of both regions',
  );
  const later = new Date(Date.now() + 60_000).toISOString();
  t.equal((await d.api('a', 'POST', `${P}/subscriptions/everywhere:seek`, { time: later })).status, 200);
  t.same(await pullAll('b'), [], 'and a purge through a empties both');
});

t.test(
  'a snapshot records the messages of every region; a seek to it through another endpoint restores them',
  async (t) => {
    const d = await startRegions(t, ['a', 'b']);
    t.equal((await d.api('a', 'PUT', `${P}/topics/snapped`, {})).status, 200);
    t.equal(
      (await d.api('a', 'PUT', `${P}/subscriptions/snapped`, { topic: 'projects/p/topics/snapped' })).status,
      200,
    );
    const publishThrough = async (region: string, text: string) => {
      const published = await d.api(region, 'POST', `${P}/topics/snapped:publish`, { messages: [{ data: b64(text) }] });
      t.equal(published.status, 200, `published through ${region}`);
    };
    const drain = async (region: string) => {
      const { body } = await d.api(region, 'POST', `${P}/subscriptions/snapped:pull`, {
        maxMessages: 10,
        returnImmediately: true,
      });
      const received: { ackId: string; message: { data: string } }[] = body.receivedMessages ?? [];
      if (received.length > 0) {
        const acked = await d.api(region, 'POST', `${P}/subscriptions/snapped:acknowledge`, {
          ackIds: received.map((m) => m.ackId),
        });
        t.equal(acked.status, 200);
      }
      return received.map((m) => unb64(m.message.data)).sort();
    };
    await publishThrough('a', 'before in a');
    await publishThrough('b', 'before in b');
    const made = await d.api('b', 'PUT', `${P}/snapshots/both`, { subscription: 'projects/p/subscriptions/snapped' });
    t.equal(made.status, 200, 'the snapshot is made through b');
    await publishThrough('a', 'after in a');
    await publishThrough('b', 'after in b');
    t.same(await drain('a'), ['after in a', 'after in b', 'before in a', 'before in b'], 'all delivered');
    t.equal((await d.api('a', 'GET', `${P}/snapshots/both`)).status, 200, 'a knows the snapshot');
    const seek = await d.api('a', 'POST', `${P}/subscriptions/snapped:seek`, { snapshot: 'projects/p/snapshots/both' });
    t.equal(seek.status, 200, 'a seek to it through a');
    t.same(
      await drain('b'),
      ['after in a', 'after in b', 'before in a', 'before in b'],
      'brings back what it held, and what came after, in both regions',
    );
    t.equal((await d.api('a', 'DELETE', `${P}/snapshots/both`)).status, 200);
    t.equal((await d.api('b', 'GET', `${P}/snapshots/both`)).status, 404, 'deleted in both');
  },
);
