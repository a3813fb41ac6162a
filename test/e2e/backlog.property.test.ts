// Randomized model-based test of the queryable backlog (README.md, "Queryable backlog") on a
// ManualClock: random publishes (some scheduled for later, some with ordering keys), pulls,
// acks, nacks, deadline extensions and advances of time, on an unordered subscription with a
// retry policy and on an ordered one. A model knows every message's state (a state is where
// the broker stores it: a lease past its deadline stays LEASED, a backoff or delivery time that
// has passed stays BACKOFF or SCHEDULED, until a pull takes the message), its deliveries and the
// time that fits its state. Checked again and again:
//   - paging through the views (random page sizes and state conditions) returns exactly the
//     model's messages in those states, each once, with its state, time and (unordered)
//     deliveryAttempt; the counts, and the oldest unacknowledged message's publish time and
//     age, agree with the model;
//   - while the backlog changes between pages, every message that stayed in its state (with the
//     same time) from the first page to the last is returned exactly once, and no message that
//     stayed is returned twice.

import t, { type Test } from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { formatDuration, formatTimestampUs, parseTimestampUs } from '../../src/broker/durations.ts';
import { b64, startBroker, type TestBroker } from '../helpers/app.ts';
import { randomFromEnv } from '../helpers/random.ts';
import { redisTargets } from '../helpers/redis.ts';

const STEPS = 1500;
const ACK_DEADLINE_S = 10;
const BACKOFF_S = 5;
const US = 1_000_000;
const TOPIC = '/v1/projects/p/topics/backlog-model';

interface Variant {
  name: string;
  ordered: boolean;
  retry: boolean;
}

const VARIANTS: Variant[] = [
  { name: 'unordered, retry policy', ordered: false, retry: true },
  { name: 'ordered', ordered: true, retry: false },
];

interface Message {
  id: string;
  key: string;
  /** Deliveries so far. */
  delivered: number;
  lease?: { ackId: string; deadline: number };
  /** In the delayed set (unkeyed: scheduled or in backoff) until a pull after this time takes it. */
  delayedUntil?: number;
  /** Keyed, never delivered, published for this delivery time (µs): SCHEDULED until delivered. */
  scheduledAt?: number;
  acked: boolean;
  /** Its publish time (µs), as the broker stamped it. */
  publishedUs: number;
}

interface Expected {
  state: string;
  time?: string;
  attempt?: number;
}

class Model {
  now = 0;
  readonly messages = new Map<string, Message>();

  constructor(readonly variant: Variant) {}

  keyed(m: Message): boolean {
    return this.variant.ordered && m.key !== '';
  }

  live(): Message[] {
    return [...this.messages.values()].filter((m) => !m.acked);
  }

  held(): Message[] {
    return this.live().filter((m) => m.lease && m.lease.deadline > this.now);
  }

  expected(m: Message): Expected {
    // Keyed attempts also count deliveries cut short by the cascade differently: not compared.
    const attempt = this.keyed(m) ? undefined : m.delivered;
    if (m.lease) return { state: 'LEASED', time: formatTimestampUs(m.lease.deadline), attempt };
    if (m.scheduledAt !== undefined) return { state: 'SCHEDULED', time: formatTimestampUs(m.scheduledAt), attempt };
    if (m.delayedUntil !== undefined) {
      return { state: m.delivered === 0 ? 'SCHEDULED' : 'BACKOFF', time: formatTimestampUs(m.delayedUntil), attempt };
    }
    return { state: 'AVAILABLE', attempt };
  }

  /** Later leased messages of a keyed message's key lose their leases with it (the cascade). */
  revokeFrom(m: Message): void {
    const list = [...this.messages.values()].filter((other) => other.key === m.key && !other.acked);
    for (const other of list.slice(list.indexOf(m))) other.lease = undefined;
  }

  /** How many entries a pull must be allowed to settle before it leases: expired leases, due delayed entries. */
  duePullWork(): number {
    return this.live().filter(
      (m) => (m.lease && m.lease.deadline <= this.now) || (m.delayedUntil !== undefined && m.delayedUntil <= this.now),
    ).length;
  }

  /** What a pull does before it leases: due delayed entries to the ready list, expired leases ended. */
  beforePull(): void {
    for (const m of this.live()) {
      if (m.delayedUntil !== undefined && m.delayedUntil <= this.now) m.delayedUntil = undefined;
    }
    const expired = this.live()
      .filter((m) => m.lease && m.lease.deadline <= this.now)
      .sort((a, b) => a.lease!.deadline - b.lease!.deadline);
    for (const m of expired) {
      if (!m.lease) continue; // revoked by an earlier message's cascade
      if (this.keyed(m)) {
        this.revokeFrom(m);
        continue;
      }
      const availableAt = m.lease.deadline + (this.variant.retry ? BACKOFF_S * US : 0);
      m.lease = undefined;
      if (availableAt > this.now) m.delayedUntil = availableAt;
    }
  }
}

async function run(t: Test, broker: TestBroker, clock: ManualClock, variant: Variant): Promise<void> {
  const random = randomFromEnv(t);
  const sub = `/v1/projects/p/subscriptions/backlog-model-${variant.ordered ? 'ordered' : 'plain'}`;
  const ok = async (method: string, url: string, body?: unknown) => {
    const response = await broker.api(method, url, body);
    if (response.status !== 200)
      throw new Error(`${method} ${url}: ${response.status} ${JSON.stringify(response.body)}`);
    return response.body;
  };
  await ok('PUT', TOPIC, {});
  await ok('PUT', sub, {
    topic: 'projects/p/topics/backlog-model',
    ackDeadlineSeconds: ACK_DEADLINE_S,
    enableMessageOrdering: variant.ordered,
    ...(variant.retry ? { retryPolicy: { minimumBackoff: `${BACKOFF_S}s`, maximumBackoff: `${BACKOFF_S}s` } } : {}),
  });
  const model = new Model(variant);
  const advance = (seconds: number) => {
    clock.advanceSeconds(seconds);
    model.now += Math.round(seconds * US);
  };
  clock.advanceSeconds(0);
  model.now = Number(clock.scriptTime());

  const publish = async () => {
    const key = random.chance(0.4) ? '' : `key-${random.int(0, 2)}`;
    const delay = random.chance(0.2) ? random.int(1, 30) : 0;
    const count = random.int(1, 3);
    const messages = Array.from({ length: count }, () => ({
      data: b64('x'),
      ...(key ? { orderingKey: key } : {}),
      ...(delay ? { deliveryDelay: `${delay}s` } : {}),
    }));
    const body = await ok('POST', `${TOPIC}:publish`, { messages });
    for (const id of body.messageIds as string[]) {
      const stored = await ok('GET', `${TOPIC}/messages/${id}`);
      const publishedUs = parseTimestampUs(stored.message.publishTime, 'publishTime');
      const m: Message = { id, key, delivered: 0, acked: false, publishedUs };
      if (delay && model.keyed(m)) m.scheduledAt = model.now + delay * US;
      else if (delay) m.delayedUntil = model.now + delay * US;
      model.messages.set(id, m);
    }
  };
  const pull = async () => {
    const maxMessages = Math.min(1000, random.int(1, 4) + model.duePullWork());
    const body = await ok('POST', `${sub}:pull`, { maxMessages, returnImmediately: true });
    model.beforePull();
    for (const r of body.receivedMessages ?? []) {
      const m = model.messages.get(r.message.messageId)!;
      m.lease = { ackId: r.ackId, deadline: model.now + ACK_DEADLINE_S * US };
      m.delivered++;
      m.delayedUntil = undefined;
      m.scheduledAt = undefined;
    }
  };
  const ack = async () => {
    const chosen = model.held().filter(() => random.chance(0.5));
    if (chosen.length === 0) return;
    await ok('POST', `${sub}:acknowledge`, { ackIds: chosen.map((m) => m.lease!.ackId) });
    for (const m of chosen) m.acked = true;
  };
  const nack = async () => {
    const m = random.pick(model.held());
    if (!m) return;
    await ok('POST', `${sub}:modifyAckDeadline`, { ackIds: [m.lease!.ackId], ackDeadlineSeconds: 0 });
    if (model.keyed(m)) {
      model.revokeFrom(m);
      return;
    }
    m.lease = undefined;
    if (variant.retry) m.delayedUntil = model.now + BACKOFF_S * US;
  };
  const extend = async () => {
    const m = random.pick(model.held());
    if (!m) return;
    const seconds = random.int(ACK_DEADLINE_S, 30);
    await ok('POST', `${sub}:modifyAckDeadline`, { ackIds: [m.lease!.ackId], ackDeadlineSeconds: seconds });
    m.lease!.deadline = model.now + seconds * US;
  };
  const step = async () => {
    if (random.chance(0.2)) advance(random.int(1, 40) / 4);
    else await random.pick([publish, publish, pull, pull, ack, nack, extend])();
  };

  const STATES = ['AVAILABLE', 'LEASED', 'SCHEDULED', 'BACKOFF'];
  /** One page of the view, as (id, state, time, attempt) rows. */
  const page = async (states: string[], pageSize: number, token: string) => {
    const query = new URLSearchParams({ pageSize: String(pageSize), view: 'BASIC' });
    if (states.length > 0) query.set('state', states.join(','));
    if (token) query.set('pageToken', token);
    const body = await ok('GET', `${sub}/messages?${query}`);
    const rows = (body.messages ?? []).map((item: any) => ({
      id: item.message.messageId as string,
      expected: {
        state: item.state,
        time: item.leaseExpireTime ?? item.deliveryTime ?? item.backoffEndTime,
        attempt: item.deliveryAttempt,
      } as Expected,
    }));
    return { rows, next: (body.nextPageToken ?? '') as string };
  };
  const describe = (e: Expected, keyed: boolean) => JSON.stringify({ ...e, attempt: keyed ? undefined : e.attempt });

  let checks = 0;
  let interleaved = 0;
  let stayedChecked = 0;
  const seenStates = new Set<string>();
  const violations: string[] = [];

  /** Pages through a view with nothing changing: exactly the model, each once. */
  const checkStill = async () => {
    const states = STATES.filter(() => random.chance(0.5));
    const wanted = new Set(states.length > 0 ? states : STATES);
    const pageSize = random.int(1, 7);
    const returned = new Map<string, string>();
    let token = '';
    let pages = 0;
    do {
      const { rows, next } = await page(states, pageSize, token);
      if (rows.length > pageSize) violations.push(`a page of ${rows.length} > ${pageSize}`);
      for (const { id, expected } of rows) {
        if (returned.has(id)) violations.push(`${id} returned twice`);
        const m = model.messages.get(id);
        returned.set(id, describe(expected, m ? model.keyed(m) : false));
      }
      token = next;
    } while (token && ++pages < 2000);
    const want = new Map(
      model
        .live()
        .filter((m) => wanted.has(model.expected(m).state))
        .map((m) => [m.id, describe(model.expected(m), model.keyed(m))]),
    );
    for (const [id, row] of want) {
      seenStates.add(JSON.parse(row).state);
      if (returned.get(id) !== row) violations.push(`${id}: model ${row}, view ${returned.get(id) ?? 'missing'}`);
    }
    for (const id of returned.keys()) if (!want.has(id)) violations.push(`${id} returned, not in the model`);
    const counts = await ok('GET', `${sub}/backlog`);
    const live = model.live();
    const leased = live.filter((m) => m.lease).length;
    const expectedCounts: Record<string, unknown> = {
      unackedMessageCount: live.length,
      leasedMessageCount: leased,
      forwardingMessageCount: 0,
      waitingMessageCount: live.length - leased,
    };
    if (live.length > 0) {
      const oldestUs = Math.min(...live.map((m) => m.publishedUs));
      expectedCounts.oldestUnackedPublishTime = formatTimestampUs(oldestUs);
      expectedCounts.oldestUnackedMessageAge = formatDuration(Math.max(0, model.now - oldestUs) / US);
    }
    if (JSON.stringify(counts) !== JSON.stringify(expectedCounts)) {
      violations.push(`counts ${JSON.stringify(counts)}, model ${JSON.stringify(expectedCounts)}`);
    }
    checks++;
  };

  /** Pages through every state while the backlog changes between pages. */
  const checkWhileChanging = async () => {
    const pageSize = random.int(1, 5);
    const start = new Map(model.live().map((m) => [m.id, describe(model.expected(m), model.keyed(m))]));
    const changed = new Set<string>();
    const note = () => {
      const now = new Map(model.live().map((m) => [m.id, describe(model.expected(m), model.keyed(m))]));
      for (const [id, row] of start) if (now.get(id) !== row) changed.add(id);
    };
    const returned = new Map<string, number>();
    let token = '';
    let pages = 0;
    do {
      const { rows, next } = await page([], pageSize, token);
      for (const { id } of rows) returned.set(id, (returned.get(id) ?? 0) + 1);
      token = next;
      if (random.chance(0.6)) {
        await step();
        note();
      }
    } while (token && ++pages < 2000);
    for (const [id] of start) {
      if (changed.has(id)) continue;
      stayedChecked++;
      if (returned.get(id) !== 1)
        violations.push(`${id} stayed ${start.get(id)} but was returned ${returned.get(id) ?? 0} times`);
    }
    interleaved++;
  };

  for (let i = 0; i < STEPS && violations.length === 0; i++) {
    await step();
    if (random.chance(0.1)) await checkStill();
    if (random.chance(0.04)) await checkWhileChanging();
  }
  await checkStill();
  t.same(violations.slice(0, 5), [], 'every page agrees with the model');
  t.ok(checks > 10 && interleaved > 3, `views checked (${checks} still, ${interleaved} while changing)`);
  t.ok(stayedChecked > 20, `messages that stayed in their state while paging (${stayedChecked})`);
  const expectedStates = variant.retry ? STATES : ['AVAILABLE', 'LEASED', 'SCHEDULED'];
  t.same([...seenStates].sort(), [...expectedStates].sort(), 'every state was met');
}

for (const target of redisTargets()) {
  for (const variant of VARIANTS) {
    t.test(`${variant.name} on ${target.name}`, async (t) => {
      const clock = new ManualClock();
      const broker = await startBroker(t, { target, clock, name: 'backlog-model' });
      await run(t, broker, clock, variant);
    });
  }
}
