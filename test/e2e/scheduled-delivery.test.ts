// Scheduled delivery: a message published with a delivery time (the REST fields `deliveryTime`
// and `deliveryDelay`, or the attributes `pubsub-broker/delivery-time` and
// `pubsub-broker/delivery-delay`) is invisible to every subscription until then, on the one
// clock, and then delivered like any other:
//   - both forms, both fields, a time in the past (at once), staged and inline bodies;
//   - with ordering, a scheduled message holds back the later messages of its key;
//   - a long poll waiting when the time comes is woken then;
//   - a seek (to a time, to a snapshot; a subscription created later on a retaining topic)
//     leaves a message whose time is ahead waiting;
//   - every bad input is refused with INVALID_ARGUMENT and stores nothing.

import t from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { formatTimestampUs } from '../../src/broker/durations.ts';
import { parseResourceName } from '../../src/broker/names.ts';
import { b64, startBroker, type TestBroker, unb64 } from '../helpers/app.ts';
import { sampleValue } from '../helpers/metrics.ts';
import { redisTargets } from '../helpers/redis.ts';
import { pullNow, topicData } from '../helpers/topic.ts';
import { waitUntil } from '../helpers/wait.ts';

const P = '/v1/projects/p';
const TOPIC = 'projects/p/topics/orders';

async function publish(broker: TestBroker, messages: unknown[]) {
  const response = await broker.api('POST', `${P}/topics/orders:publish`, { messages });
  if (response.status !== 200) throw new Error(`publish failed: ${JSON.stringify(response.body)}`);
  return response.body.messageIds as string[];
}

/** The texts a pull that does not wait receives now; acked unless `ack` is false. */
async function receive(broker: TestBroker, subscription: string, ack = true): Promise<string[]> {
  const received = await pullNow(broker, subscription);
  if (ack && received.length > 0) {
    await broker.api('POST', `${P}/subscriptions/${subscription}:acknowledge`, {
      ackIds: received.map((r: { ackId: string }) => r.ackId),
    });
  }
  return received.map((r: { message: { data: string } }) => unb64(r.message.data).trim());
}

for (const target of redisTargets()) {
  t.test(`${target.name}: a scheduled message is invisible until its time, in every form`, async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'scheduled', stageBodiesFromBytes: 2000 });
    await broker.api('PUT', `${P}/topics/orders`, {});
    await broker.api('PUT', `${P}/subscriptions/work`, { topic: TOPIC });
    await broker.api('PUT', `${P}/subscriptions/eod`, { topic: TOPIC, enableExactlyOnceDelivery: true });
    const startUs = Number(clock.scriptTime());
    const at = (seconds: number) => formatTimestampUs(startUs + seconds * 1_000_000);
    await publish(broker, [
      { data: b64('now') },
      { data: b64('delay-30'), deliveryDelay: '30s' },
      { data: b64('time-20'), deliveryTime: at(20) },
      { data: b64('attr-delay-10'), attributes: { 'pubsub-broker/delivery-delay': '10s', kind: 'x' } },
      { data: b64('attr-time-40'), attributes: { 'pubsub-broker/delivery-time': at(40) } },
      { data: b64('past'), deliveryTime: at(-5) },
      { data: b64('both-alike'), deliveryDelay: '10.5s', attributes: { 'pubsub-broker/delivery-delay': '10.5s' } },
    ]);
    // A large publish stages its bodies: the same holds.
    await publish(broker, [{ data: b64(`staged${' '.repeat(3000)}`), deliveryDelay: '25s' }]);
    const expect = async (seconds: number, texts: string[]) => {
      clock.advanceSeconds(seconds);
      for (const subscription of ['work', 'eod']) {
        t.same((await receive(broker, subscription)).sort(), [...texts].sort(), `${subscription} at ${texts}`);
      }
    };
    await expect(0, ['now', 'past']);
    await expect(9.9, []);
    await expect(0.1, ['attr-delay-10']);
    await expect(0.4, []);
    await expect(0.1, ['both-alike']);
    await expect(9.5, ['time-20']);
    await expect(5, ['staged']);
    await expect(5, ['delay-30']);
    await expect(9, []);
    await expect(1, ['attr-time-40']);
    await expect(100, []);
  });

  t.test(`${target.name}: the subscriber never sees the extension attributes`, async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'scheduled-attrs' });
    await broker.api('PUT', `${P}/topics/orders`, {});
    await broker.api('PUT', `${P}/subscriptions/work`, { topic: TOPIC });
    await publish(broker, [{ data: b64('a'), attributes: { 'pubsub-broker/delivery-delay': '1s', kind: 'x' } }]);
    clock.advanceSeconds(1);
    const [received] = await pullNow(broker, 'work');
    t.same(received.message.attributes, { kind: 'x' });
  });

  t.test(`${target.name}: with ordering, a scheduled message holds back its key's later messages`, async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'scheduled-ordered' });
    await broker.api('PUT', `${P}/topics/orders`, {});
    await broker.api('PUT', `${P}/subscriptions/ordered`, { topic: TOPIC, enableMessageOrdering: true });
    await broker.api('PUT', `${P}/subscriptions/ordered-eod`, {
      topic: TOPIC,
      enableMessageOrdering: true,
      enableExactlyOnceDelivery: true,
    });
    await publish(broker, [
      { data: b64('a1'), orderingKey: 'a' },
      { data: b64('a2'), orderingKey: 'a', deliveryDelay: '20s' },
      { data: b64('a3'), orderingKey: 'a' },
    ]);
    await publish(broker, [{ data: b64('a4'), orderingKey: 'a' }]);
    await publish(broker, [{ data: b64('b1'), orderingKey: 'b', deliveryDelay: '10s' }]);
    await publish(broker, [{ data: b64('b2'), orderingKey: 'b' }]);
    await publish(broker, [{ data: b64('c1'), orderingKey: 'c' }]);
    for (const subscription of ['ordered', 'ordered-eod']) {
      t.same(await receive(broker, subscription), ['a1', 'c1'], `${subscription}: only what precedes a scheduled one`);
    }
    clock.advanceSeconds(10);
    for (const subscription of ['ordered', 'ordered-eod']) {
      t.same(await receive(broker, subscription), ['b1', 'b2'], `${subscription}: key b once its head is due`);
    }
    clock.advanceSeconds(5);
    for (const subscription of ['ordered', 'ordered-eod']) t.same(await receive(broker, subscription), []);
    clock.advanceSeconds(5);
    for (const subscription of ['ordered', 'ordered-eod']) {
      t.same(await receive(broker, subscription), ['a2', 'a3', 'a4'], `${subscription}: key a in order`);
    }
  });
}

t.test('a long poll waiting when the time comes is woken then', async (t) => {
  const broker = await startBroker(t, { name: 'scheduled-wake', pullWaitMs: 30_000 });
  await broker.api('PUT', `${P}/topics/orders`, {});
  await broker.api('PUT', `${P}/subscriptions/work`, { topic: TOPIC });
  const waiting = broker.api('POST', `${P}/subscriptions/work:pull`, { maxMessages: 10 });
  const publishedAtMs = Date.now();
  await publish(broker, [{ data: b64('later'), deliveryDelay: '1.5s' }]);
  const { body } = await waiting;
  const receivedAtMs = Date.now();
  t.same(
    body.receivedMessages.map((r: { message: { data: string } }) => unb64(r.message.data)),
    ['later'],
    'the waiting pull receives it (woken at its time, long before its 30 s wait ends)',
  );
  t.ok(receivedAtMs - publishedAtMs >= 1400, 'not before its time');
});

t.test('a seek leaves a message whose time is ahead waiting', async (t) => {
  const clock = new ManualClock();
  const broker = await startBroker(t, { name: 'scheduled-seek', clock });
  await broker.api('PUT', `${P}/topics/orders`, { messageRetentionDuration: '3600s' });
  await broker.api('PUT', `${P}/subscriptions/plain`, { topic: TOPIC, retainAckedMessages: true });
  await broker.api('PUT', `${P}/subscriptions/ordered`, { topic: TOPIC, enableMessageOrdering: true });
  const startUs = Number(clock.scriptTime());
  await publish(broker, [{ data: b64('now-1') }]);
  await publish(broker, [
    { data: b64('later'), deliveryDelay: '100s' },
    { data: b64('later-2'), deliveryDelay: '100s' },
  ]);
  await publish(broker, [
    { data: b64('k1'), orderingKey: 'k', deliveryDelay: '50s' },
    { data: b64('k2'), orderingKey: 'k' },
  ]);
  // Created after the publishes: it reaches them through the topic's retention.
  await broker.api('PUT', `${P}/subscriptions/late`, { topic: TOPIC, enableMessageOrdering: true });
  // Without ordering, k2 need not wait for k1.
  t.same((await receive(broker, 'plain')).sort(), ['k2', 'now-1']);
  t.same(await receive(broker, 'ordered'), ['now-1']);
  const snapshot = await broker.api('PUT', `${P}/snapshots/before`, {
    subscription: 'projects/p/subscriptions/ordered',
  });
  t.equal(snapshot.status, 200);

  clock.advanceSeconds(10);
  const back = { time: formatTimestampUs(startUs - 1_000_000) };
  for (const [subscription, due] of [
    ['plain', ['k2', 'now-1']],
    ['ordered', ['now-1']],
    ['late', ['now-1']],
  ] as const) {
    const seek = await broker.api('POST', `${P}/subscriptions/${subscription}:seek`, back);
    t.equal(seek.status, 200, `${subscription} seeks`);
    t.same((await receive(broker, subscription)).sort(), due, `${subscription}: only what is due comes back`);
  }
  const toSnapshot = await broker.api('POST', `${P}/subscriptions/ordered:seek`, {
    snapshot: 'projects/p/snapshots/before',
  });
  t.equal(toSnapshot.status, 200);
  t.same(await receive(broker, 'ordered'), [], 'the snapshot holds only what waits');
  clock.advanceSeconds(40);
  for (const subscription of ['plain', 'ordered', 'late']) {
    const expected = subscription === 'plain' ? ['k1'] : ['k1', 'k2'];
    t.same(await receive(broker, subscription), expected, `${subscription}: key k at its time`);
  }
  clock.advanceSeconds(50);
  for (const subscription of ['plain', 'ordered', 'late']) {
    t.same(await receive(broker, subscription), ['later', 'later-2'], `${subscription}: the last at their time`);
  }
  // The topic's scheduled set names both until a later scheduled publish forgets them.
  const { data } = await topicData(broker, 'orders');
  t.equal(await broker.redis.zcard(data.scheduled), 3, 'the retaining topic keeps a scheduled set');
  await publish(broker, [{ data: b64('next'), deliveryDelay: '10s' }]);
  t.equal(
    await broker.redis.zcard(data.scheduled),
    2,
    'a scheduled publish forgets up to twice as many past ones as it adds',
  );
  t.ok((await broker.redis.pttl(data.scheduled)) > 0, 'the set expires after its latest time');
});

t.test('a seek on a topic that retains nothing leaves what waits waiting', async (t) => {
  const clock = new ManualClock();
  const broker = await startBroker(t, { name: 'scheduled-seek-held', clock });
  await broker.api('PUT', `${P}/topics/orders`, {});
  await broker.api('PUT', `${P}/subscriptions/plain`, { topic: TOPIC });
  await broker.api('PUT', `${P}/subscriptions/ordered`, { topic: TOPIC, enableMessageOrdering: true });
  const startUs = Number(clock.scriptTime());
  await publish(broker, [
    { data: b64('later'), deliveryDelay: '100s' },
    { data: b64('later-2'), deliveryDelay: '100s' },
  ]);
  await publish(broker, [
    { data: b64('k1'), orderingKey: 'k', deliveryDelay: '50s' },
    { data: b64('k2'), orderingKey: 'k' },
  ]);
  t.same(await receive(broker, 'plain', false), ['k2'], 'k2 is leased, not acked');
  clock.advanceSeconds(10);
  for (const subscription of ['plain', 'ordered']) {
    const seek = await broker.api('POST', `${P}/subscriptions/${subscription}:seek`, {
      time: formatTimestampUs(startUs - 1_000_000),
    });
    t.equal(seek.status, 200);
  }
  t.same(await receive(broker, 'plain'), ['k2'], 'the seek ended the lease; the rest waits');
  t.same(await receive(broker, 'ordered'), [], 'key k waits for k1');
  const { data } = await topicData(broker, 'orders');
  t.equal(await broker.redis.exists(data.scheduled), 0, 'a topic that retains nothing keeps no scheduled set');
  clock.advanceSeconds(40);
  t.same(await receive(broker, 'plain'), ['k1']);
  t.same(await receive(broker, 'ordered'), ['k1', 'k2']);
  clock.advanceSeconds(50);
  for (const subscription of ['plain', 'ordered']) t.same(await receive(broker, subscription), ['later', 'later-2']);
});

t.test('messages published together for one time wait as one entry, and count as all of them', async (t) => {
  const clock = new ManualClock();
  const broker = await startBroker(t, { name: 'scheduled-runs', clock });
  await broker.api('PUT', `${P}/topics/orders`, {});
  await broker.api('PUT', `${P}/subscriptions/work`, { topic: TOPIC });
  await broker.api('PUT', `${P}/subscriptions/gone`, { topic: TOPIC });
  const texts = Array.from({ length: 300 }, (_, i) => `m${i}`);
  await publish(
    broker,
    texts.map((text, i) => ({ data: b64(text), ...(i === 150 ? {} : { deliveryDelay: i < 200 ? '60s' : '90s' }) })),
  );
  const { data, record } = await topicData(broker, 'orders');
  const work = await broker.app.broker.subscriptions.read(
    parseResourceName('subscriptions', 'projects/p/subscriptions/work'),
  );
  const sub = data.subscription(work.uid);
  t.same(
    await broker.redis.zrange(sub.delayed, 0, -1),
    ['1000-1149', '1151-1199', '1200-1299'],
    'three runs: one message between them is delivered at once, and the last hundred have another time',
  );
  t.equal(await broker.redis.hget(sub.config, 'inRuns'), '296', 'the runs stand for 296 more messages');
  const backlog = async () => {
    const metrics = (await broker.app.inject({ method: 'GET', url: '/metrics' })).body;
    return sampleValue(metrics, 'pubsub_subscription_num_undelivered_messages', { project: 'p', subscription: 'work' });
  };
  t.equal(await backlog(), 300, 'the backlog gauge counts every message');
  t.same(await receive(broker, 'work'), ['m150']);
  clock.advanceSeconds(60);
  const first = await pullNow(broker, 'work');
  t.equal(first.length, 100, 'a pull takes what it may of the due runs');
  t.same(
    first.map((r: { message: { data: string } }) => unb64(r.message.data)),
    texts.slice(0, 100),
    'in publish order',
  );
  t.same(
    await broker.redis.zrange(sub.delayed, 0, -1),
    ['1151-1199', '1200-1299'],
    'the first due run was taken apart into the ready list; the next waits for a pull',
  );
  t.equal(await broker.redis.hget(sub.config, 'inRuns'), '147');
  t.equal(await backlog(), 299, 'still every unacknowledged message');
  // Deleting a subscription releases what its runs hold: the bodies go once no one holds them.
  t.equal((await broker.api('DELETE', `${P}/subscriptions/gone`)).status, 200);
  await broker.api('DELETE', `${P}/subscriptions/work`);
  await waitUntil(async () => (await broker.redis.exists(data.bodyBlock(1))) === 0, 5000);
  t.equal(await broker.redis.exists(data.bodyBlock(1)), 0, 'no body is left behind');
  t.ok(record.uid, 'the topic is still there');
});

t.test('bad delivery times are refused and store nothing', async (t) => {
  const clock = new ManualClock();
  const broker = await startBroker(t, { name: 'scheduled-bad', clock });
  await broker.api('PUT', `${P}/topics/orders`, {});
  await broker.api('PUT', `${P}/subscriptions/long`, { topic: TOPIC, messageRetentionDuration: '86400s' });
  await broker.api('PUT', `${P}/subscriptions/blue`, {
    topic: TOPIC,
    messageRetentionDuration: '600s',
    filter: 'attributes.color = "blue"',
  });
  const startUs = Number(clock.scriptTime());
  const cases: [string, Record<string, unknown>, RegExp][] = [
    ['a malformed time', { deliveryTime: 'tomorrow' }, /not an RFC 3339 timestamp/],
    ['a malformed delay', { deliveryDelay: '10 minutes' }, /not a duration/],
    ['a negative delay', { deliveryDelay: '-5s' }, /not a duration/],
    ['a malformed attribute', { attributes: { 'pubsub-broker/delivery-delay': 'soon' } }, /not a duration/],
    ['time and delay', { deliveryTime: formatTimestampUs(startUs), deliveryDelay: '1s' }, /not both/],
    [
      'field and attribute differing',
      { deliveryDelay: '1s', attributes: { 'pubsub-broker/delivery-delay': '2s' } },
      /differ/,
    ],
    ['more than 31 days', { deliveryDelay: `${31 * 86400 + 1}s` }, /more than 31 days/],
    [
      'a time more than 31 days ahead',
      { deliveryTime: formatTimestampUs(startUs + (31 * 86400 + 1) * 1_000_000) },
      /more than 31 days/,
    ],
    [
      "past a taker's retention",
      { deliveryDelay: '601s', attributes: { color: 'blue' } },
      /600s after the publish time, the retention/,
    ],
    ['a non-string field', { deliveryDelay: 5 }, /deliveryDelay/],
  ];
  for (const [what, extension, message] of cases) {
    const response = await broker.api('POST', `${P}/topics/orders:publish`, {
      messages: [{ data: b64('fine') }, { data: b64(what), ...extension }],
    });
    t.equal(response.status, 400, what);
    t.equal(response.body.error?.status, 'INVALID_ARGUMENT', what);
    t.match(response.body.error?.message, message, what);
  }
  // The filtered subscription with the short retention does not take a red message: it is fine.
  const red = await broker.api('POST', `${P}/topics/orders:publish`, {
    messages: [{ data: b64('red'), attributes: { color: 'red' }, deliveryDelay: '3600s' }],
  });
  t.equal(red.status, 200, 'a message no short-retention subscription takes');
  clock.advanceSeconds(3600);
  t.same(await receive(broker, 'long'), ['red'], 'of the refused publishes, nothing was stored');
  t.same(await receive(broker, 'blue'), []);
});
