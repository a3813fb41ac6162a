// Randomized model-based test of redelivery with a retry policy, on a ManualClock: random
// publishes, pulls, acks, nacks, deadline extensions, stale acks and advances of time, on
// subscriptions with and without message ordering and exactly-once delivery, checked against a
// model that knows, for every message, how many of its deliveries counted as attempts (a nack,
// an expired lease; not a deadline extension, nor a lease cut short by the ordering cascade of
// an earlier message) and so when it may be delivered again:
//   after its attempts-th failed delivery, not before min(maximumBackoff,
//   minimumBackoff × 2^(attempts − 1)) from the nack, or from the lease's deadline;
// and, with ordering, a key only from its oldest un-acked message on, while nothing of it is
// outstanding, up to the first message still waiting out its backoff. Checked on every pull:
// nothing is delivered that the model does not allow, and a pull large enough for everything
// delivers exactly what the model allows. At the end every message was acked exactly once.

import t, { type Test } from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { b64, startBroker, type TestBroker } from '../helpers/app.ts';
import { randomFromEnv } from '../helpers/random.ts';
import { redisTargets } from '../helpers/redis.ts';

const STEPS = 1500;
const ACK_DEADLINE_S = 10;
const MAX_EXTENSION_S = 30;
const US = 1_000_000;
/** Larger than every message the test publishes: a pull this large serves everything available. */
const BIG_PULL = 1000;

interface Policy {
  minS: number;
  maxS: number;
}

interface Message {
  id: string;
  key: string;
  /** Position in its key's publish order. */
  index: number;
  acked: boolean;
  /** The current delivery, while the broker holds its lease. */
  lease?: { ackId: string; deadline: number };
  /** Deliveries that counted as attempts and ended (nacked, or expired). */
  attempts: number;
  /** Not delivered again before this (µs), once its lease ended. */
  availableAt: number;
}

class Model {
  now = 0;
  readonly messages = new Map<string, Message>();
  /** key -> its messages in publish order ('' holds the unkeyed ones, in no order that matters). */
  readonly keys = new Map<string, Message[]>();
  /** Ack IDs of deliveries that ended (nack, reclaimed expiry, cascade): they never ack anything. */
  readonly ended: { ackId: string; message: Message }[] = [];
  readonly violations: string[] = [];

  constructor(
    private readonly policy: Policy | undefined,
    readonly ordered: boolean,
  ) {}

  published(ids: string[], key: string): void {
    const list = this.keys.get(key) ?? [];
    this.keys.set(key, list);
    for (const id of ids) {
      const message: Message = { id, key, index: list.length, acked: false, attempts: 0, availableAt: 0 };
      list.push(message);
      this.messages.set(id, message);
    }
  }

  private backoffUs(attempts: number): number {
    if (!this.policy) return 0;
    return Math.min(this.policy.minS * US * 2 ** Math.min(attempts - 1, 40), this.policy.maxS * US);
  }

  /** A delivery that counts as an attempt ended at `at` (now for a nack, the deadline for an expiry). */
  private failed(message: Message, at: number): void {
    this.end(message);
    message.attempts++;
    message.availableAt = at + this.backoffUs(message.attempts);
  }

  private end(message: Message): void {
    this.ended.push({ ackId: message.lease!.ackId, message });
    message.lease = undefined;
  }

  private keyed = (message: Message) => this.ordered && message.key !== '';

  /** The outstanding messages of message's key after it, in order (the ordering cascade). */
  private later(message: Message): Message[] {
    return this.keys.get(message.key)!.filter((other) => other.index > message.index && other.lease);
  }

  /** The cascade behind a failed keyed delivery: later leases end, counting only if they expired themselves. */
  private cascade(message: Message): void {
    for (const other of this.later(message)) {
      if (other.lease!.deadline <= this.now) this.failed(other, other.lease!.deadline);
      else {
        this.end(other);
        other.availableAt = 0;
      }
    }
  }

  nacked(message: Message): void {
    const later = this.keyed(message);
    this.failed(message, this.now);
    if (later) this.cascade(message);
  }

  /** What a pull does first: every expired lease ends (the test's pulls are large enough to reach them all). */
  reclaimExpired(): void {
    for (const list of this.keys.values()) {
      for (const message of list) {
        if (!message.lease || message.lease.deadline > this.now) continue;
        const keyed = this.keyed(message);
        this.failed(message, message.lease.deadline);
        if (keyed) this.cascade(message);
      }
    }
  }

  expiredLeases(): number {
    return [...this.messages.values()].filter((m) => m.lease && m.lease.deadline <= this.now).length;
  }

  /** What may be delivered now, by key ('' for unkeyed messages), in the order it must come. */
  deliverable(): Map<string, Message[]> {
    const out = new Map<string, Message[]>();
    for (const [key, list] of this.keys) {
      const waiting = list.filter((m) => !m.acked);
      if (!this.ordered || key === '') {
        out.set(
          key,
          waiting.filter((m) => !m.lease && m.availableAt <= this.now),
        );
        continue;
      }
      if (waiting.some((m) => m.lease)) continue;
      const run: Message[] = [];
      for (const m of waiting) {
        if (m.availableAt > this.now) break;
        run.push(m);
      }
      out.set(key, run);
    }
    return out;
  }

  /** Checks a pull's answer against what was deliverable, then records the new leases. */
  delivered(received: { ackId: string; message: { messageId: string } }[], big: boolean): void {
    const allowed = this.deliverable();
    const nextOfKey = new Map<string, number>();
    for (const { ackId, message } of received) {
      const m = this.messages.get(message.messageId);
      if (!m) {
        this.violations.push(`unknown message ${message.messageId} delivered`);
        continue;
      }
      const run = allowed.get(m.key) ?? [];
      const position = run.indexOf(m);
      const keyedRun = this.ordered && m.key !== '';
      const expected = nextOfKey.get(m.key) ?? 0;
      if (position < 0 || (keyedRun && position !== expected)) {
        this.violations.push(
          `t=${this.now / US}s: ${m.id} (key "${m.key}" #${m.index}, attempts ${m.attempts}, available at ${m.availableAt / US}s, ${m.acked ? 'acked' : m.lease ? 'leased' : 'waiting'}) delivered when not allowed`,
        );
      }
      nextOfKey.set(m.key, expected + 1);
      m.lease = { ackId, deadline: this.now + ACK_DEADLINE_S * US };
    }
    if (!big) return;
    const deliveredIds = new Set(received.map((r) => r.message.messageId));
    for (const run of allowed.values()) {
      for (const m of run) {
        if (!deliveredIds.has(m.id)) {
          this.violations.push(`t=${this.now / US}s: ${m.id} (key "${m.key}") was deliverable but not delivered`);
        }
      }
    }
  }

  held(): Message[] {
    return [...this.messages.values()].filter((m) => m.lease && m.lease.deadline > this.now);
  }
}

interface Variant {
  name: string;
  policy?: Policy;
  ordered: boolean;
  exactlyOnce: boolean;
}

const VARIANTS: Variant[] = [
  { name: 'retry 1s..8s', policy: { minS: 1, maxS: 8 }, ordered: false, exactlyOnce: false },
  { name: 'retry 1s..8s, ordered', policy: { minS: 1, maxS: 8 }, ordered: true, exactlyOnce: false },
  { name: 'retry 2s..30s, exactly-once', policy: { minS: 2, maxS: 30 }, ordered: false, exactlyOnce: true },
  { name: 'retry 0.5s..5s, ordered + exactly-once', policy: { minS: 0.5, maxS: 5 }, ordered: true, exactlyOnce: true },
  { name: 'no retry policy, ordered', ordered: true, exactlyOnce: false },
];

async function run(t: Test, broker: TestBroker, clock: ManualClock, variant: Variant): Promise<void> {
  const random = randomFromEnv(t);
  const topic = '/v1/projects/p/topics/redelivery';
  const sub = '/v1/projects/p/subscriptions/redelivery-sub';
  t.equal((await broker.api('PUT', topic, {})).status, 200);
  const created = await broker.api('PUT', sub, {
    topic: 'projects/p/topics/redelivery',
    ackDeadlineSeconds: ACK_DEADLINE_S,
    enableMessageOrdering: variant.ordered,
    enableExactlyOnceDelivery: variant.exactlyOnce,
    ...(variant.policy
      ? { retryPolicy: { minimumBackoff: `${variant.policy.minS}s`, maximumBackoff: `${variant.policy.maxS}s` } }
      : {}),
  });
  t.equal(created.status, 200, 'subscription created');
  const model = new Model(variant.policy, variant.ordered);
  const advance = (seconds: number) => {
    clock.advanceSeconds(seconds);
    model.now += Math.round(seconds * US);
  };
  let published = 0;
  let nacks = 0;
  let backoffWaits = 0;

  const publish = async () => {
    const key = random.chance(0.3) ? '' : `key-${random.int(0, 3)}`;
    const count = random.int(1, 3);
    const messages = Array.from({ length: count }, () => ({
      data: b64(`m${published++}`),
      ...(key ? { orderingKey: key } : {}),
    }));
    const response = await broker.api('POST', `${topic}:publish`, { messages });
    if (response.status !== 200) return model.violations.push(`publish failed: ${JSON.stringify(response.body)}`);
    model.published(response.body.messageIds, key);
  };
  const pull = async () => {
    const big = random.chance(0.4);
    const maxMessages = big ? BIG_PULL : Math.max(random.int(1, 4), model.expiredLeases());
    const response = await broker.api('POST', `${sub}:pull`, { maxMessages, returnImmediately: true });
    if (response.status !== 200) return model.violations.push(`pull failed: ${JSON.stringify(response.body)}`);
    model.reclaimExpired();
    const waiting = [...model.messages.values()].filter((m) => !m.acked && !m.lease && m.availableAt > model.now);
    backoffWaits += waiting.length > 0 ? 1 : 0;
    model.delivered(response.body.receivedMessages ?? [], big);
  };
  /**
   * Acks some held messages: per key a prefix in order. With ordering and exactly-once an ack must
   * be of its key's oldest un-acked message (an earlier one whose lease expired, not reclaimed by
   * a pull yet, still comes first): so there only from the key's first un-acked message on.
   */
  const ack = async () => {
    const chosen: Message[] = [];
    const held = new Set(model.held());
    for (const [key, list] of model.keys) {
      const unacked = list.filter((m) => !m.acked);
      const inOrder = variant.ordered && variant.exactlyOnce && key !== '';
      const first = unacked.findIndex((m) => !held.has(m));
      const candidates = inOrder
        ? unacked.slice(0, first < 0 ? unacked.length : first)
        : unacked.filter((m) => held.has(m));
      chosen.push(...candidates.slice(0, random.int(0, candidates.length)));
    }
    if (chosen.length === 0) return;
    const response = await broker.api('POST', `${sub}:acknowledge`, { ackIds: chosen.map((m) => m.lease!.ackId) });
    if (response.status !== 200) return model.violations.push(`valid ack failed: ${JSON.stringify(response.body)}`);
    for (const m of chosen) {
      if (m.acked) model.violations.push(`${m.id} acked twice`);
      m.acked = true;
      m.lease = undefined;
    }
  };
  const nack = async () => {
    const m = random.pick(model.held());
    if (!m) return;
    const response = await broker.api('POST', `${sub}:modifyAckDeadline`, {
      ackIds: [m.lease!.ackId],
      ackDeadlineSeconds: 0,
    });
    if (response.status !== 200) return model.violations.push(`valid nack failed: ${JSON.stringify(response.body)}`);
    nacks++;
    model.nacked(m);
  };
  const extend = async () => {
    const m = random.pick(model.held());
    if (!m) return;
    const seconds = random.int(ACK_DEADLINE_S, MAX_EXTENSION_S);
    const response = await broker.api('POST', `${sub}:modifyAckDeadline`, {
      ackIds: [m.lease!.ackId],
      ackDeadlineSeconds: seconds,
    });
    if (response.status !== 200) return model.violations.push(`extension failed: ${JSON.stringify(response.body)}`);
    m.lease!.deadline = model.now + seconds * US;
  };
  /** An ended delivery's ack ID acks nothing: refused on exactly-once, ignored otherwise. */
  const ackStale = async () => {
    const stale = random.pick(model.ended.slice(-30));
    if (!stale) return;
    const response = await broker.api('POST', `${sub}:acknowledge`, { ackIds: [stale.ackId] });
    const failure = response.body?.error?.details?.[0]?.metadata?.[stale.ackId];
    const refused = response.status === 400 && failure === 'PERMANENT_FAILURE_INVALID_ACK_ID';
    if (variant.exactlyOnce ? !refused : response.status !== 200) {
      model.violations.push(`stale ack answered ${response.status} ${JSON.stringify(response.body)}`);
    }
  };

  const actions = [publish, pull, pull, pull, ack, nack, nack, extend, ackStale];
  for (let step = 0; step < STEPS && model.violations.length === 0; step++) {
    if (random.chance(0.25)) advance(random.int(1, 40) / 4);
    else await random.pick(actions)();
  }

  // Drain: wait out every lease and backoff, pull everything, ack it, until nothing is left.
  for (let round = 0; round < 100 && model.violations.length === 0; round++) {
    advance(MAX_EXTENSION_S + (variant.policy?.maxS ?? 0) + 1);
    const response = await broker.api('POST', `${sub}:pull`, { maxMessages: BIG_PULL, returnImmediately: true });
    model.reclaimExpired();
    const received = response.body.receivedMessages ?? [];
    model.delivered(received, true);
    if (received.length === 0) break;
    // In order of delivery: per key, that is publish order.
    const ackIds = received.map((r: { ackId: string }) => r.ackId);
    const acked = await broker.api('POST', `${sub}:acknowledge`, { ackIds });
    if (acked.status !== 200) model.violations.push(`drain ack failed: ${JSON.stringify(acked.body)}`);
    for (const r of received) {
      const m = model.messages.get(r.message.messageId)!;
      m.acked = true;
      m.lease = undefined;
    }
  }

  t.same(model.violations.slice(0, 5), [], 'every delivery is one the model allows');
  t.ok(model.messages.size > 0 && [...model.messages.values()].every((m) => m.acked), 'every message was acked');
  t.ok(nacks > 10, `nacks happened (${nacks})`);
  if (variant.policy) t.ok(backoffWaits > 10, `messages waited out backoffs (${backoffWaits} pulls saw some)`);
}

for (const target of redisTargets()) {
  for (const variant of VARIANTS) {
    t.test(`${variant.name} on ${target.name}`, async (t) => {
      const clock = new ManualClock();
      const broker = await startBroker(t, { target, clock, name: 'redelivery' });
      await run(t, broker, clock, variant);
    });
  }
}
