// A stream's outstanding deliveries (src/broker/outstanding.ts): the byte total and the expiry
// bound it keeps current instead of counting again, checked against a plain recount after a
// seeded run of random adds, deletes, deadline changes and expiry passes.

import t from 'tap';
import { type OutstandingDelivery, OutstandingDeliveries } from '../../src/broker/outstanding.ts';
import { randomFromEnv } from '../helpers/random.ts';

const delivery = (seq: number) => ({
  region: '',
  subscriptionUid: '0123456789abcdef',
  seq: String(seq),
  generation: 1,
});
const entry = (seq: number, bytes: number, expiresAtMs: number): OutstandingDelivery => ({
  bytes,
  expiresAtMs,
  seq,
  delivery: delivery(seq),
});

t.test('bytes, size and expiry follow adds, deletes, extensions and time', async (t) => {
  const random = randomFromEnv(t);
  const outstanding = new OutstandingDeliveries();
  const model = new Map<string, OutstandingDelivery>();
  let now = 1_000;
  for (let step = 0; step < 5_000; step++) {
    const ackId = `a${random.int(0, 60)}`;
    const action = random.int(0, 4);
    if (action === 0) {
      const added = entry(step, random.int(0, 500), now + random.int(1, 100));
      outstanding.add(ackId, added);
      model.set(ackId, added);
    } else if (action === 1) {
      t.equal(outstanding.delete(ackId), model.delete(ackId), 'delete says whether it was there');
    } else if (action === 2) {
      // A deadline change moves an entry's expiry, sooner or later (StreamingSession.settled).
      // (The model holds the same entry objects, so it sees the move too.)
      outstanding.moveExpiry(ackId, now + random.int(1, 200));
    } else if (action === 3) {
      now += random.int(0, 30);
      outstanding.forgetExpired(now);
      for (const [id, e] of model) if (e.expiresAtMs <= now) model.delete(id);
    } else {
      const next = outstanding.nextExpiryMs();
      const earliest = Math.min(...[...model.values()].map((e) => e.expiresAtMs));
      if (!(next <= earliest)) t.fail(`nextExpiryMs ${next} is after the earliest lease ${earliest}`);
    }
    if (outstanding.size !== model.size) t.fail(`step ${step}: size ${outstanding.size}, expected ${model.size}`);
    const bytes = [...model.values()].reduce((sum, e) => sum + e.bytes, 0);
    if (outstanding.bytes !== bytes) t.fail(`step ${step}: bytes ${outstanding.bytes}, expected ${bytes}`);
  }
  t.pass('5,000 random steps agree with a recount');
  outstanding.forgetExpired(Number.MAX_SAFE_INTEGER);
  t.equal(outstanding.size, 0, 'everything runs out eventually');
  t.equal(outstanding.bytes, 0);
  t.equal(outstanding.nextExpiryMs(), Infinity, 'and then nothing is due');
});
