// Streaming pull end to end across two broker PROCESSES sharing one Redis (the test standalone
// server, one KEY_PREFIX): 3 REST publishers post to a random process, 4 streaming subscribers
// (raw WebSocket) each connect to a random process, ack what they get, sometimes nack, and keep
// disconnecting and reconnecting (possibly to the other process).
//
//   1. exactly-once subscription, 3000 unkeyed messages: every message is acked successfully
//      exactly once (acknowledgeConfirmation), nothing is lost, and no message is delivered
//      while an earlier delivery of it is outstanding and unexpired;
//   2. ordered subscription (keys k0..k19), 3000 messages: each key's messages arrive in publish
//      order whoever gets them (a redelivery restarts at the key's oldest un-acked message and
//      goes on in order: a prefix may repeat, nothing is reordered or skipped), and all are acked.
//
// How disconnects stay within the time budget (streamAckDeadlineSeconds is 60, so a lease never
// runs out by itself during the run): a subscriber that leaves first lowers its stream's
// deadline to 10 s (frame {streamAckDeadlineSeconds: 10}), then
//   - graceful (2 in 3): nacks everything it holds, waits for a keep-alive round trip (frames are
//     handled in order, so the nacks have been applied: the broker currently drops frames still
//     queued when the socket closes, see 'closing a stream' in protocol.test.ts), repeats for what
//     arrived meanwhile, and closes. Messages that still arrive while the socket closes are kept and nacked through the
//     subscriber's next stream (ack IDs are valid on any stream, on any process).
//   - abrupt (1 in 3): shortens the deadline of everything it holds to 10 s (modifyAckDeadline), waits
//     for the round trip, and terminates the TCP connection without a close frame. What it held
//     comes back by lease expiry, 10 s later, on whichever stream asks next.
// Anything the server leased onto a socket that was already closing also has a 10 s lease (the
// deadline was lowered before), so the run never waits for a 60 s lease. Disconnects stop 10 s in,
// so the last expiries fall well inside the budget.
//
// Delivery generations are read from the broker's ack IDs (<uid>-<seq>-<gen>-<mac>): a delivery
// no client ever saw (leased onto a closing socket) shows up as a generation gap and is counted.
//
//   SEED=1234 npx tap test/streaming/multi-process.test.ts     # same random choices (timing still varies)
//   MESSAGES=6000 npx tap test/streaming/multi-process.test.ts

import { randomInt } from 'node:crypto';
import t, { type Test } from 'tap';
import { seededRandom } from '../helpers/random.ts';
import { call, startBrokerProcess, stopProcess, type BrokerProcess } from '../helpers/processes.ts';
import { testRedisUrl, uniquePrefix } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';
import { generationOf, hasMessages, isHeartbeat, sleep, StreamClient, type ReceivedMessage } from './_ws.ts';

const SEED = process.env.SEED ? Number(process.env.SEED) : randomInt(2 ** 31);
const MESSAGES = Number(process.env.MESSAGES ?? 3000);
const PUBLISHERS = 3;
const SUBSCRIBERS = 4;
const KEYS = 20;
const STREAM_DEADLINE_S = 60;
const LEAVING_DEADLINE_S = 10;
const DISRUPT_FOR_MS = 10_000;
/** Publishers pause up to this long between requests, so publishing spans several stream lifetimes. */
const PUBLISH_PAUSE_MS = { eod: 80, ordered: 30 };
const SCENARIO_BUDGET_MS = 40_000;
const NACK_PROBABILITY = 0.08;
const MAX_PROBLEMS = 40;
const P = 'mp-stream';

t.comment(`multi-process streaming test: SEED=${SEED} MESSAGES=${MESSAGES}`);

const rnd = seededRandom(SEED);
const b64 = (text: string) => Buffer.from(text).toString('base64');
const unb64 = (data: string | undefined) => Buffer.from(data ?? '', 'base64').toString();

/**
 * What every client has seen of every message: who holds its current delivery and until when it
 * certainly cannot have expired (a lower bound of the server's deadline), its generations, acks.
 */
class LeaseLedger {
  readonly problems: string[] = [];
  private readonly holder = new Map<string, { sub: number; ackId: string; boundMs: number }>();
  private readonly maxGeneration = new Map<string, number>();
  private readonly seen = new Map<string, number>();
  readonly ackIdToMessage = new Map<string, string>();
  readonly ackSent = new Set<string>();
  deliveries = 0;
  redeliveries = 0;
  unseenDeliveries = 0;

  problem(text: string): void {
    if (this.problems.length < MAX_PROBLEMS) this.problems.push(text);
  }

  delivered(sub: number, m: ReceivedMessage, deadlineS: number, now: number): void {
    const id = m.message.messageId;
    const generation = generationOf(m.ackId);
    this.deliveries++;
    this.ackIdToMessage.set(m.ackId, id);
    const current = this.holder.get(id);
    if (current && now < current.boundMs) {
      this.problem(
        `message ${id} delivered to subscriber ${sub} (gen ${generation}) while subscriber ${current.sub} holds an unexpired delivery (${current.ackId})`,
      );
    }
    if (this.ackSent.has(id))
      this.problem(`message ${id} delivered again (gen ${generation}, to ${sub}) after it was acked`);
    const seen = this.seen.get(id) ?? 0;
    const previous = this.maxGeneration.get(id) ?? 0;
    if (generation <= previous) this.problem(`message ${id}: generation ${generation} after ${previous}`);
    if (seen > 0) this.redeliveries++;
    this.unseenDeliveries += Math.max(0, generation - 1 - seen);
    this.seen.set(id, seen + 1);
    this.maxGeneration.set(id, Math.max(previous, generation));
    // The lease began before the frame arrived: allow 2 s of transit.
    this.holder.set(id, { sub, ackId: m.ackId, boundMs: now + deadlineS * 1000 - 2000 });
  }

  /** A nack was sent (or the delivery was revoked by one): a new delivery is fine from now on. */
  released(ackId: string): void {
    const id = this.ackIdToMessage.get(ackId)!;
    if (this.holder.get(id)?.ackId === ackId) this.holder.delete(id);
  }

  /** The deadline was shortened to `seconds` from `sentAt` (the server applies it later). */
  shortened(ackId: string, seconds: number, sentAt: number): void {
    const id = this.ackIdToMessage.get(ackId)!;
    const current = this.holder.get(id);
    if (current?.ackId === ackId) current.boundMs = Math.min(current.boundMs, sentAt + seconds * 1000);
  }

  ackSentFor(ackId: string): void {
    this.ackSent.add(this.ackIdToMessage.get(ackId)!);
  }

  holderOf(id: string) {
    return this.holder.get(id);
  }
}

interface Held {
  message: ReceivedMessage;
}

interface Policy {
  eod: boolean;
  /** Settles one frame's messages that are still held: returns the ack IDs to ack and to nack. */
  settle(sub: Subscriber, messages: ReceivedMessage[]): { ack: string[]; nack: string[]; drop: string[] };
  /** Checks on arrival (besides the lease ledger's). */
  arrived?(sub: number, message: ReceivedMessage): void;
  acked?(message: ReceivedMessage): void;
  /** Exactly-once: results of acks. */
  confirmed?(ackIds: string[], invalid: string[], temporary: string[], sub: Subscriber): void;
}

class Subscriber {
  client?: StreamClient;
  brokerIndex = -1;
  readonly held = new Map<string, Held>();
  deadlineS = STREAM_DEADLINE_S;
  leaving = false;
  readonly stats = {
    connects: 0,
    switched: 0,
    graceful: 0,
    abrupt: 0,
    closingArrivals: 0,
    acks: 0,
    nacks: 0,
    deliveredVia: [0, 0],
  };
  /** Nack IDs awaiting a modifyAckDeadlineConfirmation (exactly-once) — checked for validity. */
  private readonly expectNackOk = new Set<string>();

  constructor(
    readonly id: number,
    private readonly subscription: string,
    private readonly brokers: BrokerProcess[],
    private readonly ledger: LeaseLedger,
    private readonly policy: Policy,
    private readonly maxOutstanding: number,
  ) {}

  private url(index: number) {
    return `${this.brokers[index].url.replace('http', 'ws')}/v1/projects/${P}/subscriptions/${this.subscription}:streamingPull`;
  }

  async connect(): Promise<void> {
    const previous = this.brokerIndex;
    this.brokerIndex = rnd.int(0, this.brokers.length - 1);
    if (previous >= 0 && previous !== this.brokerIndex) this.stats.switched++;
    const client = new StreamClient(this.url(this.brokerIndex));
    await client.opened;
    this.client = client;
    this.leaving = false;
    this.deadlineS = STREAM_DEADLINE_S;
    this.stats.connects++;
    const brokerIndex = this.brokerIndex;
    client.onFrame = (frame) => {
      if (!isHeartbeat(frame)) client.discard((f) => f === frame);
      this.onFrame(client, brokerIndex, frame);
    };
    client.send({
      subscription: `projects/${P}/subscriptions/${this.subscription}`,
      streamAckDeadlineSeconds: STREAM_DEADLINE_S,
      clientId: `subscriber-${this.id}`,
      maxOutstandingMessages: this.maxOutstanding,
      protocolVersion: 1,
    });
    // Leftovers of the previous stream (arrived while it was closing): nack them through this one.
    if (this.held.size > 0) {
      const leftovers = [...this.held.keys()];
      this.sendNacks(client, leftovers);
    }
  }

  private onFrame(client: StreamClient, brokerIndex: number, frame: any): void {
    if (frame?.error) {
      this.ledger.problem(`subscriber ${this.id}: stream error ${JSON.stringify(frame.error)}`);
      return;
    }
    if (frame?.acknowledgeConfirmation) {
      const c = frame.acknowledgeConfirmation;
      this.policy.confirmed?.(c.ackIds, c.invalidAckIds, c.temporaryFailedAckIds, this);
      if (c.unorderedAckIds.length > 0)
        this.ledger.problem(`unordered ack IDs on an unordered subscription: ${c.unorderedAckIds}`);
    }
    if (frame?.modifyAckDeadlineConfirmation) {
      const c = frame.modifyAckDeadlineConfirmation;
      for (const ackId of [...c.invalidAckIds, ...c.temporaryFailedAckIds]) {
        if (this.expectNackOk.delete(ackId))
          this.ledger.problem(
            `subscriber ${this.id}: nack/modify of current delivery ${ackId} failed: ${JSON.stringify(c)}`,
          );
      }
      for (const ackId of c.ackIds) this.expectNackOk.delete(ackId);
    }
    if (!hasMessages(frame)) return;
    const now = Date.now();
    const messages: ReceivedMessage[] = frame.receivedMessages;
    this.stats.deliveredVia[brokerIndex] += messages.length;
    const closing = client !== this.client || !client.isOpen;
    if (closing) this.stats.closingArrivals += messages.length;
    for (const m of messages) {
      this.ledger.delivered(this.id, m, this.deadlineS, now);
      this.policy.arrived?.(this.id, m);
      this.held.set(m.ackId, { message: m });
    }
    if (closing || this.leaving) return;
    setTimeout(() => this.settleFrame(client, messages), rnd.int(0, 40));
  }

  private settleFrame(client: StreamClient, messages: ReceivedMessage[]): void {
    if (client !== this.client || this.leaving || !client.isOpen) return;
    const still = messages.filter((m) => this.held.has(m.ackId));
    if (still.length === 0) return;
    const { ack, nack, drop } = this.policy.settle(this, still);
    for (const ackId of drop) {
      this.held.delete(ackId);
      this.ledger.released(ackId);
    }
    if (ack.length > 0) {
      for (const ackId of ack) {
        const held = this.held.get(ackId)!;
        this.held.delete(ackId);
        this.ledger.ackSentFor(ackId);
        this.policy.acked?.(held.message);
      }
      this.stats.acks += ack.length;
      client.send({ ackIds: ack });
    }
    if (nack.length > 0) this.sendNacks(client, nack);
  }

  private sendNacks(client: StreamClient, ackIds: string[]): void {
    for (const ackId of ackIds) {
      this.held.delete(ackId);
      this.ledger.released(ackId);
      if (this.policy.eod) this.expectNackOk.add(ackId);
    }
    this.stats.nacks += ackIds.length;
    client.send({ modifyDeadlineAckIds: ackIds, modifyDeadlineSeconds: ackIds.map(() => 0) });
  }

  /** Leaves the stream, gracefully (nack all, close) or abruptly (shorten leases, terminate). */
  async leave(abrupt: boolean): Promise<void> {
    const client = this.client!;
    this.leaving = true;
    this.deadlineS = LEAVING_DEADLINE_S;
    client.send({ streamAckDeadlineSeconds: LEAVING_DEADLINE_S });
    // A pull the server started before handling the new deadline still leases for 60 s: let it
    // land (it is sent as soon as Redis answers) before settling what is held.
    await client.roundTrip();
    await sleep(100);
    const shortened = new Set<string>();
    for (let round = 0; round < 5; round++) {
      const todo = [...this.held.keys()].filter((ackId) => !shortened.has(ackId));
      if (abrupt) {
        if (todo.length > 0) {
          const sentAt = Date.now();
          for (const ackId of todo) {
            shortened.add(ackId);
            this.ledger.shortened(ackId, LEAVING_DEADLINE_S, sentAt);
            if (this.policy.eod) this.expectNackOk.add(ackId);
          }
          client.send({ modifyDeadlineAckIds: todo, modifyDeadlineSeconds: todo.map(() => LEAVING_DEADLINE_S) });
        }
      } else if (todo.length > 0) {
        this.sendNacks(client, todo);
      }
      await client.roundTrip();
      if ([...this.held.keys()].every((ackId) => shortened.has(ackId))) break;
    }
    if (abrupt) {
      this.stats.abrupt++;
      client.terminate();
      this.held.clear(); // a crashed client forgets; the leases run out (10 s)
    } else {
      this.stats.graceful++;
      client.ws.close(1000);
      await client.waitClose(5000).catch(() => client.terminate());
    }
  }

  /** Runs until `done()`: connect, live a while, leave, reconnect. */
  async run(done: () => boolean, disruptUntil: number): Promise<void> {
    while (!done()) {
      try {
        await this.connect();
      } catch (error) {
        this.ledger.problem(`subscriber ${this.id}: connect failed: ${(error as Error).message}`);
        await sleep(200);
        continue;
      }
      const lifetime = rnd.int(200, 1500);
      const until = Date.now() + lifetime;
      while (!done() && (Date.now() < until || Date.now() > disruptUntil) && this.client!.isOpen) await sleep(20);
      if (!this.client!.isOpen && !done()) {
        this.ledger.problem(
          `subscriber ${this.id}: stream closed by the server: ${JSON.stringify(this.client!.closeInfo)}`,
        );
        continue;
      }
      // Every third disconnect (staggered per subscriber) is abrupt.
      try {
        await this.leave(!done() && (this.stats.connects + this.id) % 3 === 0);
      } catch (error) {
        this.ledger.problem(`subscriber ${this.id}: leaving failed: ${(error as Error).message}`);
        this.client!.terminate();
      }
    }
  }
}

async function publishers(
  pauseMs: number,
  ledgerProblem: (text: string) => void,
  publishOne: (publisher: number) => Promise<number>,
) {
  let remaining = MESSAGES;
  const started = Date.now();
  await Promise.all(
    Array.from({ length: PUBLISHERS }, async (_, p) => {
      while (remaining > 0) {
        const sent = await publishOne(p);
        if (sent === 0) return;
        if (sent < 0) {
          ledgerProblem(`publisher ${p}: publish failed`);
          return;
        }
        remaining -= sent;
        await sleep(rnd.int(0, pauseMs));
      }
    }),
  );
  return Date.now() - started;
}

async function checkDrained(t: Test, brokers: BrokerProcess[], subscription: string) {
  for (const broker of brokers) {
    const pull = await call(broker.url, 'POST', `/v1/projects/${P}/subscriptions/${subscription}:pull`, {
      maxMessages: 1000,
      returnImmediately: true,
    });
    t.strictSame(pull, { status: 200, body: {} }, `a final pull on ${broker.url} finds nothing left`);
  }
}

const prefix = uniquePrefix('mp-stream');
const env = { REDIS_URL: testRedisUrl(), KEY_PREFIX: prefix, LOG_LEVEL: 'warn' };
const bootStarted = Date.now();
const brokers = await Promise.all([startBrokerProcess(env), startBrokerProcess(env)]);
t.comment(
  `2 broker processes ready in ${Date.now() - bootStarted} ms (${brokers.map((b) => b.url).join(', ')}, KEY_PREFIX ${prefix})`,
);
t.teardown(async () => {
  await Promise.all(brokers.map((b) => stopProcess(b.child)));
});
const pickBroker = () => rnd.pick(brokers);

async function setUp(topic: string, subscription: string, body: Record<string, unknown>) {
  const topicReply = await call(brokers[0].url, 'PUT', `/v1/projects/${P}/topics/${topic}`, {});
  const subReply = await call(brokers[1].url, 'PUT', `/v1/projects/${P}/subscriptions/${subscription}`, {
    topic: `projects/${P}/topics/${topic}`,
    ...body,
  });
  if (topicReply.status !== 200 || subReply.status !== 200)
    throw new Error(`set-up failed: ${JSON.stringify([topicReply, subReply])}`);
}

function report(t: Test, subscribers: Subscriber[], ledger: LeaseLedger, elapsedMs: number, publishMs: number) {
  const total = (f: (s: Subscriber) => number) => subscribers.reduce((sum, s) => sum + f(s), 0);
  t.ok(
    total((s) => s.stats.graceful) >= SUBSCRIBERS && total((s) => s.stats.abrupt) >= 2,
    `subscribers disconnected while messages flowed (${total((s) => s.stats.graceful)} graceful, ${total((s) => s.stats.abrupt)} abrupt)`,
  );
  t.ok(total((s) => s.stats.switched) > 0, `some reconnected to the other process (${total((s) => s.stats.switched)})`);
  t.ok(
    total((s) => s.stats.deliveredVia[0]) > 0 && total((s) => s.stats.deliveredVia[1]) > 0,
    'both processes delivered',
  );
  t.comment(
    `${elapsedMs} ms (publishing ${publishMs} ms): ${ledger.deliveries} deliveries (${ledger.redeliveries} redeliveries, ` +
      `${ledger.unseenDeliveries} deliveries no client saw), via process 0/1: ${total((s) => s.stats.deliveredVia[0])}/${total((s) => s.stats.deliveredVia[1])}; ` +
      `${total((s) => s.stats.connects)} connects (${total((s) => s.stats.switched)} to the other process), ${total((s) => s.stats.graceful)} graceful and ${total((s) => s.stats.abrupt)} abrupt disconnects, ` +
      `${total((s) => s.stats.closingArrivals)} messages arrived on closing sockets, ${total((s) => s.stats.acks)} acks, ${total((s) => s.stats.nacks)} nacks sent`,
  );
}

t.test('exactly-once subscription: every message acked exactly once, never delivered twice at a time', async (t) => {
  await setUp('eod-topic', 'eod-sub', { enableExactlyOnceDelivery: true, ackDeadlineSeconds: 60 });
  const ledger = new LeaseLedger();
  const published = new Set<string>();
  const successes = new Map<string, number>();
  const policy: Policy = {
    eod: true,
    settle: (_sub, messages) => {
      const ack: string[] = [];
      const nack: string[] = [];
      for (const m of messages) (rnd.chance(NACK_PROBABILITY) ? nack : ack).push(m.ackId);
      return { ack, nack, drop: [] };
    },
    confirmed: (ackIds, invalid, temporary, sub) => {
      for (const ackId of ackIds) {
        const id = ledger.ackIdToMessage.get(ackId)!;
        successes.set(id, (successes.get(id) ?? 0) + 1);
        ledger.released(ackId);
      }
      for (const ackId of invalid)
        ledger.problem(
          `subscriber ${sub.id}: ack of ${ackId} (message ${ledger.ackIdToMessage.get(ackId)}) confirmed invalid`,
        );
      for (const ackId of temporary) ledger.problem(`subscriber ${sub.id}: ack of ${ackId} failed temporarily`);
    },
  };
  const subscribers = Array.from(
    { length: SUBSCRIBERS },
    (_, i) => new Subscriber(i, 'eod-sub', brokers, ledger, policy, rnd.int(10, 100)),
  );
  const allAcked = () => published.size === MESSAGES && [...published].every((id) => successes.has(id));
  let stopped = false;
  const started = Date.now();
  const running = subscribers.map((s) => s.run(() => stopped || allAcked(), started + DISRUPT_FOR_MS));
  let counter = 0;
  const publishMs = await publishers(
    PUBLISH_PAUSE_MS.eod,
    (text) => ledger.problem(text),
    async (p) => {
      const n = Math.min(rnd.int(1, 20), MESSAGES - counter);
      if (n <= 0) return 0;
      counter += n;
      const messages = Array.from({ length: n }, (_, i) => ({ data: b64(`eod-${p}-${counter - n + i}`) }));
      const reply = await call(pickBroker().url, 'POST', `/v1/projects/${P}/topics/eod-topic:publish`, { messages });
      if (reply.status !== 200) return -1;
      for (const id of reply.body.messageIds) published.add(id);
      return n;
    },
  );
  const finished = await waitUntil(allAcked, SCENARIO_BUDGET_MS - (Date.now() - started), 50);
  const elapsed = Date.now() - started;
  if (!finished) {
    const missing = [...published].filter((id) => !successes.has(id));
    ledger.problem(
      `${missing.length} of ${published.size} messages never acked successfully, e.g. ${missing
        .slice(0, 10)
        .map((id) => `${id} (holder ${JSON.stringify(ledger.holderOf(id))})`)
        .join(', ')}`,
    );
  }
  stopped = true;
  await Promise.race([Promise.all(running), sleep(8000)]);
  for (const s of subscribers) s.client?.terminate();
  report(t, subscribers, ledger, elapsed, publishMs);

  t.equal(published.size, MESSAGES, `${MESSAGES} messages published`);
  t.ok(finished, `all acked within ${SCENARIO_BUDGET_MS} ms (${elapsed} ms)`);
  const twice = [...successes].filter(([, n]) => n > 1).map(([id]) => id);
  t.strictSame(twice, [], 'no message was acked successfully twice');
  const unknown = [...successes.keys()].filter((id) => !published.has(id));
  t.strictSame(unknown, [], 'no unknown message was delivered');
  t.strictSame(
    ledger.problems,
    [],
    'no delivery while another was outstanding, no failed ack or nack of a current delivery',
  );
  t.ok(ledger.redeliveries > 0, `nacks and disconnects caused redeliveries (${ledger.redeliveries})`);
  await checkDrained(t, brokers, 'eod-sub');
});

t.test('ordered subscription: each key in publish order, whoever receives it, all acked', async (t) => {
  await setUp('ord-topic', 'ord-sub', { enableMessageOrdering: true, ackDeadlineSeconds: 60 });
  const ledger = new LeaseLedger();
  const publishedPerKey = new Array<number>(KEYS).fill(0); // indexes handed out per key
  const ackedPerKey = Array.from({ length: KEYS }, () => new Set<number>());
  const ackPrefix = new Array<number>(KEYS).fill(0); // oldest un-acked index per key
  const expectedNext = new Array<number>(KEYS).fill(0);
  let acked = 0;
  let restarts = 0;
  const parse = (m: ReceivedMessage) => {
    const [key, index] = unb64(m.message.data).split(':');
    return { k: Number(key.slice(1)), key, index: Number(index) };
  };
  const policy: Policy = {
    eod: false,
    arrived: (sub, m) => {
      const { k, key, index } = parse(m);
      if (m.message.orderingKey !== key)
        ledger.problem(`message ${m.message.messageId}: orderingKey ${m.message.orderingKey}, data says ${key}`);
      if (index === expectedNext[k]) {
        expectedNext[k] = index + 1;
      } else if (index < expectedNext[k]) {
        if (index !== ackPrefix[k]) {
          ledger.problem(
            `key ${key}: subscriber ${sub} got index ${index} after ${expectedNext[k] - 1}; a redelivery must restart at the oldest un-acked index ${ackPrefix[k]}`,
          );
        }
        restarts++;
        expectedNext[k] = index + 1;
      } else {
        ledger.problem(
          `key ${key}: subscriber ${sub} got index ${index} but index ${expectedNext[k]} was never delivered before it (reordered or skipped)`,
        );
        expectedNext[k] = index + 1;
      }
    },
    acked: (m) => {
      const { k, index } = parse(m);
      if (!ackedPerKey[k].has(index)) acked++;
      ackedPerKey[k].add(index);
      while (ackedPerKey[k].has(ackPrefix[k])) ackPrefix[k]++;
    },
    // In order per key; a nack of a keyed message revokes the later ones of the key this
    // subscriber holds (the server delivers them again after it), so those are dropped, unacked.
    settle: (sub, messages) => {
      const ack: string[] = [];
      const nack: string[] = [];
      const drop: string[] = [];
      const nackedKeys = new Set<number>();
      const heldSorted = messages.slice().sort((a, b) => parse(a).index - parse(b).index);
      for (const m of heldSorted) {
        const { k } = parse(m);
        if (nackedKeys.has(k)) drop.push(m.ackId);
        else if (rnd.chance(NACK_PROBABILITY)) {
          nack.push(m.ackId);
          nackedKeys.add(k);
        } else ack.push(m.ackId);
      }
      // Later messages of a nacked key held from other frames are revoked as well.
      for (const [ackId, held] of sub.held) {
        if (
          nackedKeys.has(parse(held.message).k) &&
          !nack.includes(ackId) &&
          !drop.includes(ackId) &&
          !ack.includes(ackId)
        )
          drop.push(ackId);
      }
      return { ack, nack, drop };
    },
  };
  const subscribers = Array.from(
    { length: SUBSCRIBERS },
    (_, i) => new Subscriber(i, 'ord-sub', brokers, ledger, policy, rnd.int(10, 100)),
  );
  let total = 0;
  const allAcked = () => total === MESSAGES && acked === MESSAGES;
  let stopped = false;
  const started = Date.now();
  const running = subscribers.map((s) => s.run(() => stopped || allAcked(), started + DISRUPT_FOR_MS));
  // Each key belongs to one publisher, which publishes it sequentially: publish order is defined.
  const publishMs = await publishers(
    PUBLISH_PAUSE_MS.ordered,
    (text) => ledger.problem(text),
    async (p) => {
      const own = Array.from({ length: KEYS }, (_, k) => k).filter((k) => k % PUBLISHERS === p);
      const k = rnd.pick(own);
      const n = Math.min(rnd.int(1, 5), MESSAGES - total);
      if (n <= 0) return 0;
      total += n;
      const first = publishedPerKey[k];
      publishedPerKey[k] += n;
      const messages = Array.from({ length: n }, (_, i) => ({ data: b64(`k${k}:${first + i}`), orderingKey: `k${k}` }));
      const reply = await call(pickBroker().url, 'POST', `/v1/projects/${P}/topics/ord-topic:publish`, { messages });
      return reply.status === 200 ? n : -1;
    },
  );
  const finished = await waitUntil(allAcked, SCENARIO_BUDGET_MS - (Date.now() - started), 50);
  const elapsed = Date.now() - started;
  if (!finished) {
    const behind = ackPrefix.map((prefixIndex, k) => [k, prefixIndex, publishedPerKey[k]]).filter(([, a, p]) => a < p);
    ledger.problem(`not all acked: per key [key, oldest un-acked, published]: ${JSON.stringify(behind)}`);
  }
  stopped = true;
  await Promise.race([Promise.all(running), sleep(8000)]);
  for (const s of subscribers) s.client?.terminate();
  report(t, subscribers, ledger, elapsed, publishMs);
  t.comment(`ordered: ${restarts} key restarts (redelivered prefixes)`);

  t.equal(total, MESSAGES, `${MESSAGES} messages published on ${KEYS} keys`);
  t.ok(finished, `all acked within ${SCENARIO_BUDGET_MS} ms (${elapsed} ms)`);
  t.strictSame(ledger.problems, [], 'every key in publish order; no delivery while another was outstanding');
  t.ok(ledger.redeliveries > 0, `nacks and disconnects caused redeliveries (${ledger.redeliveries})`);
  await checkDrained(t, brokers, 'ord-sub');
});
