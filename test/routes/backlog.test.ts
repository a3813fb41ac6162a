// The queryable backlog (README.md, "Queryable backlog"): each view against what the broker
// holds, every bad request answered with its Pub/Sub error, and no view changes anything (every
// structure of the subscription, activeAt included, is the same after as before).

import t from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { Keys, type SubscriptionKeys } from '../../src/redis/keys.ts';
import { startBroker, type TestBroker } from '../helpers/app.ts';
import { redisTargets, type RedisClient } from '../helpers/redis.ts';
import { badResourceName, client, failedPrecondition, invalid, notFound } from './_support.ts';

const P = 'bl-project';
const T = `/v1/projects/${P}/topics`;
const S = `/v1/projects/${P}/subscriptions`;
const b64 = (text: string) => Buffer.from(text).toString('base64');

async function subscriptionKeys(broker: TestBroker, id: string): Promise<SubscriptionKeys> {
  const keys = new Keys(broker.prefix);
  const record = JSON.parse((await broker.redis.hget(keys.subscriptions, `projects/${P}/subscriptions/${id}`))!);
  return keys.topicData(record.topicUid).subscription(record.uid);
}

/** Everything a subscription holds in Redis. */
async function stored(redis: RedisClient, sub: SubscriptionKeys) {
  return {
    config: await redis.hgetall(sub.config),
    ready: await redis.lrange(sub.ready, 0, -1),
    leased: await redis.zrange(sub.leased, 0, -1, 'WITHSCORES'),
    delayed: await redis.zrange(sub.delayed, 0, -1, 'WITHSCORES'),
    forwarding: await redis.zrange(sub.forwarding, 0, -1, 'WITHSCORES'),
    keyed: await redis.zrange(sub.keyed, 0, -1),
    deliveries: await redis.hgetall(sub.keyedDeliveries),
    keyStates: await redis.hgetall(sub.keyStates),
  };
}

for (const target of redisTargets()) {
  t.test(`backlog views (${target.name})`, async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: `backlog-${target.name}` });
    const { api } = client(broker);
    t.equal((await api('PUT', `${T}/bl-topic`, {})).status, 200);
    const retry = { retryPolicy: { minimumBackoff: '30s', maximumBackoff: '30s' } };
    t.equal((await api('PUT', `${S}/bl-sub`, { topic: `projects/${P}/topics/bl-topic`, ...retry })).status, 200);
    t.equal(
      (
        await api('PUT', `${S}/bl-ord`, {
          topic: `projects/${P}/topics/bl-topic`,
          enableMessageOrdering: true,
          ...retry,
        })
      ).status,
      200,
    );
    const published = await api('POST', `${T}/bl-topic:publish`, {
      messages: [
        { data: b64('one'), attributes: { n: '1', colour: 'red' } },
        { data: b64('two'), attributes: { n: '2' } },
        { data: b64('three'), attributes: { n: '3', colour: 'blue' } },
      ],
    });
    const [one, two, three] = published.body.messageIds;
    const keyed = await api('POST', `${T}/bl-topic:publish`, {
      messages: [
        { data: b64('k1'), orderingKey: 'k' },
        { data: b64('k2'), orderingKey: 'k' },
      ],
    });
    const [k1, k2] = keyed.body.messageIds;
    clock.advanceSeconds(1); // a later publish time
    const scheduled = await api('POST', `${T}/bl-topic:publish`, {
      messages: [{ data: b64('later'), deliveryDelay: '60s' }],
    });
    const [later] = scheduled.body.messageIds;

    // bl-sub: one leased, one nacked into backoff; bl-ord: key k's first message leased.
    const pulled = await api('POST', `${S}/bl-sub:pull`, { maxMessages: 2, returnImmediately: true });
    t.same(
      pulled.body.receivedMessages.map((m: any) => m.message.messageId),
      [one, two],
    );
    const nack = pulled.body.receivedMessages[1].ackId;
    t.equal(
      (await api('POST', `${S}/bl-sub:modifyAckDeadline`, { ackIds: [nack], ackDeadlineSeconds: 0 })).status,
      200,
    );
    const ordPull = await api('POST', `${S}/bl-ord:pull`, { maxMessages: 10, returnImmediately: true });
    t.ok(ordPull.body.receivedMessages.some((m: any) => m.message.messageId === k1));

    const subKeys = await subscriptionKeys(broker, 'bl-sub');
    const ordKeys = await subscriptionKeys(broker, 'bl-ord');
    const before = [await stored(broker.redis, subKeys), await stored(broker.redis, ordKeys)];

    const list = async (id: string, query = '') => api('GET', `${S}/${id}/messages${query}`);
    const byState = (body: any) =>
      Object.fromEntries((body.messages ?? []).map((m: any) => [m.message.messageId, m.state]));

    await t.test('every state of an unordered subscription', async (t) => {
      const { status, body } = await list('bl-sub');
      t.equal(status, 200);
      t.same(byState(body), {
        [one]: 'LEASED',
        [two]: 'BACKOFF',
        [three]: 'AVAILABLE',
        [k1]: 'AVAILABLE',
        [k2]: 'AVAILABLE',
        [later]: 'SCHEDULED',
      });
      t.notOk(body.nextPageToken, 'one page holds them all');
      const item = (id: string) => body.messages.find((m: any) => m.message.messageId === id);
      t.same(item(one).message, {
        data: b64('one'),
        attributes: { n: '1', colour: 'red' },
        messageId: one,
        publishTime: item(one).message.publishTime,
      });
      t.equal(item(one).deliveryAttempt, 1);
      t.match(item(one).leaseExpireTime, /^\d{4}-\d\d-\d\dT/);
      t.equal(item(two).deliveryAttempt, 1);
      t.ok(item(two).backoffEndTime);
      t.equal(item(three).deliveryAttempt, 0);
      t.ok(item(later).deliveryTime);
      t.equal(item(k1).message.orderingKey, 'k');
    });

    await t.test('an ordered subscription', async (t) => {
      const { body } = await list('bl-ord');
      const states = byState(body);
      t.equal(states[k1], 'LEASED');
      t.equal(states[k2], 'LEASED', 'consecutive messages of a key go out together');
      t.equal(states[later], 'SCHEDULED');
      const key = await list('bl-ord', '?orderingKey=k');
      t.same(Object.keys(byState(key.body)).sort(), [k1, k2].sort(), 'one key');
    });

    await t.test('conditions', async (t) => {
      t.same(
        Object.keys(byState((await list('bl-sub', '?state=AVAILABLE,LEASED')).body)).sort(),
        [one, three, k1, k2].sort(),
      );
      t.same(
        Object.keys(byState((await list('bl-sub', '?state=AVAILABLE&state=BACKOFF')).body)).sort(),
        [two, three, k1, k2].sort(),
      );
      t.same(
        Object.keys(
          byState((await list('bl-sub', `?filter=${encodeURIComponent('attributes.colour = "blue"')}`)).body),
        ),
        [three],
      );
      t.same(Object.keys(byState((await list('bl-sub', '?orderingKey=k')).body)).sort(), [k1, k2].sort());
      const basic = await list('bl-sub', '?view=BASIC&state=LEASED');
      t.same(basic.body.messages[0].message.data, undefined, 'BASIC leaves data out');
      const all = (await list('bl-sub')).body.messages;
      const publishTime = all.find((m: any) => m.message.messageId === later).message.publishTime;
      const after = await list('bl-sub', `?publishTimeStart=${publishTime}`);
      t.same(Object.keys(byState(after.body)), [later], 'publishTimeStart is inclusive');
      const beforeLater = await list('bl-sub', `?publishTimeEnd=${publishTime}`);
      t.notOk(byState(beforeLater.body)[later], 'publishTimeEnd is exclusive');
    });

    await t.test('pages', async (t) => {
      const seen: string[] = [];
      let token = '';
      let pages = 0;
      do {
        const { status, body } = await list('bl-sub', `?pageSize=2${token ? `&pageToken=${token}` : ''}`);
        t.equal(status, 200);
        t.ok((body.messages ?? []).length <= 2);
        seen.push(...(body.messages ?? []).map((m: any) => m.message.messageId));
        token = body.nextPageToken ?? '';
        pages++;
      } while (token && pages < 20);
      t.same(seen.sort(), [one, two, three, k1, k2, later].sort(), 'every message once');
    });

    await t.test('counts', async (t) => {
      const firstPublished = (await api('GET', `${T}/bl-topic/messages/${one}`)).body.message.publishTime;
      const oldest = { oldestUnackedPublishTime: firstPublished, oldestUnackedMessageAge: /^\d+(\.\d+)?s$/ };
      const sub = (await api('GET', `${S}/bl-sub/backlog`)).body;
      t.match(sub, {
        unackedMessageCount: 6,
        leasedMessageCount: 1,
        forwardingMessageCount: 0,
        waitingMessageCount: 5,
      });
      t.match(sub, oldest);
      const ord = (await api('GET', `${S}/bl-ord/backlog`)).body;
      t.match(ord, {
        unackedMessageCount: 6,
        leasedMessageCount: 5,
        forwardingMessageCount: 0,
        waitingMessageCount: 1,
      });
      t.match(ord, oldest);
      t.same(Object.keys(sub).length, 6, 'nothing else');
    });

    await t.test('one message', async (t) => {
      const { status, body } = await api('GET', `${T}/bl-topic/messages/${three}`);
      t.equal(status, 200);
      t.same(body, {
        message: {
          data: b64('three'),
          attributes: { n: '3', colour: 'blue' },
          messageId: three,
          publishTime: body.message.publishTime,
        },
      });
    });

    await t.test('bad requests', async (t) => {
      const cases: [string, unknown][] = [
        [
          `${S}/bl-sub/messages?state=WAITING`,
          invalid(
            'Invalid value for state: "WAITING" is not one of AVAILABLE, LEASED, SCHEDULED, BACKOFF, FORWARDING.',
          ),
        ],
        [`${S}/bl-sub/messages?pageSize=-1`, invalid('Invalid pageSize: "-1" is not a non-negative integer.')],
        [`${S}/bl-sub/messages?pageSize=ten`, invalid('Invalid pageSize: "ten" is not a non-negative integer.')],
        [`${S}/bl-sub/messages?pageToken=bm9wZQ`, invalid('Invalid pageToken.')],
        [`${S}/bl-sub/messages?pageToken=%25%25`, invalid('Invalid pageToken.')],
        [`${S}/bl-sub/messages?filter=attributes.x%20%3D`, undefined],
        [
          `${S}/bl-sub/messages?publishTimeStart=yesterday`,
          invalid(
            'Invalid value for publishTimeStart: "yesterday" is not an RFC 3339 timestamp such as "2026-12-02T10:00:00Z".',
          ),
        ],
        [
          `${S}/bl-sub/messages?publishTimeEnd=2026-13-01T00:00:00Z`,
          invalid(
            'Invalid value for publishTimeEnd: "2026-13-01T00:00:00Z" is not an RFC 3339 timestamp such as "2026-12-02T10:00:00Z".',
          ),
        ],
        [`${S}/bl-sub/messages?view=ALL`, invalid('Invalid value for view: "ALL" is not BASIC or FULL.')],
        [`${S}/bl-sub/messages?colour=red`, invalid('Invalid query parameter "colour": Cannot bind query parameter.')],
        [
          `${S}/bl-sub/messages?pageSize=1&pageSize=2`,
          invalid('Invalid query parameter "pageSize": it must be given once.'),
        ],
        [`${S}/bl-nope/messages`, notFound('bl-nope')],
        [`${S}/bl-nope/backlog`, notFound('bl-nope')],
        [`${S}/b/messages`, badResourceName('subscriptions', P, 'b')],
        [`${T}/bl-nope/messages/${one}`, notFound('bl-nope')],
        [`${T}/bl-topic/messages/999999999`, notFound('999999999')],
        [`${T}/bl-topic/messages/x-1000`, invalid('Invalid message ID: "x-1000". Message IDs are numbers.')],
        [`${T}/b/messages/${one}`, badResourceName('topics', P, 'b')],
      ];
      for (const [url, expected] of cases) {
        const reply = await api('GET', url);
        if (expected === undefined) {
          t.equal(reply.status, 400, url);
          t.equal(reply.body.error.status, 'INVALID_ARGUMENT', url);
        } else {
          t.strictSame(reply.body, expected, url);
        }
      }
      // A detached subscription has no messages to show.
      t.equal((await api('PUT', `${S}/bl-detached`, { topic: `projects/${P}/topics/bl-topic` })).status, 200);
      t.equal((await api('POST', `${S}/bl-detached:detach`, {})).status, 200);
      const detached = failedPrecondition(
        `The subscription projects/${P}/subscriptions/bl-detached is detached from its topic: it has no messages to pull or acknowledge.`,
      );
      t.strictSame((await list('bl-detached')).body, detached);
      t.strictSame((await api('GET', `${S}/bl-detached/backlog`)).body, detached);
      // A token of one query is no token of another.
      const token = (await list('bl-sub', '?pageSize=1')).body.nextPageToken;
      t.strictSame(
        (await list('bl-sub', `?pageSize=1&state=LEASED&pageToken=${token}`)).body,
        invalid('Invalid pageToken: it was issued for other conditions or another subscription.'),
      );
      t.strictSame(
        (await list('bl-ord', `?pageSize=1&pageToken=${token}`)).body,
        invalid('Invalid pageToken: it was issued for other conditions or another subscription.'),
      );
    });

    await t.test('no view changes anything', async (t) => {
      clock.advanceSeconds(1);
      t.same([await stored(broker.redis, subKeys), await stored(broker.redis, ordKeys)], before);
    });

    // A forward whose forwarder stopped between its steps (dead-letters.ts) holds its message in
    // the forwarding set, keyed ones also marked f: made here by hand from a lease.
    await t.test('a message being forwarded to the dead-letter topic', async (t) => {
      for (const [keys, id, keyed] of [
        [subKeys, one, false],
        [ordKeys, k1, true],
      ] as const) {
        const member = (await broker.redis.zrange(keys.leased, 0, -1)).find((m) => m.startsWith(`${id}:`))!;
        const deadline = (await broker.redis.zscore(keys.leased, member))!;
        await broker.redis.zrem(keys.leased, member);
        await broker.redis.zadd(keys.forwarding, deadline, member);
        if (keyed) {
          const info = (await broker.redis.hget(keys.keyedDeliveries, id))!;
          await broker.redis.hset(keys.keyedDeliveries, id, info.replace('|o|', '|f|'));
        }
      }
      const forwarding = async (sub: string) =>
        (await list(sub, '?state=FORWARDING')).body.messages.map((m: any) => [
          m.message.messageId,
          m.state,
          m.deliveryAttempt,
        ]);
      t.same(await forwarding('bl-sub'), [[one, 'FORWARDING', 1]]);
      t.same(await forwarding('bl-ord'), [[k1, 'FORWARDING', 1]], 'keyed: in the keyed set only');
      t.equal((await api('GET', `${S}/bl-ord/backlog`)).body.forwardingMessageCount, 1);
    });
  });
}
