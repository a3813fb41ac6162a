// Wake-ups proportional to work (src/broker/wakeups.ts, src/broker/leaser.ts), through the broker
// core: a publish costs as few pull scripts however many long polls or streams wait, a stream
// whose flow control fills leaves the rest to the next stream, leases that run out reach waiting
// pulls without a publish, and many streams with random flow control each get their turn while
// every message is delivered exactly once.

import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import { randomFromEnv } from '../helpers/random.ts';
import { watchScripts } from '../helpers/script-calls.ts';
import { waitUntil } from '../helpers/wait.ts';
import {
  WORK,
  caller,
  longPolls,
  openStream,
  publish,
  pullScripts,
  textOf,
  workBroker,
} from '../helpers/work-subscription.ts';

t.test('many waiting long polls and one message: one delivery, at most two pull scripts', async (t) => {
  const broker = await workBroker(t, 'wakeups-polls');
  const watch = watchScripts();
  t.teardown(watch.stop);
  const WAITING = 200;
  const polls = longPolls(broker, WAITING, 1);
  t.ok(await waitUntil(() => pullScripts(watch.scripts) >= WAITING, 20_000), 'every long poll looked once');
  // Let the last looks' answers arrive: every long poll is then asleep on its wake-up.
  await sleep(200);
  const before = pullScripts(watch.scripts);
  await publish(broker, ['only']);
  t.ok(await waitUntil(() => polls.answered().length > 0, 10_000), 'a long poll gets the message');
  // Anything else the wake-up would set off happens now.
  await sleep(300);
  const woken = pullScripts(watch.scripts) - before;
  t.ok(woken <= 2, `the publish ran ${woken} pull scripts (at most 2)`);
  t.equal(polls.answered().length, 1, 'one long poll answered');
  await polls.abort();
  t.same(polls.answers.flat().map(textOf), ['only'], 'the message was delivered once');
});

t.test('a publish of several messages reaches as many single-message long polls', async (t) => {
  const broker = await workBroker(t, 'wakeups-several');
  const watch = watchScripts();
  t.teardown(watch.stop);
  const polls = longPolls(broker, 20, 1);
  t.ok(await waitUntil(() => pullScripts(watch.scripts) >= 20, 20_000), 'every long poll looked once');
  await sleep(200);
  await publish(broker, ['a', 'b', 'c', 'd', 'e']);
  t.ok(await waitUntil(() => polls.answered().length === 5, 10_000), 'five long polls answer');
  await polls.abort();
  t.same(polls.answers.flat().map(textOf).sort(), ['a', 'b', 'c', 'd', 'e'], 'one message each, each once');
});

t.test('leases that run out reach waiting long polls without a publish, one after another', async (t) => {
  const broker = await workBroker(t, 'wakeups-expiry', { ackDeadlineSeconds: 60 });
  await publish(broker, ['x', 'y', 'z']);
  const leased = await broker.app.broker.delivery.pull(caller(), WORK, { maxMessages: 10, returnImmediately: true });
  t.equal(leased.length, 3, 'all three leased');
  // The leases now run out in a second: nothing is published when they do.
  await broker.app.broker.delivery.modifyAckDeadline(caller(), WORK, {
    ackIds: leased.map((received) => received.ackId),
    ackDeadlineSeconds: 1,
  });
  const polls = longPolls(broker, 6, 1);
  t.ok(await waitUntil(() => polls.answered().length === 3, 15_000), 'three long polls answer');
  await polls.abort();
  t.same(polls.answers.flat().map(textOf).sort(), ['x', 'y', 'z'], 'each message once more, each once');
});

t.test('a stream whose flow control fills leaves the rest to the next stream', async (t) => {
  const broker = await workBroker(t, 'wakeups-stream-pass', { ackDeadlineSeconds: 60 });
  await publish(broker, ['x', 'y', 'z']);
  const leased = await broker.app.broker.delivery.pull(caller(), WORK, { maxMessages: 10, returnImmediately: true });
  // The leases run out in a second, all at once, with no publish: one wake-up, for one message.
  await broker.app.broker.delivery.modifyAckDeadline(caller(), WORK, {
    ackIds: leased.map((received) => received.ackId),
    ackDeadlineSeconds: 1,
  });
  // Streams with room for one message each, which never ack.
  const streams = Array.from({ length: 4 }, () => openStream(broker, 1, () => undefined));
  t.teardown(() => {
    for (const stream of streams) stream.close();
  });
  const received = () => streams.flatMap((stream) => stream.received);
  t.ok(await waitUntil(() => received().length === 3, 15_000), 'three streams get one message each');
  t.same(received().sort(), ['x', 'y', 'z'], 'each message once');
});

t.test('one unary ack of what several streams delivered frees room on each of them', async (t) => {
  // Official clients ack with unary calls: each stream learns of its own part of the ack.
  const broker = await workBroker(t, 'wakeups-unary-ack', { ackDeadlineSeconds: 60 });
  const streams = Array.from({ length: 3 }, () => openStream(broker, 1, () => undefined));
  t.teardown(() => {
    for (const stream of streams) stream.close();
  });
  await publish(broker, ['a', 'b', 'c']);
  t.ok(await waitUntil(() => streams.every((stream) => stream.received.length === 1), 10_000), 'one each');
  await publish(broker, ['d', 'e', 'f']);
  await broker.app.broker.delivery.acknowledge(caller(), WORK, { ackIds: streams.map((stream) => stream.ackIds[0]) });
  t.ok(
    await waitUntil(() => streams.every((stream) => stream.received.length === 2), 10_000),
    'each stream gets one more',
  );
  t.same(streams.flatMap((stream) => stream.received).sort(), ['a', 'b', 'c', 'd', 'e', 'f'], 'each message once');
});

t.test('an idle stream whose acks free room does not look again for nothing', async (t) => {
  const broker = await workBroker(t, 'wakeups-idle-ack', { ackDeadlineSeconds: 60 });
  const watch = watchScripts();
  t.teardown(watch.stop);
  // Room for ten: one message leaves it with room, asleep on its wake-up, when the ack comes.
  const stream = openStream(broker, 10, () => undefined);
  t.teardown(() => stream.close());
  await publish(broker, ['only']);
  t.ok(await waitUntil(() => stream.received.length === 1, 10_000), 'the stream gets the message');
  await sleep(200);
  const before = pullScripts(watch.scripts);
  await broker.app.broker.delivery.acknowledge(caller(), WORK, { ackIds: stream.ackIds });
  await sleep(300);
  t.equal(pullScripts(watch.scripts) - before, 0, 'no pull script after the ack');
  await publish(broker, ['next']);
  t.ok(await waitUntil(() => stream.received.length === 2, 10_000), 'and it still gets what comes next');
});

t.test('many streams with random flow control: every message once, every stream served', async (t) => {
  const random = randomFromEnv(t);
  const broker = await workBroker(t, 'wakeups-streams', { ackDeadlineSeconds: 60 });
  const STREAMS = 20;
  const streams = Array.from({ length: STREAMS }, (_, i) =>
    // A few slow consumers among quick ones.
    openStream(broker, random.int(1, 5), () => (i % 7 === 0 ? random.int(50, 150) : random.int(0, 10))),
  );
  t.teardown(() => {
    for (const stream of streams) stream.close();
  });
  const acked = () => streams.reduce((sum, stream) => sum + stream.acked(), 0);
  const published: string[] = [];

  // One small batch at a time, each acked before the next: the waiting streams take turns.
  for (let batch = 0; batch < 80; batch++) {
    const texts = Array.from({ length: random.int(1, 3) }, (_, i) => `b${batch}-${i}`);
    published.push(...texts);
    await publish(broker, texts);
    t.ok(await waitUntil(() => acked() === published.length, 10_000, 5), `batch ${batch} acked`);
    // The streams that acked look again and go back to waiting.
    await sleep(10);
  }
  const served = streams.filter((stream) => stream.received.length > 0).length;
  t.equal(served, STREAMS, 'every stream got messages');

  // Then a burst of concurrent publishes while the streams ack at their own pace.
  const burst = Array.from({ length: 25 }, (_, p) => Array.from({ length: 20 }, (_, i) => `burst${p}-${i}`));
  published.push(...burst.flat());
  await Promise.all(burst.map((texts) => publish(broker, texts)));
  t.ok(await waitUntil(() => acked() === published.length, 30_000, 20), 'every message delivered and acked');
  const delivered = streams.flatMap((stream) => stream.received);
  t.same(delivered.slice().sort(), published.slice().sort(), 'each message delivered exactly once');
});
