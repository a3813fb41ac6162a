// The queryable backlog with regions (README.md, "Queryable backlog"): the views cover the
// messages stored in every usable region, through any region's endpoint; pages go from one
// region to the next; a message is found by its region's ID; a region whose Redis is away is
// left out of the views until it is back.

import t from 'tap';
import { b64 } from '../helpers/app.ts';
import { startRegions } from '../helpers/regions.ts';
import { waitUntil } from '../helpers/wait.ts';

const P = '/v1/projects/p';

t.test('backlog views across regions', async (t) => {
  const d = await startRegions(t, ['a', 'b', 'c']);
  const ok = async (region: string, method: string, url: string, body?: unknown) => {
    const reply = await d.api(region, method, url, body);
    if (reply.status !== 200) throw new Error(`${method} ${url} through ${region}: ${JSON.stringify(reply.body)}`);
    return reply.body;
  };
  await ok('a', 'PUT', `${P}/topics/blog`, {});
  await ok('a', 'PUT', `${P}/subscriptions/bl-sub`, { topic: 'projects/p/topics/blog' });
  const stored: Record<string, string[]> = {};
  for (const [region, count] of [
    ['a', 3],
    ['b', 2],
    ['c', 1],
  ] as const) {
    const messages = Array.from({ length: count }, (_, i) => ({ data: b64(`${region}${i}`) }));
    stored[region] = (await ok(region, 'POST', `${P}/topics/blog:publish`, { messages })).messageIds;
    t.ok(
      stored[region].every((id) => id.startsWith(`${region}-`)),
      `published through ${region}, stored in ${region}`,
    );
  }
  const all = Object.values(stored).flat().sort();

  /** Every message ID of the view through `region`, page by page. */
  const walk = async (region: string, pageSize: number) => {
    const seen: string[] = [];
    let token = '';
    do {
      const query = `pageSize=${pageSize}${token ? `&pageToken=${token}` : ''}`;
      const body = await ok(region, 'GET', `${P}/subscriptions/bl-sub/messages?${query}`);
      seen.push(...(body.messages ?? []).map((m: { message: { messageId: string } }) => m.message.messageId));
      token = body.nextPageToken ?? '';
    } while (token && seen.length < 100);
    return seen.sort();
  };

  // The oldest message over every region: the earliest publish time (the regions' clocks agree here).
  const publishTimes = await Promise.all(
    all.map(async (id) => (await ok('a', 'GET', `${P}/topics/blog/messages/${id}`)).message.publishTime as string),
  );
  const oldest = publishTimes.sort()[0]; // one format (UTC, microseconds): text order is time order
  for (const region of ['a', 'b', 'c']) {
    t.same(await walk(region, 2), all, `through ${region}, pages of 2: every region's messages once`);
    t.same(await walk(region, 100), all, `through ${region}, one page`);
    const counts = await ok(region, 'GET', `${P}/subscriptions/bl-sub/backlog`);
    t.match(
      counts,
      {
        unackedMessageCount: 6,
        leasedMessageCount: 0,
        forwardingMessageCount: 0,
        waitingMessageCount: 6,
        oldestUnackedPublishTime: oldest,
        oldestUnackedMessageAge: /^\d+(\.\d+)?s$/,
      },
      `counts through ${region}`,
    );
  }
  const remote = await ok('a', 'GET', `${P}/topics/blog/messages/${stored.b[1]}`);
  t.same(remote.message.data, b64('b1'), "b's message through a's endpoint");
  t.same((await d.api('a', 'GET', `${P}/topics/blog/messages/x-1000`)).body.error.status, 'INVALID_ARGUMENT');
  t.same(
    (await d.api('a', 'GET', `${P}/topics/blog/messages/1000`)).body.error.message,
    'Invalid message ID: "1000". Message IDs are "<region>-<number>", with a region of this deployment.',
  );
  t.same((await d.api('a', 'GET', `${P}/topics/blog/messages/b-99999`)).body.error.status, 'NOT_FOUND');

  /** Whether the counts through a come to `unacked` within 10 s (a region's state takes a moment to change). */
  const countsSoon = (unacked: number) =>
    waitUntil(
      async () => (await d.api('a', 'GET', `${P}/subscriptions/bl-sub/backlog`)).body.unackedMessageCount === unacked,
      10_000,
      50,
    );
  // c's Redis goes away: the views show what the usable regions hold.
  await d.redis.get('c')!.kill();
  t.ok(await countsSoon(5), "counts leave c's message out");
  t.same(await walk('a', 2), [...stored.a, ...stored.b].sort(), 'pages leave c out');
  t.equal((await d.api('a', 'GET', `${P}/topics/blog/messages/${stored.c[0]}`)).body.error.status, 'UNAVAILABLE');
  await d.redis.get('c')!.start();
  await d.waitReady('c');
  t.ok(await countsSoon(6), 'c is counted again once it is back');
  t.same(await walk('b', 1), all, 'and paged again');
});
