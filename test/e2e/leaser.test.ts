// One leaser per subscription per process (src/broker/leaser.ts): the streams and waiting long
// polls of a subscription share one pull loop. Many streams cost pull scripts per publish, not
// per stream; a trickle of messages goes round the streams in turn; random flow control still
// gets every message delivered once and fills every stream's room; long polls and streams mix,
// each leased with its own deadline; an ordering key stays with one stream at a time, in order;
// what a stream that closed during a pull was leased for goes back at once; and a subscription
// change reaches idle streams.

import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import type { ReceivedMessage } from '../../src/broker/pull.ts';
import type { StreamingPullResponse } from '../../src/broker/streaming.ts';
import { randomFromEnv } from '../helpers/random.ts';
import { watchScripts } from '../helpers/script-calls.ts';
import { waitUntil } from '../helpers/wait.ts';
import {
  caller,
  longPolls,
  openStream,
  publish,
  pullScripts,
  type TestStream,
  textOf,
  WORK,
  workBroker,
} from '../helpers/work-subscription.ts';

const closeAll = (streams: TestStream[]) => () => {
  for (const stream of streams) stream.close();
};

t.test('100 streams on one subscription: pull scripts follow the publishes, not the streams', async (t) => {
  const broker = await workBroker(t, 'leaser-scripts', { ackDeadlineSeconds: 60 });
  const watch = watchScripts();
  t.teardown(watch.stop);
  const STREAMS = 100;
  const streams = Array.from({ length: STREAMS }, () => openStream(broker, 10, () => 0));
  t.teardown(closeAll(streams));
  const PUBLISHES = 20;
  const BATCH = 50;
  const published: string[] = [];
  for (let p = 0; p < PUBLISHES; p++) {
    const texts = Array.from({ length: BATCH }, (_, i) => `m${p}-${i}`);
    published.push(...texts);
    await publish(broker, texts);
  }
  const received = () => streams.flatMap((stream) => stream.received);
  t.ok(await waitUntil(() => received().length === published.length, 20_000), 'every message arrives');
  // Acks free room, which needs no look: nothing more is pulled.
  await sleep(300);
  const pulls = pullScripts(watch.scripts);
  // At most two looks per publish's wake-up (one that leases, one that finds nothing), and the
  // first look: never one per stream.
  t.ok(
    pulls <= 2 * PUBLISHES + 2,
    `${pulls} pull scripts for ${PUBLISHES} publishes of ${BATCH} to ${STREAMS} streams`,
  );
  t.same(received().sort(), published.sort(), 'each message delivered once');
});

t.test('a long poll that finds nothing waits after its one look: the leaser does not look again', async (t) => {
  const broker = await workBroker(t, 'leaser-one-look');
  const watch = watchScripts();
  t.teardown(watch.stop);
  const polls = longPolls(broker, 1, 10);
  t.ok(await waitUntil(() => pullScripts(watch.scripts) >= 1, 10_000), 'the long poll looked');
  await sleep(300);
  t.equal(pullScripts(watch.scripts), 1, 'one pull script while it waits');
  await publish(broker, ['x']);
  t.ok(await waitUntil(() => polls.answered().length === 1, 10_000), 'and the publish reaches it');
  t.equal(pullScripts(watch.scripts), 2, 'with one more');
  await polls.abort();
});

t.test('single messages go round the waiting streams, the longest-unserved first', async (t) => {
  const broker = await workBroker(t, 'leaser-turns', { ackDeadlineSeconds: 60 });
  // Plenty of room each: only the order of turns decides who gets a message.
  const streams = Array.from({ length: 10 }, () => openStream(broker, 100, () => 0));
  t.teardown(closeAll(streams));
  const acked = () => streams.reduce((sum, stream) => sum + stream.acked(), 0);
  for (let i = 0; i < 30; i++) {
    await publish(broker, [`one-${i}`]);
    t.ok(await waitUntil(() => acked() === i + 1, 10_000, 5), `message ${i} delivered and acked`);
  }
  t.same(
    streams.map((stream) => stream.received.length),
    streams.map(() => 3),
    'thirty messages to ten streams: three each',
  );
});

t.test('random flow control: every message once, and every stream filled when there are enough', async (t) => {
  const random = randomFromEnv(t);
  const broker = await workBroker(t, 'leaser-flow', { ackDeadlineSeconds: 60 });
  const STREAMS = 40;
  const limits = Array.from({ length: STREAMS }, () => random.int(1, 4));
  // Nobody acks on their own: each round's messages exactly fill every stream's room.
  const streams = limits.map((limit) => openStream(broker, limit, () => undefined));
  t.teardown(closeAll(streams));
  const room = limits.reduce((sum, limit) => sum + limit, 0);
  const published: string[] = [];
  for (let round = 0; round < 3; round++) {
    const texts = Array.from({ length: room }, (_, i) => `r${round}-${i}`);
    published.push(...texts);
    // In a few publishes of random sizes.
    for (let at = 0; at < texts.length; ) {
      const size = random.int(1, 30);
      await publish(broker, texts.slice(at, at + size));
      at += size;
    }
    const filled = () => streams.every((stream, i) => stream.received.length === (round + 1) * limits[i]);
    t.ok(await waitUntil(filled, 20_000, 10), `round ${round}: every stream got as many as it has room for`);
    // Slow acks, in a random order: the next round comes as they free room.
    const acks = streams.map(async (stream) => {
      await sleep(random.int(0, 100));
      const mine = stream.ackIds.slice(round * limits[streams.indexOf(stream)]);
      await broker.app.broker.delivery.acknowledge(caller(), WORK, { ackIds: mine });
    });
    await Promise.all(acks);
  }
  t.same(streams.flatMap((stream) => stream.received).sort(), published.sort(), 'each message delivered once');
});

t.test('long polls and streams on one subscription: every message once, to both kinds', async (t) => {
  const random = randomFromEnv(t);
  const broker = await workBroker(t, 'leaser-mixed', { ackDeadlineSeconds: 60 });
  // Which deadline each message was leased with: the stream's, or (undefined) the subscription's.
  const leasedWith = new Map<string, number | undefined>();
  const delivery = broker.app.broker.delivery;
  const pullOnce = delivery.pullOnce.bind(delivery);
  delivery.pullOnce = async (...args: Parameters<typeof pullOnce>) => {
    const result = await pullOnce(...args);
    for (const message of result.received) leasedWith.set(textOf(message), args[2]?.deadlineSeconds);
    return result;
  };
  const streams = Array.from({ length: 5 }, () => openStream(broker, random.int(1, 3), () => random.int(0, 20)));
  t.teardown(closeAll(streams));
  const polled: string[] = [];
  const stop = new AbortController();
  const poller = async () => {
    while (!stop.signal.aborted) {
      const received = await broker.app.broker.delivery.pull(caller(stop.signal), WORK, { maxMessages: 3 });
      polled.push(...received.map(textOf));
      if (received.length > 0) {
        await broker.app.broker.delivery.acknowledge(caller(), WORK, { ackIds: received.map((m) => m.ackId) });
      }
    }
  };
  const pollers = Array.from({ length: 10 }, poller);
  const published: string[] = [];
  for (let p = 0; p < 40; p++) {
    const texts = Array.from({ length: random.int(1, 15) }, (_, i) => `p${p}-${i}`);
    published.push(...texts);
    await publish(broker, texts);
    await sleep(random.int(0, 20));
  }
  const delivered = () => [...polled, ...streams.flatMap((stream) => stream.received)];
  t.ok(await waitUntil(() => delivered().length >= published.length, 20_000), 'every message arrives');
  await sleep(200);
  stop.abort();
  await Promise.all(pollers);
  t.same(delivered().sort(), published.sort(), 'each message delivered once');
  t.ok(polled.length > 0, `long polls got ${polled.length}`);
  t.ok(
    streams.every((stream) => stream.received.length > 0),
    'every stream got messages',
  );
  // Streams and long polls of one subscription lease with their own deadlines.
  t.ok(
    polled.every((text) => leasedWith.get(text) === undefined),
    "long polls' messages were leased with the subscription's deadline",
  );
  t.ok(
    streams.every((stream) => stream.received.every((text) => leasedWith.get(text) === 60)),
    "streams' messages were leased with their streamAckDeadlineSeconds",
  );
});

t.test('ordering keys with several streams: a key goes to one stream at a time, in order', async (t) => {
  const random = randomFromEnv(t);
  const broker = await workBroker(t, 'leaser-keys', { ackDeadlineSeconds: 60, enableMessageOrdering: true });
  const KEYS = ['k0', 'k1', 'k2', 'k3'];
  /** Per stream, per key: messages delivered and not yet acked (as this side knows it). */
  const holding = new Map<number, Map<string, number>>();
  const violations: string[] = [];
  const deliveredInOrder = new Map<string, string[]>(KEYS.map((key) => [key, []]));
  const streams: TestStream[] = [];
  for (let i = 0; i < 6; i++) {
    const held = new Map<string, number>();
    holding.set(i, held);
    const onMessages = (messages: ReceivedMessage[]) => {
      for (const message of messages) {
        const key = message.message.orderingKey!;
        for (const [other, theirs] of holding) {
          if (other !== i && (theirs.get(key) ?? 0) > 0)
            violations.push(`${key} to stream ${i} while ${other} holds it`);
        }
        held.set(key, (held.get(key) ?? 0) + 1);
        deliveredInOrder.get(key)!.push(textOf(message));
      }
      // Acked later, all at once: the key is free again from then on (as far as this side knows,
      // which is no later than the broker knows).
      setTimeout(
        () => {
          for (const message of messages) {
            const key = message.message.orderingKey!;
            held.set(key, held.get(key)! - 1);
          }
          streams[i].session.receive(() => ({ ackIds: messages.map((m) => m.ackId) }));
        },
        random.int(0, 40),
      );
    };
    streams.push(openStream(broker, random.int(1, 5), () => undefined, onMessages));
  }
  t.teardown(closeAll(streams));
  const published = new Map<string, string[]>(KEYS.map((key) => [key, []]));
  for (let p = 0; p < 60; p++) {
    const key = KEYS[random.int(0, KEYS.length - 1)];
    const texts = Array.from({ length: random.int(1, 8) }, (_, i) => `${key}-${p}-${i}`);
    published.get(key)!.push(...texts);
    await publish(broker, texts, key);
  }
  const total = [...published.values()].reduce((sum, texts) => sum + texts.length, 0);
  const count = () => [...deliveredInOrder.values()].reduce((sum, texts) => sum + texts.length, 0);
  t.ok(await waitUntil(() => count() >= total, 30_000, 10), 'every message arrives');
  await sleep(200);
  t.same(violations, [], 'no key was handed to a stream while another held it');
  for (const key of KEYS) t.same(deliveredInOrder.get(key), published.get(key), `${key}: once each, in order`);
});

t.test('what a stream that closed during its pull was leased for goes back at once', async (t) => {
  // An ack deadline of ten minutes: only a give-back brings the messages back within the test.
  const broker = await workBroker(t, 'leaser-closed', { ackDeadlineSeconds: 600 });
  const delivery = broker.app.broker.delivery;
  const pullOnce = delivery.pullOnce.bind(delivery);
  let closing: TestStream | undefined;
  delivery.pullOnce = async (...args: Parameters<typeof pullOnce>) => {
    const result = await pullOnce(...args);
    // The stream goes away between the lease and the hand-off.
    if (result.received.length > 0 && closing) {
      closing.close();
      closing = undefined;
    }
    return result;
  };
  const first = openStream(broker, 10, () => undefined);
  closing = first;
  t.teardown(() => first.close());
  await publish(broker, ['a', 'b', 'c']);
  t.ok(await waitUntil(() => closing === undefined, 10_000), 'the stream closed after its pull leased the messages');
  t.same(first.received, [], 'it got none of them');
  const second = openStream(broker, 10, () => undefined);
  t.teardown(() => second.close());
  t.ok(
    await waitUntil(() => second.received.length === 3, 10_000),
    'the next stream gets them, long before the deadline',
  );
  t.same(second.received.sort(), ['a', 'b', 'c'], 'each once');
});

t.test('a subscription change reaches its idle streams through the leaser, before any heartbeat', async (t) => {
  const broker = await workBroker(t, 'leaser-config');
  const frames: StreamingPullResponse[] = [];
  const session = broker.app.broker.streams.open(caller(), WORK, {
    send: (response) => frames.push(response) > 0,
    close() {},
  });
  t.teardown(() => broker.app.broker.streams.closed(session));
  session.receive(() => ({ streamAckDeadlineSeconds: 60 }));
  t.ok(await waitUntil(() => frames.length > 0, 5000), 'the stream started');
  await broker.api('PATCH', '/v1/projects/p/subscriptions/work', {
    subscription: { enableExactlyOnceDelivery: true },
    updateMask: 'enableExactlyOnceDelivery',
  });
  // Heartbeats (which re-read the subscription too) come every 7.5 s here.
  t.ok(
    await waitUntil(() => frames.some((frame) => frame.subscriptionProperties?.exactlyOnceDeliveryEnabled), 3000),
    'the new subscriptionProperties arrive on the config wake-up',
  );
});
