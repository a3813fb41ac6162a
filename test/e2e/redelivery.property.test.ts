// Randomized model-based test of redelivery with a retry policy and dead-lettering, on a
// ManualClock: random publishes, pulls, acks, nacks, deadline extensions, stale acks and advances
// of time, on subscriptions with a retry policy, a dead-letter policy or both, with and without
// message ordering and exactly-once delivery, checked against a model that knows, for every
// message, how many of its deliveries failed (a nack, an expired lease; not a deadline
// extension, nor a lease cut short by the ordering cascade of an earlier message), and so:
//   - when it may be delivered again: after its n-th failed delivery, not before
//     min(maximumBackoff, minimumBackoff × 2^(n − 1)) from the nack, or from the lease's
//     deadline; with ordering, a key only from its oldest unsettled message on, while nothing of
//     it is outstanding, up to the first message still waiting out its backoff;
//   - its deliveryAttempt (1 + failed deliveries), on every delivery with a dead-letter policy,
//     and none without;
//   - once its failed deliveries reach maxDeliveryAttempts, that it is forwarded to the
//     dead-letter topic (at once, without a backoff; with ordering, as its key's oldest) instead
//     of being delivered again, with its data, attributes, ordering key and the four
//     CloudPubSubDeadLetterSource* attributes.
// Checked on every pull: nothing is delivered or forwarded that the model does not allow, and a
// pull large enough for everything delivers and forwards exactly what the model allows (the
// dead-letter topic's subscription is read after every pull). At the end every message was
// either acked or forwarded, exactly once.

import t, { type Test } from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { b64, startBroker, type TestBroker, unb64 } from '../helpers/app.ts';
import { randomFromEnv } from '../helpers/random.ts';
import { redisTargets } from '../helpers/redis.ts';

const STEPS = 1500;
const ACK_DEADLINE_S = 10;
const MAX_EXTENSION_S = 30;
const US = 1_000_000;
/** Larger than every message the test publishes: a pull this large serves everything available. */
const BIG_PULL = 1000;
const TOPIC = '/v1/projects/p/topics/redelivery';
const SUB = '/v1/projects/p/subscriptions/redelivery-sub';
const DEAD_LETTERS = '/v1/projects/p/topics/redelivery-dead';
const DEAD_LETTER_SUB = '/v1/projects/p/subscriptions/redelivery-dead';

interface Variant {
  name: string;
  retry?: { minS: number; maxS: number };
  maxDeliveryAttempts?: number;
  ordered: boolean;
  exactlyOnce: boolean;
}

interface Message {
  id: string;
  /** Its data: what identifies it on the dead-letter topic, where it has another message ID. */
  text: string;
  key: string;
  /** Position in its key's publish order. */
  index: number;
  publishTime?: string;
  acked: boolean;
  deadLettered: boolean;
  /** The current delivery, while the broker holds its lease. */
  lease?: { ackId: string; deadline: number };
  /** Deliveries that failed: nacked, or expired. */
  attempts: number;
  /** Not delivered again before this (µs), once its lease ended. */
  availableAt: number;
}

interface Received {
  ackId: string;
  deliveryAttempt?: number;
  message: { messageId: string; data?: string; publishTime: string; orderingKey?: string; attributes?: object };
}

class Model {
  now = 0;
  readonly messages = new Map<string, Message>();
  readonly byText = new Map<string, Message>();
  /** key -> its messages in publish order ('' holds the unkeyed ones, in no order that matters). */
  readonly keys = new Map<string, Message[]>();
  /** Ack IDs of deliveries that ended (nack, reclaimed expiry, cascade): they never ack anything. */
  readonly ended: { ackId: string; message: Message }[] = [];
  readonly violations: string[] = [];

  constructor(private readonly variant: Variant) {}

  published(ids: string[], texts: string[], key: string): void {
    const list = this.keys.get(key) ?? [];
    this.keys.set(key, list);
    ids.forEach((id, i) => {
      const message: Message = {
        id,
        text: texts[i],
        key,
        index: list.length,
        acked: false,
        deadLettered: false,
        attempts: 0,
        availableAt: 0,
      };
      list.push(message);
      this.messages.set(id, message);
      this.byText.set(texts[i], message);
    });
  }

  private dueForDeadLetters = (m: Message) =>
    this.variant.maxDeliveryAttempts !== undefined && m.attempts >= this.variant.maxDeliveryAttempts;

  private backoffUs(m: Message): number {
    const { retry } = this.variant;
    if (!retry || this.dueForDeadLetters(m)) return 0;
    return Math.min(retry.minS * US * 2 ** Math.min(m.attempts - 1, 40), retry.maxS * US);
  }

  /** A delivery failed at `at` (now for a nack, the deadline for an expiry). */
  private failed(m: Message, at: number): void {
    this.end(m);
    m.attempts++;
    m.availableAt = at + this.backoffUs(m);
  }

  private end(m: Message): void {
    this.ended.push({ ackId: m.lease!.ackId, message: m });
    m.lease = undefined;
  }

  private keyed = (m: Message) => this.variant.ordered && m.key !== '';
  private settled = (m: Message) => m.acked || m.deadLettered;

  /** The cascade behind a failed keyed delivery: later leases end, failing only if they expired themselves. */
  private cascade(m: Message): void {
    for (const other of this.keys.get(m.key)!.filter((o) => o.index > m.index && o.lease)) {
      if (other.lease!.deadline <= this.now) this.failed(other, other.lease!.deadline);
      else {
        this.end(other);
        other.availableAt = 0;
      }
    }
  }

  nacked(m: Message): void {
    this.failed(m, this.now);
    if (this.keyed(m)) this.cascade(m);
  }

  acked(m: Message): void {
    if (this.settled(m)) this.violations.push(`${m.id} settled twice`);
    m.acked = true;
    m.lease = undefined;
  }

  /** What a pull does first: every expired lease ends (the test's pulls are large enough to reach them all). */
  reclaimExpired(): void {
    for (const list of this.keys.values()) {
      for (const m of list) {
        if (!m.lease || m.lease.deadline > this.now) continue;
        this.failed(m, m.lease.deadline);
        if (this.keyed(m)) this.cascade(m);
      }
    }
  }

  expiredLeases(): number {
    return [...this.messages.values()].filter((m) => m.lease && m.lease.deadline <= this.now).length;
  }

  /**
   * What a pull may hand out now, by key ('' for unkeyed messages; a key's in the order it must
   * come), and what it may forward instead.
   */
  available(): { deliverable: Map<string, Message[]>; forwardable: Set<Message> } {
    const deliverable = new Map<string, Message[]>();
    const forwardable = new Set<Message>();
    for (const [key, list] of this.keys) {
      const waiting = list.filter((m) => !this.settled(m));
      if (!this.variant.ordered || key === '') {
        const ready = waiting.filter((m) => !m.lease && m.availableAt <= this.now);
        for (const m of ready) if (this.dueForDeadLetters(m)) forwardable.add(m);
        deliverable.set(
          key,
          ready.filter((m) => !this.dueForDeadLetters(m)),
        );
        continue;
      }
      if (waiting.some((m) => m.lease)) continue;
      const run: Message[] = [];
      for (const m of waiting) {
        if (m.availableAt > this.now) break;
        if (this.dueForDeadLetters(m)) {
          if (run.length === 0) forwardable.add(m);
          break;
        }
        run.push(m);
      }
      deliverable.set(key, run);
    }
    return { deliverable, forwardable };
  }

  /**
   * Checks a pull's answer and what it forwarded (read from the dead-letter topic) against what
   * was available, then records the new leases and the forwards.
   */
  pulled(received: Received[], forwarded: Received[], big: boolean, available = this.available()): void {
    const { deliverable, forwardable } = available;
    const nextOfKey = new Map<string, number>();
    const at = `t=${this.now / US}s`;
    for (const { ackId, deliveryAttempt, message } of received) {
      const m = this.messages.get(message.messageId);
      if (!m) {
        this.violations.push(`unknown message ${message.messageId} delivered`);
        continue;
      }
      const run = deliverable.get(m.key) ?? [];
      const position = run.indexOf(m);
      const expected = nextOfKey.get(m.key) ?? 0;
      if (position < 0 || (this.keyed(m) && position !== expected)) {
        this.violations.push(
          `${at}: ${m.id} (key "${m.key}" #${m.index}, attempts ${m.attempts}, available at ${m.availableAt / US}s, ${m.acked ? 'acked' : m.deadLettered ? 'forwarded' : m.lease ? 'leased' : 'waiting'}) delivered when not allowed`,
        );
      }
      const attempt = this.variant.maxDeliveryAttempts === undefined ? undefined : m.attempts + 1;
      if (deliveryAttempt !== attempt) {
        this.violations.push(`${at}: ${m.id} came with deliveryAttempt ${deliveryAttempt}, not ${attempt}`);
      }
      nextOfKey.set(m.key, expected + 1);
      m.publishTime ??= message.publishTime;
      m.lease = { ackId, deadline: this.now + ACK_DEADLINE_S * US };
    }
    for (const copy of forwarded) this.forwarded(copy, forwardable, at);
    if (!big) return;
    const deliveredIds = new Set(received.map((r) => r.message.messageId));
    for (const run of deliverable.values()) {
      for (const m of run)
        if (!deliveredIds.has(m.id)) this.violations.push(`${at}: ${m.id} deliverable, not delivered`);
    }
    for (const m of forwardable)
      if (!m.deadLettered) this.violations.push(`${at}: ${m.id} due for forwarding, not forwarded`);
  }

  /** A copy on the dead-letter topic: of a message that was due for it, once, with what it should carry. */
  private forwarded(copy: Received, forwardable: Set<Message>, at: string): void {
    const m = this.byText.get(unb64(copy.message.data));
    if (!m || !forwardable.has(m) || m.deadLettered) {
      this.violations.push(`${at}: ${m?.id ?? unb64(copy.message.data)} forwarded when not allowed (or again)`);
      return;
    }
    m.deadLettered = true;
    const expected = {
      data: b64(m.text),
      attributes: {
        CloudPubSubDeadLetterSourceDeliveryCount: String(m.attempts),
        CloudPubSubDeadLetterSourceSubscription: 'redelivery-sub',
        CloudPubSubDeadLetterSourceSubscriptionProject: 'p',
        CloudPubSubDeadLetterSourceTopicPublishTime: m.publishTime,
      },
      ...(m.key ? { orderingKey: m.key } : {}),
    };
    const { data, attributes, orderingKey } = copy.message;
    const actual = { data, attributes, ...(orderingKey ? { orderingKey } : {}) };
    if (JSON.stringify(actual) !== JSON.stringify(expected)) {
      this.violations.push(
        `${at}: ${m.id} forwarded as ${JSON.stringify(copy.message)}, not ${JSON.stringify(expected)}`,
      );
    }
  }

  held(): Message[] {
    return [...this.messages.values()].filter((m) => m.lease && m.lease.deadline > this.now);
  }
}

const VARIANTS: Variant[] = [
  { name: 'retry 1s..8s', retry: { minS: 1, maxS: 8 }, ordered: false, exactlyOnce: false },
  { name: 'retry 1s..8s, ordered', retry: { minS: 1, maxS: 8 }, ordered: true, exactlyOnce: false },
  { name: 'retry 2s..30s, exactly-once', retry: { minS: 2, maxS: 30 }, ordered: false, exactlyOnce: true },
  {
    name: 'retry 0.5s..5s, ordered + exactly-once',
    retry: { minS: 0.5, maxS: 5 },
    ordered: true,
    exactlyOnce: true,
  },
  { name: 'no policy, ordered', ordered: true, exactlyOnce: false },
  { name: 'dead letters after 5', maxDeliveryAttempts: 5, ordered: false, exactlyOnce: false },
  {
    name: 'dead letters after 5, retry 1s..4s, ordered',
    maxDeliveryAttempts: 5,
    retry: { minS: 1, maxS: 4 },
    ordered: true,
    exactlyOnce: false,
  },
  {
    name: 'dead letters after 6, retry 1s..30s, exactly-once',
    maxDeliveryAttempts: 6,
    retry: { minS: 1, maxS: 30 },
    ordered: false,
    exactlyOnce: true,
  },
  { name: 'dead letters after 5, ordered + exactly-once', maxDeliveryAttempts: 5, ordered: true, exactlyOnce: true },
];

async function run(t: Test, broker: TestBroker, clock: ManualClock, variant: Variant): Promise<void> {
  const random = randomFromEnv(t);
  const ok = async (method: string, url: string, body: unknown) => {
    const response = await broker.api(method, url, body);
    if (response.status !== 200)
      throw new Error(`${method} ${url}: ${response.status} ${JSON.stringify(response.body)}`);
    return response.body;
  };
  await ok('PUT', TOPIC, {});
  await ok('PUT', DEAD_LETTERS, {});
  await ok('PUT', DEAD_LETTER_SUB, { topic: 'projects/p/topics/redelivery-dead', enableMessageOrdering: true });
  await ok('PUT', SUB, {
    topic: 'projects/p/topics/redelivery',
    ackDeadlineSeconds: ACK_DEADLINE_S,
    enableMessageOrdering: variant.ordered,
    enableExactlyOnceDelivery: variant.exactlyOnce,
    ...(variant.retry
      ? { retryPolicy: { minimumBackoff: `${variant.retry.minS}s`, maximumBackoff: `${variant.retry.maxS}s` } }
      : {}),
    ...(variant.maxDeliveryAttempts
      ? {
          deadLetterPolicy: {
            deadLetterTopic: 'projects/p/topics/redelivery-dead',
            maxDeliveryAttempts: variant.maxDeliveryAttempts,
          },
        }
      : {}),
  });
  const model = new Model(variant);
  const advance = (seconds: number) => {
    clock.advanceSeconds(seconds);
    model.now += Math.round(seconds * US);
  };
  let published = 0;
  let nacks = 0;
  let backoffWaits = 0;

  const publish = async () => {
    const key = random.chance(0.3) ? '' : `key-${random.int(0, 3)}`;
    const texts = Array.from({ length: random.int(1, 3) }, () => `m${published++}`);
    const messages = texts.map((text) => ({ data: b64(text), ...(key ? { orderingKey: key } : {}) }));
    const body = await ok('POST', `${TOPIC}:publish`, { messages });
    model.published(body.messageIds, texts, key);
  };
  /** Every message on the dead-letter topic so far (acked there, so each comes once). */
  const readDeadLetters = async (): Promise<Received[]> => {
    const body = await ok('POST', `${DEAD_LETTER_SUB}:pull`, { maxMessages: BIG_PULL, returnImmediately: true });
    const copies: Received[] = body.receivedMessages ?? [];
    if (copies.length > 0) await ok('POST', `${DEAD_LETTER_SUB}:acknowledge`, { ackIds: copies.map((c) => c.ackId) });
    return copies;
  };
  const pull = async (big = random.chance(0.4)) => {
    const maxMessages = big ? BIG_PULL : Math.max(random.int(1, 4), model.expiredLeases());
    const body = await ok('POST', `${SUB}:pull`, { maxMessages, returnImmediately: true });
    model.reclaimExpired();
    const available = model.available();
    backoffWaits += [...model.messages.values()].some((m) => !m.acked && !m.lease && m.availableAt > model.now) ? 1 : 0;
    const received: Received[] = body.receivedMessages ?? [];
    model.pulled(received, await readDeadLetters(), big, available);
    return received;
  };
  /**
   * Acks some held messages: per key a prefix in order. With ordering and exactly-once an ack must
   * be of its key's oldest unsettled message (an earlier one whose lease expired, not reclaimed
   * by a pull yet, still comes first): so there only from the key's first unsettled message on.
   */
  const ack = async () => {
    const chosen: Message[] = [];
    const held = new Set(model.held());
    for (const [key, list] of model.keys) {
      const unsettled = list.filter((m) => !m.acked && !m.deadLettered);
      const first = unsettled.findIndex((m) => !held.has(m));
      const candidates =
        variant.ordered && variant.exactlyOnce && key !== ''
          ? unsettled.slice(0, first < 0 ? unsettled.length : first)
          : unsettled.filter((m) => held.has(m));
      chosen.push(...candidates.slice(0, random.int(0, candidates.length)));
    }
    if (chosen.length === 0) return;
    await ok('POST', `${SUB}:acknowledge`, { ackIds: chosen.map((m) => m.lease!.ackId) });
    for (const m of chosen) model.acked(m);
  };
  const nack = async () => {
    const m = random.pick(model.held());
    if (!m) return;
    await ok('POST', `${SUB}:modifyAckDeadline`, { ackIds: [m.lease!.ackId], ackDeadlineSeconds: 0 });
    nacks++;
    model.nacked(m);
  };
  const extend = async () => {
    const m = random.pick(model.held());
    if (!m) return;
    const seconds = random.int(ACK_DEADLINE_S, MAX_EXTENSION_S);
    await ok('POST', `${SUB}:modifyAckDeadline`, { ackIds: [m.lease!.ackId], ackDeadlineSeconds: seconds });
    m.lease!.deadline = model.now + seconds * US;
  };
  /** An ended delivery's ack ID (also of a message since forwarded) acks nothing: refused on exactly-once, ignored otherwise. */
  const ackStale = async () => {
    const stale = random.pick(model.ended.slice(-30));
    if (!stale) return;
    const response = await broker.api('POST', `${SUB}:acknowledge`, { ackIds: [stale.ackId] });
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
    advance(MAX_EXTENSION_S + (variant.retry?.maxS ?? 0) + 1);
    const received = await pull(true);
    const left = [...model.messages.values()].some((m) => !m.acked && !m.deadLettered && !m.lease);
    if (received.length === 0 && !left) break;
    if (received.length === 0) continue;
    // In order of delivery: per key, that is publish order.
    await ok('POST', `${SUB}:acknowledge`, { ackIds: received.map((r) => r.ackId) });
    for (const r of received) model.acked(model.messages.get(r.message.messageId)!);
  }

  const messages = [...model.messages.values()];
  const forwarded = messages.filter((m) => m.deadLettered).length;
  t.same(model.violations.slice(0, 5), [], 'every delivery and forward is one the model allows');
  t.ok(
    messages.length > 0 && messages.every((m) => m.acked !== m.deadLettered),
    'every message was acked or forwarded',
  );
  t.ok(nacks > 10, `nacks happened (${nacks})`);
  if (variant.retry) t.ok(backoffWaits > 10, `messages waited out backoffs (${backoffWaits} pulls saw some)`);
  if (variant.maxDeliveryAttempts) t.ok(forwarded > 0, `messages were forwarded (${forwarded} of ${messages.length})`);
  else t.equal(forwarded, 0, 'nothing was forwarded');
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
