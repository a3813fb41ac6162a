// Randomized test of ordered delivery (with and without exactly-once): many keys, several
// interleaved consumers, random acks, nacks, deadline extensions, out-of-order acks, dropped
// consumers and expiring leases, all on a ManualClock. Checked on every response:
//  - a keyed message is delivered only when every earlier message of its key is acked, or
//    comes before it in the same response (so each consumer sees each key in publish order;
//    a redelivered prefix may repeat, never reorder);
//  - while a message of a key is validly leased, no other delivery of that key happens;
//  - nothing is delivered after its successful ack;
// and at the end every message was acked exactly once, each key's acks in publish order.

import t from 'tap';
import { seededRandom } from '../helpers/random.ts';
import { ManualClock } from '../../src/broker/clock.ts';
import { b64, startBroker, type TestBroker } from '../helpers/app.ts';
import { redisTargets } from '../helpers/redis.ts';

const SEED = Number(process.env.SEED ?? Date.now() % 100000);
const KEYS = 25;
const MESSAGES = 900;
const STEPS = 700;
const CONSUMERS = 4;
const ACK_DEADLINE = 10;

interface Lease {
  ackId: string;
  id: string;
  key: string;
  index: number;
  deadline: number;
  consumer: number;
}

class Model {
  readonly order = new Map<string, string[]>(); // key -> message ids in publish order
  readonly keyOf = new Map<string, string>();
  readonly leases = new Map<string, Lease>(); // message id -> its current lease as the model sees it
  readonly acked = new Set<string>();
  readonly ackSequence = new Map<string, string[]>(); // key -> ids in order of successful ack
  readonly violations: string[] = [];
  // Ended leases, for stale-ack checks. `byNack`: ended by a nack (or its cascade), which the
  // server applies at once; an expired lease lingers on the server until a pull reclaims it,
  // and until then a non-exactly-once ack of it still succeeds.
  readonly revoked: { lease: Lease; byNack: boolean }[] = [];
  now = 0;

  /**
   * Leases the server still honours. An expired lease ends for good, and (cascade) so do the
   * later leases of its key, even extended ones: the server revokes them when it reclaims the
   * expired one, so the model forgets them at once.
   */
  validLeases(): Lease[] {
    const byKey = new Map<string, Lease[]>();
    for (const lease of this.leases.values()) {
      if (!byKey.has(lease.key)) byKey.set(lease.key, []);
      byKey.get(lease.key)!.push(lease);
    }
    for (const [key, leases] of byKey) {
      leases.sort((a, b) => a.index - b.index);
      const firstExpired = leases.findIndex((lease) => lease.deadline <= this.now);
      if (firstExpired === -1) continue;
      const ended = key === '' ? leases.filter((lease) => lease.deadline <= this.now) : leases.slice(firstExpired);
      for (const lease of ended) this.end(lease, false);
    }
    return [...this.leases.values()];
  }

  /** A nack (or an expiry) sends this message and the later outstanding ones of its key back. */
  revokeFrom(lease: Lease): void {
    for (const other of [...this.leases.values()]) {
      if (other.id === lease.id || (lease.key !== '' && other.key === lease.key && other.index > lease.index)) {
        this.end(other, true);
      }
    }
  }

  private end(lease: Lease, byNack: boolean): void {
    this.leases.delete(lease.id);
    this.revoked.push({ lease, byNack });
  }

  delivered(consumer: number, received: { ackId: string; message: { messageId: string; orderingKey?: string } }[]) {
    const valid = new Set(this.validLeases().map((lease) => lease.id));
    const seenInResponse = new Set<string>();
    for (const { ackId, message } of received) {
      const id = message.messageId;
      const key = message.orderingKey ?? '';
      if (key !== (this.keyOf.get(id) ?? '')) this.violations.push(`${id} came with key "${key}"`);
      if (this.acked.has(id)) this.violations.push(`${id} delivered after its successful ack`);
      if (valid.has(id)) this.violations.push(`${id} delivered while its previous lease was valid`);
      const index = key === '' ? 0 : this.order.get(key)!.indexOf(id);
      if (key !== '') {
        for (const earlier of this.order.get(key)!.slice(0, index)) {
          if (!this.acked.has(earlier) && !seenInResponse.has(earlier)) {
            this.violations.push(`${id} (key ${key} #${index}) delivered before ${earlier} was acked`);
            break;
          }
        }
        for (const other of valid) {
          const lease = this.leases.get(other)!;
          if (lease.key === key && !seenInResponse.has(other)) {
            this.violations.push(`${id} of key ${key} delivered while ${other} of that key was leased`);
            break;
          }
        }
      }
      seenInResponse.add(id);
      this.leases.set(id, { ackId, id, key, index, deadline: this.now + ACK_DEADLINE, consumer });
    }
  }

  ackSucceeded(lease: Lease) {
    if (this.acked.has(lease.id)) this.violations.push(`${lease.id} acked successfully twice`);
    this.acked.add(lease.id);
    this.leases.delete(lease.id);
    if (!this.ackSequence.has(lease.key)) this.ackSequence.set(lease.key, []);
    this.ackSequence.get(lease.key)!.push(lease.id);
  }
}

async function publishAll(broker: TestBroker, topic: string, random: () => number, model: Model) {
  let published = 0;
  while (published < MESSAGES) {
    const keyNumber = Math.floor(random() * (KEYS + 3)); // a few slots publish without a key
    const key = keyNumber < KEYS ? `key-${keyNumber}` : '';
    const size = Math.min(1 + Math.floor(random() * 8), MESSAGES - published);
    const messages = Array.from({ length: size }, (_, i) => ({
      data: b64(`m${published + i}`),
      ...(key ? { orderingKey: key } : {}),
    }));
    const response = await broker.api('POST', `${topic}:publish`, { messages });
    if (response.status !== 200) throw new Error(`publish failed: ${JSON.stringify(response.body)}`);
    for (const id of response.body.messageIds as string[]) {
      model.keyOf.set(id, key);
      if (!model.order.has(key)) model.order.set(key, []);
      model.order.get(key)!.push(id);
    }
    published += size;
  }
}

for (const exactlyOnce of [false, true]) {
  for (const target of redisTargets()) {
    t.test(`ordered${exactlyOnce ? ' + exactly-once' : ''} on ${target.name} (SEED=${SEED})`, async (t) => {
      const clock = new ManualClock();
      const broker = await startBroker(t, { target, clock, name: 'ordering' });
      const random = seededRandom(SEED + (exactlyOnce ? 1 : 0)).next;
      const topic = '/v1/projects/p/topics/ordered';
      const sub = '/v1/projects/p/subscriptions/ordered-sub';
      t.equal((await broker.api('PUT', topic, {})).status, 200);
      const created = await broker.api('PUT', sub, {
        topic: 'projects/p/topics/ordered',
        enableMessageOrdering: true,
        enableExactlyOnceDelivery: exactlyOnce,
        ackDeadlineSeconds: ACK_DEADLINE,
      });
      t.equal(created.status, 200);
      const model = new Model();
      await publishAll(broker, topic, random, model);
      const pick = <T>(items: T[]) => items[Math.floor(random() * items.length)];
      const held = (consumer: number) => model.validLeases().filter((lease) => lease.consumer === consumer);
      let outOfOrderChecks = 0;
      let staleChecks = 0;

      /** The consumer acks, per key, a random prefix of what it validly holds (in order). */
      const ackSome = async (consumer: number) => {
        const byKey = new Map<string, Lease[]>();
        for (const lease of held(consumer)) {
          if (!byKey.has(lease.key)) byKey.set(lease.key, []);
          byKey.get(lease.key)!.push(lease);
        }
        const chosen: Lease[] = [];
        for (const leases of byKey.values()) {
          leases.sort((a, b) => a.index - b.index);
          chosen.push(...leases.slice(0, Math.floor(random() * (leases.length + 1))));
        }
        if (chosen.length === 0) return () => {};
        const response = await broker.api('POST', `${sub}:acknowledge`, { ackIds: chosen.map((lease) => lease.ackId) });
        return () => {
          if (response.status !== 200)
            model.violations.push(`valid in-order ack failed: ${JSON.stringify(response.body)}`);
          for (const lease of chosen) model.ackSucceeded(lease);
        };
      };
      const nackOne = async (consumer: number) => {
        const lease = pick(held(consumer));
        if (!lease) return () => {};
        const response = await broker.api('POST', `${sub}:modifyAckDeadline`, {
          ackIds: [lease.ackId],
          ackDeadlineSeconds: 0,
        });
        return () => {
          if (response.status !== 200) model.violations.push(`valid nack failed: ${JSON.stringify(response.body)}`);
          model.revokeFrom(lease);
        };
      };
      const extendOne = async (consumer: number) => {
        const lease = pick(held(consumer));
        if (!lease) return () => {};
        const seconds = 10 + Math.floor(random() * 20);
        const response = await broker.api('POST', `${sub}:modifyAckDeadline`, {
          ackIds: [lease.ackId],
          ackDeadlineSeconds: seconds,
        });
        return () => {
          if (response.status !== 200)
            model.violations.push(`valid extension failed: ${JSON.stringify(response.body)}`);
          lease.deadline = model.now + seconds;
        };
      };
      /** Exactly-once: acking a later message of a key before an earlier one is refused. */
      const ackOutOfOrder = async (consumer: number) => {
        const candidates = held(consumer).filter(
          (lease) =>
            lease.key !== '' && lease.index > 0 && !model.acked.has(model.order.get(lease.key)![lease.index - 1]),
        );
        const lease = pick(candidates);
        if (!lease) return () => {};
        const response = await broker.api('POST', `${sub}:acknowledge`, { ackIds: [lease.ackId] });
        return () => {
          outOfOrderChecks++;
          const metadata = response.body?.error?.details?.[0]?.metadata;
          if (response.status !== 400 || metadata?.[lease.ackId] !== 'TRANSIENT_FAILURE_UNORDERED_ACK_ID') {
            model.violations.push(`out-of-order ack not refused: ${JSON.stringify(response.body)}`);
          }
        };
      };
      const pull = async (consumer: number) => {
        const maxMessages = 1 + Math.floor(random() * 20);
        const response = await broker.api('POST', `${sub}:pull`, { maxMessages, returnImmediately: true });
        return () => {
          if (response.status !== 200) model.violations.push(`pull failed: ${JSON.stringify(response.body)}`);
          model.delivered(consumer, response.body.receivedMessages ?? []);
        };
      };
      /** An ended lease's ack ID: exactly-once refuses it; otherwise it is ignored (checked at the end). */
      const ackStale = async () => {
        const ended = pick(model.revoked.slice(-50).filter(({ byNack }) => exactlyOnce || byNack));
        if (!ended) return () => {};
        const { lease, byNack } = ended;
        const response = await broker.api('POST', `${sub}:acknowledge`, { ackIds: [lease.ackId] });
        return () => {
          staleChecks++;
          const metadata = response.body?.error?.details?.[0]?.metadata;
          // A lease behind an expired one of its key lingers until a pull reclaims the expired
          // one; until then exactly-once refuses its ack as out of order (transient) instead.
          const allowed = byNack
            ? ['PERMANENT_FAILURE_INVALID_ACK_ID']
            : ['PERMANENT_FAILURE_INVALID_ACK_ID', 'TRANSIENT_FAILURE_UNORDERED_ACK_ID'];
          const refused = response.status === 400 && allowed.includes(metadata?.[lease.ackId]);
          if (exactlyOnce ? !refused : response.status !== 200) {
            model.violations.push(
              `stale ack of ${lease.id} answered ${response.status} ${JSON.stringify(response.body)}`,
            );
          }
        };
      };
      const dropHeld = async (consumer: number) => () => {
        // The consumer crashes: it forgets its messages, whose leases then run out.
        for (const lease of held(consumer)) lease.consumer = -1;
      };

      const actions = [
        pull,
        pull,
        pull,
        ackSome,
        ackSome,
        nackOne,
        extendOne,
        dropHeld,
        ackStale,
        ...(exactlyOnce ? [ackOutOfOrder] : []),
      ];
      for (let step = 0; step < STEPS && model.violations.length === 0; step++) {
        if (random() < 0.15) {
          const seconds = Math.floor(random() * 8);
          clock.advanceSeconds(seconds);
          model.now += seconds;
          continue;
        }
        // Two consumers act concurrently. Acks and nacks are applied to the model before pulls:
        // the server ordered them one way or the other, and either order is legal.
        const a = Math.floor(random() * CONSUMERS);
        const b = (a + 1 + Math.floor(random() * (CONSUMERS - 1))) % CONSUMERS;
        const [actionA, actionB] = [pick(actions), pick(actions)];
        const results = await Promise.all([actionA(a), actionB(b)]);
        const pulls = [actionA === pull, actionB === pull];
        results.forEach((apply, i) => {
          if (!pulls[i]) apply();
        });
        results.forEach((apply, i) => {
          if (pulls[i]) apply();
        });
      }

      // Drain: let every lease run out, then pull and ack in order until nothing is left.
      for (let round = 0; round < 400 && model.violations.length === 0; round++) {
        clock.advanceSeconds(700);
        model.now += 700;
        model.leases.clear();
        const response = await broker.api('POST', `${sub}:pull`, { maxMessages: 100, returnImmediately: true });
        const received = response.body.receivedMessages ?? [];
        model.delivered(0, received);
        if (received.length === 0) break;
        const leases = received.map((m: any) => model.leases.get(m.message.messageId)!);
        const ack = await broker.api('POST', `${sub}:acknowledge`, {
          ackIds: leases.map((lease: Lease) => lease.ackId),
        });
        if (ack.status !== 200) model.violations.push(`drain ack failed: ${JSON.stringify(ack.body)}`);
        for (const lease of leases) model.ackSucceeded(lease);
      }

      t.same(model.violations.slice(0, 5), [], 'no ordering or delivery violation');
      t.equal(model.acked.size, MESSAGES, 'every message was acked');
      for (const [key, ids] of model.order) {
        if (key === '') continue;
        t.same(model.ackSequence.get(key), ids, `key ${key}: successful acks follow publish order`);
      }
      t.ok(staleChecks > 0, `stale acks were tried (${staleChecks})`);
      if (exactlyOnce) t.ok(outOfOrderChecks > 0, `out-of-order acks were tried (${outOfOrderChecks})`);
      t.same((await broker.api('POST', `${sub}:pull`, { maxMessages: 10, returnImmediately: true })).body, {});
    });
  }
}
