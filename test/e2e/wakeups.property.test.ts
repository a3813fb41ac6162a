// Wake-ups under a random schedule (src/broker/wakeups.ts): long polls with random maxMessages
// that sometimes give up early, and streams with random flow control, ack or nack what they get
// after random delays while messages are published in random batches; on a filtered
// subscription some messages never match. Long polls wait for a minute, so once the publishing
// and the early leaving stop, nothing looks for messages but what a wake-up sets off. However
// the wake-ups fall, every message the subscription takes is acknowledged in the end, none it does not take is delivered, and a
// message is delivered again only after a nack of it (the model: deliveries = 1 + nacks).

import { setTimeout as sleep } from 'node:timers/promises';
import t from 'tap';
import type { CallContext } from '../../src/broker/call-context.ts';
import { parseResourceName } from '../../src/broker/names.ts';
import type { ReceivedMessage } from '../../src/broker/pull.ts';
import type { StreamingPullResponse } from '../../src/broker/streaming.ts';
import { b64, startBroker } from '../helpers/app.ts';
import { randomFromEnv } from '../helpers/random.ts';
import { waitUntil } from '../helpers/wait.ts';

const P = '/v1/projects/p';
const WORK = parseResourceName('subscriptions', 'projects/p/subscriptions/work');
const caller = (signal?: AbortSignal): CallContext => ({ endpoint: 'internal', region: '', signal });
const textOf = (received: ReceivedMessage) => received.message.data?.toString() ?? '';

for (const filtered of [false, true]) {
  t.test(`random consumers and publishes, ${filtered ? 'filtered' : 'plain'} subscription`, async (t) => {
    const random = randomFromEnv(t);
    const broker = await startBroker(t, { name: 'wakeups-model', pullWaitMs: 60_000 });
    const { delivery, streams } = broker.app.broker;
    await broker.api('PUT', `${P}/topics/jobs`, {});
    await broker.api('PUT', `${P}/subscriptions/work`, {
      topic: 'projects/p/topics/jobs',
      ackDeadlineSeconds: 60,
      ...(filtered ? { filter: 'attributes.take = "yes"' } : {}),
    });

    // The model: what the subscription takes, and per message its deliveries, nacks and acks.
    const taken = new Set<string>();
    const deliveries = new Map<string, number>();
    const nacks = new Map<string, number>();
    const acked = new Set<string>();
    const bump = (counts: Map<string, number>, text: string) => counts.set(text, (counts.get(text) ?? 0) + 1);
    let stopping = false;
    const stop = new AbortController();
    /** While publishing, long polls now and then leave early (and pull again). */
    let churn = true;

    /** Acks or nacks (one in five) what a consumer got, after a random delay. */
    const settleLater = (
      received: { text: string; ackId: string }[],
      settle: (nacked: string[], ackedIds: string[]) => void,
    ) => {
      for (const { text } of received) bump(deliveries, text);
      setTimeout(
        () => {
          const nacked: string[] = [];
          const ackIds: string[] = [];
          for (const { text, ackId } of received) {
            if (random.chance(0.2)) {
              bump(nacks, text);
              nacked.push(ackId);
            } else {
              acked.add(text);
              ackIds.push(ackId);
            }
          }
          settle(nacked, ackIds);
        },
        random.int(0, 30),
      );
    };

    const longPoll = async () => {
      while (!stopping) {
        const giveUp = new AbortController();
        // Now and then a client leaves early, perhaps just as it was woken.
        if (churn && random.chance(0.3)) setTimeout(() => giveUp.abort(), random.int(0, 50));
        const signal = AbortSignal.any([giveUp.signal, stop.signal]);
        const received = await delivery.pull(caller(signal), WORK, { maxMessages: random.int(1, 5) });
        settleLater(
          received.map((message) => ({ text: textOf(message), ackId: message.ackId })),
          (nacked, ackIds) => {
            if (ackIds.length > 0) void delivery.acknowledge(caller(), WORK, { ackIds });
            if (nacked.length > 0)
              void delivery.modifyAckDeadline(caller(), WORK, { ackIds: nacked, ackDeadlineSeconds: 0 });
          },
        );
      }
    };

    const openStream = () => {
      const session = streams.open(caller(), WORK, {
        send(response: StreamingPullResponse) {
          const messages = response.receivedMessages ?? [];
          if (messages.length === 0) return true;
          settleLater(
            messages.map((message) => ({ text: textOf(message), ackId: message.ackId })),
            (nacked, ackIds) =>
              session.receive(() => ({
                ackIds,
                modifyDeadlineAckIds: nacked,
                modifyDeadlineSeconds: nacked.map(() => 0),
              })),
          );
          return true;
        },
        close() {},
      });
      session.receive(() => ({ streamAckDeadlineSeconds: 60, maxOutstandingMessages: random.int(1, 4) }));
      return session;
    };

    const polls = Array.from({ length: random.int(3, 8) }, () => longPoll());
    const sessions = Array.from({ length: random.int(2, 6) }, () => openStream());
    t.teardown(() => {
      for (const session of sessions) streams.closed(session);
    });

    let published = 0;
    while (published < 150) {
      const batch = Array.from({ length: random.int(1, 5) }, () => {
        const text = `m${published++}`;
        const takes = !filtered || random.chance(0.6);
        if (takes) taken.add(text);
        return { data: b64(text), attributes: { take: takes ? 'yes' : 'no' } };
      });
      await broker.api('POST', `${P}/topics/jobs:publish`, { messages: batch });
      await sleep(random.int(0, 20));
    }
    churn = false;

    t.ok(await waitUntil(() => acked.size === taken.size, 30_000), `all ${taken.size} messages acked`);
    stopping = true;
    stop.abort();
    for (const session of sessions) streams.closed(session);
    await Promise.all(polls);
    t.same([...acked].sort(), [...taken].sort(), 'exactly what the subscription takes was acked');
    const unexpected = [...deliveries.keys()].filter((text) => !taken.has(text));
    t.same(unexpected, [], 'nothing it does not take was delivered');
    const again = [...taken].filter((text) => deliveries.get(text) !== 1 + (nacks.get(text) ?? 0));
    t.same(again, [], 'each message delivered once more per nack, never else');
  });
}
