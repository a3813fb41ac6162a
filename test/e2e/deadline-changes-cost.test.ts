// A deadline change (modifyAckDeadline to more than 0 seconds: what the official client sends for
// the messages it receives, and again while it holds them) reads and writes leases a thousand at
// a time: a lease costs a share of one ZMSCORE and one ZADD, never a command of its own. Each ack
// ID is still judged on its own: a live lease gets its new deadline, one already acknowledged
// changes nothing and is the one failure the answer names. Counted, never timed
// (countScriptCommands); time is the broker's manual clock.

import t from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { b64, startBroker } from '../helpers/app.ts';
import { countScriptCommands } from '../helpers/commands.ts';

const MESSAGES = 2500;
const topic = '/v1/projects/p/topics/deadlines';
const sub = '/v1/projects/p/subscriptions/deadlines-sub';

interface Received {
  ackId: string;
  message: { data: string };
}

t.test(
  'a deadline change of 2,500 leases runs three ZMSCOREs and three ZADDs, and extends each live one',
  async (t) => {
    const clock = new ManualClock();
    const broker = await startBroker(t, { name: 'deadline-changes', clock });
    await broker.api('PUT', topic, {});
    // Exactly-once: the answer names each ack ID that changed nothing.
    await broker.api('PUT', sub, {
      topic: 'projects/p/topics/deadlines',
      ackDeadlineSeconds: 10,
      enableExactlyOnceDelivery: true,
    });
    for (let sent = 0; sent < MESSAGES; sent += 500) {
      const messages = Array.from({ length: 500 }, (_, i) => ({ data: b64(`${sent + i}`) }));
      t.equal((await broker.api('POST', `${topic}:publish`, { messages })).status, 200);
    }
    const received: Received[] = [];
    while (received.length < MESSAGES) {
      const pulled = await broker.api('POST', `${sub}:pull`, { maxMessages: 1000, returnImmediately: true });
      received.push(...(pulled.body.receivedMessages ?? []));
    }
    const ackIds = received.map((m) => m.ackId);
    // One lease ended before the change: its ack ID changes nothing.
    const [acked, ...held] = received;
    t.equal((await broker.api('POST', `${sub}:acknowledge`, { ackIds: [acked.ackId] })).status, 200);

    const commands = await countScriptCommands(t, broker, async () => {
      const changed = await broker.api('POST', `${sub}:modifyAckDeadline`, { ackIds, ackDeadlineSeconds: 60 });
      t.equal(changed.status, 400, 'one ack ID failed');
      t.same(
        changed.body.error.details[0].metadata,
        { [acked.ackId]: 'PERMANENT_FAILURE_INVALID_ACK_ID' },
        'the acknowledged one, and only it',
      );
    });
    t.equal(commands.get('ZMSCORE'), 3, 'the deadlines read a thousand at a time');
    t.equal(commands.get('ZADD'), 3, 'and written a thousand at a time');
    t.equal(commands.get('ZSCORE') ?? 0, 0, 'no read of one lease');

    // Past the old deadline, nothing comes back; past the new one, every held message does.
    clock.advanceSeconds(30);
    const early = await broker.api('POST', `${sub}:pull`, { maxMessages: 1000, returnImmediately: true });
    t.same(early.body.receivedMessages ?? [], [], 'no lease ran out at its old deadline');
    clock.advanceSeconds(31);
    const again = new Set<string>();
    for (;;) {
      const pulled = await broker.api('POST', `${sub}:pull`, { maxMessages: 1000, returnImmediately: true });
      const redelivered: Received[] = pulled.body.receivedMessages ?? [];
      if (redelivered.length === 0) break;
      for (const m of redelivered) again.add(m.message.data);
    }
    t.same(
      [...again].sort(),
      held.map((m) => m.message.data).sort(),
      'every held lease ran out at its new deadline, and only those',
    );
  },
);
