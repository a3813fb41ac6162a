// Randomized test of scheduled delivery mixed with ordering and exactly-once, on a ManualClock.
// One topic feeds four subscriptions (plain, ordered, exactly-once, ordered + exactly-once);
// random publishes (some messages scheduled, by delay or time, in either form; some with an
// ordering key), clock moves, pulls, acks, nacks and expiring leases. Checked on every response:
//  - no message is delivered before its delivery time;
//  - nothing is delivered after its successful ack;
//  - on ordered subscriptions, a keyed message is delivered only when every earlier message of
//    its key is acked, or comes before it in the same response;
//  - every ack of a valid lease succeeds (on exactly-once subscriptions the answer says so);
// and at the end every message was acked exactly once on every subscription.
// Replay a failure with SEED=<seed printed by the run>.

import t from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { formatTimestampUs } from '../../src/broker/durations.ts';
import { b64, startBroker, type TestBroker } from '../helpers/app.ts';
import { randomFromEnv } from '../helpers/random.ts';
import { redisTargets } from '../helpers/redis.ts';

const P = '/v1/projects/p';
const ACK_DEADLINE = 10;
const STEPS = 250;

interface Subscription {
  name: string;
  ordered: boolean;
  exactlyOnce: boolean;
}

const SUBSCRIPTIONS: Subscription[] = [
  { name: 'plain', ordered: false, exactlyOnce: false },
  { name: 'ordered', ordered: true, exactlyOnce: false },
  { name: 'eod', ordered: false, exactlyOnce: true },
  { name: 'ordered-eod', ordered: true, exactlyOnce: true },
];

interface Lease {
  ackId: string;
  id: string;
  deadlineUs: number;
}

/** What one subscription has received and acknowledged, as the test sees it. */
class SubscriptionModel {
  readonly leases = new Map<string, Lease>(); // message id -> its latest lease
  readonly acked = new Map<string, number>(); // message id -> successful acks

  constructor(
    readonly subscription: Subscription,
    readonly messages: Messages,
    private readonly violations: string[],
  ) {}

  delivered(nowUs: number, received: { ackId: string; message: { messageId: string } }[]) {
    const inResponse = new Set<string>();
    for (const { ackId, message } of received) {
      const id = message.messageId;
      const { dueUs, key } = this.messages.info.get(id)!;
      const where = `${this.subscription.name}: ${id}`;
      if (nowUs < dueUs) this.violations.push(`${where} delivered ${(dueUs - nowUs) / 1e6}s before its time`);
      if (this.acked.has(id)) this.violations.push(`${where} delivered after its successful ack`);
      if (this.subscription.ordered && key !== '') {
        for (const earlier of this.messages.byKey.get(key)!) {
          if (earlier === id) break;
          if (!this.acked.has(earlier) && !inResponse.has(earlier)) {
            this.violations.push(`${where} (key ${key}) delivered before ${earlier} was acked`);
            break;
          }
        }
      }
      inResponse.add(id);
      this.leases.set(id, { ackId, id, deadlineUs: nowUs + ACK_DEADLINE * 1_000_000 });
    }
  }

  /**
   * The leases to ack now: valid ones, chosen at random, on ordered subscriptions only a prefix of
   * each key's outstanding messages (acks in order, so none is refused as out of order).
   */
  choose(nowUs: number, share: () => boolean): Lease[] {
    const valid = [...this.leases.values()].filter((lease) => lease.deadlineUs > nowUs);
    valid.sort((a, b) => this.messages.index(a.id) - this.messages.index(b.id));
    const stopped = new Set<string>();
    const chosen: Lease[] = [];
    for (const lease of valid) {
      const key = this.messages.info.get(lease.id)!.key;
      const blocked = this.subscription.ordered && key !== '' && stopped.has(key);
      if (!blocked && share()) chosen.push(lease);
      else stopped.add(key);
    }
    return chosen;
  }

  ackSucceeded(lease: Lease) {
    this.acked.set(lease.id, (this.acked.get(lease.id) ?? 0) + 1);
    this.leases.delete(lease.id);
  }
}

class Messages {
  readonly info = new Map<string, { dueUs: number; key: string; order: number }>();
  readonly byKey = new Map<string, string[]>();

  add(id: string, dueUs: number, key: string) {
    this.info.set(id, { dueUs, key, order: this.info.size });
    if (!this.byKey.has(key)) this.byKey.set(key, []);
    this.byKey.get(key)!.push(id);
  }

  index(id: string): number {
    return this.info.get(id)!.order;
  }
}

async function publishRandom(
  broker: TestBroker,
  random: ReturnType<typeof randomFromEnv>,
  nowUs: number,
  messages: Messages,
) {
  const key = random.pick(['', '', 'a', 'b', 'c', 'd']);
  const count = random.int(1, 4);
  const planned = Array.from({ length: count }, (_, i) => {
    const delaySeconds = random.pick([0, 0, 0, 1, 5, 12, 30, 60, -3]);
    const form = random.pick(['deliveryDelay', 'deliveryTime', 'attribute-delay', 'attribute-time']);
    const dueUs = nowUs + delaySeconds * 1_000_000;
    const time = formatTimestampUs(dueUs);
    const delay = `${delaySeconds}s`;
    const schedule =
      delaySeconds === 0
        ? {}
        : delaySeconds < 0 || form === 'deliveryTime'
          ? { deliveryTime: time }
          : form === 'deliveryDelay'
            ? { deliveryDelay: delay }
            : form === 'attribute-delay'
              ? { attributes: { 'pubsub-broker/delivery-delay': delay } }
              : { attributes: { 'pubsub-broker/delivery-time': time } };
    return { message: { data: b64(`m${i}`), ...(key ? { orderingKey: key } : {}), ...schedule }, dueUs };
  });
  const response = await broker.api('POST', `${P}/topics/orders:publish`, {
    messages: planned.map((p) => p.message),
  });
  if (response.status !== 200) throw new Error(`publish failed: ${JSON.stringify(response.body)}`);
  const ids = response.body.messageIds as string[];
  for (const [i, id] of ids.entries()) messages.add(id, planned[i].dueUs, key);
}

async function pull(broker: TestBroker, model: SubscriptionModel, nowUs: number, maxMessages: number) {
  const { body } = await broker.api('POST', `${P}/subscriptions/${model.subscription.name}:pull`, {
    maxMessages,
    returnImmediately: true,
  });
  model.delivered(nowUs, body.receivedMessages ?? []);
}

async function ack(broker: TestBroker, model: SubscriptionModel, leases: Lease[], violations: string[]) {
  if (leases.length === 0) return;
  const { status, body } = await broker.api('POST', `${P}/subscriptions/${model.subscription.name}:acknowledge`, {
    ackIds: leases.map((lease) => lease.ackId),
  });
  if (status !== 200)
    violations.push(`${model.subscription.name}: ack of valid leases failed: ${JSON.stringify(body)}`);
  else for (const lease of leases) model.ackSucceeded(lease);
}

async function nack(broker: TestBroker, model: SubscriptionModel, lease: Lease) {
  await broker.api('POST', `${P}/subscriptions/${model.subscription.name}:modifyAckDeadline`, {
    ackIds: [lease.ackId],
    ackDeadlineSeconds: 0,
  });
  // The message, and on ordered subscriptions the later outstanding ones of its key, come back.
  const key = model.subscription.ordered ? model.messages.info.get(lease.id)!.key : '';
  for (const other of [...model.leases.values()]) {
    const sameKeyLater =
      key !== '' &&
      model.messages.info.get(other.id)!.key === key &&
      model.messages.index(other.id) > model.messages.index(lease.id);
    if (other.id === lease.id || sameKeyLater) model.leases.delete(other.id);
  }
}

for (const target of redisTargets()) {
  t.test(`${target.name}: scheduled, ordered and exactly-once messages mixed at random`, async (t) => {
    const random = randomFromEnv(t);
    const clock = new ManualClock();
    const broker = await startBroker(t, { target, clock, name: 'scheduled-model' });
    await broker.api('PUT', `${P}/topics/orders`, {});
    const violations: string[] = [];
    const messages = new Messages();
    const models = SUBSCRIPTIONS.map((subscription) => new SubscriptionModel(subscription, messages, violations));
    for (const { name, ordered, exactlyOnce } of SUBSCRIPTIONS) {
      const created = await broker.api('PUT', `${P}/subscriptions/${name}`, {
        topic: 'projects/p/topics/orders',
        ackDeadlineSeconds: ACK_DEADLINE,
        enableMessageOrdering: ordered,
        enableExactlyOnceDelivery: exactlyOnce,
      });
      t.equal(created.status, 200);
    }
    const now = () => Number(clock.scriptTime());

    for (let step = 0; step < STEPS && violations.length === 0; step++) {
      const roll = random.next();
      if (roll < 0.3) {
        await publishRandom(broker, random, now(), messages);
      } else if (roll < 0.5) {
        clock.advanceSeconds(random.pick([0.5, 1, 2, 5, 11]));
      } else {
        const model = random.pick(models);
        await pull(broker, model, now(), random.int(1, 8));
        await ack(
          broker,
          model,
          model.choose(now(), () => random.next() < 0.6),
          violations,
        );
        const held = [...model.leases.values()].filter((lease) => lease.deadlineUs > now());
        if (held.length > 0 && random.next() < 0.15) await nack(broker, model, random.pick(held));
      }
    }

    // Past every delivery time and lease: each subscription drains to every message, acked once.
    clock.advanceSeconds(120);
    for (const model of models) {
      for (let round = 0; round < 200 && model.acked.size < messages.info.size; round++) {
        await pull(broker, model, now(), 100);
        await ack(
          broker,
          model,
          model.choose(now(), () => true),
          violations,
        );
      }
    }
    t.same(violations, [], 'no violation');
    for (const model of models) {
      const missing = [...messages.info.keys()].filter((id) => model.acked.get(id) !== 1);
      t.same(missing, [], `${model.subscription.name}: every message acked exactly once`);
    }
    t.ok(messages.info.size > 50, `${messages.info.size} messages published`);
  });
}
