// Regions end to end, with real processes: three redis-servers (one per region, append-only with
// an fsync before every answer) and three broker processes, one per region (REGION/REGIONS).
// Publishers post batches through random regions; subscribers pull through a random region,
// move to another one between pulls, and acknowledge through a random region (often not the
// one that stores the message, nor the one they pulled from).
//
//   1. exactly-once subscription, MESSAGES messages, "random disconnects": a subscriber sometimes
//      abandons what it pulled (a crash: the messages come back when the 10 s lease runs out),
//      sometimes nacks, once holds a batch past its deadline and acks it late (must fail). From
//      the broker's answers alone: every published message is acked successfully exactly once,
//      nothing twice, nothing lost, nothing unknown, and no message is delivered while an earlier
//      delivery of it is outstanding and unexpired. /metrics shows 0 unacked in every region.
//      Alongside, a probe subscription nobody else pulls checks that an expired lease that was not
//      handed out again refuses its ack, and that the message then comes back.
//   2. the same workload on a fresh topic, and one region's redis-server SIGKILLed in the middle
//      for DOWN_MS: the other regions keep taking publishes (every one answered 200) and keep
//      delivering; the dead region's endpoint answers 503 (publish, pull, ack, admin calls,
//      /readyz); its messages are not served by anyone while it is down; a subscription created
//      and topic labels changed through a live region meanwhile reach the dead region once it is
//      back; acks of its messages fail with TRANSIENT_FAILURE_OTHER while it is down and are
//      retried; after the restart (same port, same data) everything published anywhere, including
//      what the dead region stored before the kill, is acked exactly once.
//
// How the checks avoid false alarms (all times are this process's clock, which Redis's TIME
// shares on one machine; the broker leases with the storing Redis's TIME):
//   - a delivery's lease starts somewhere between the pull's send and its answer, so its server
//     deadline is at least pull.sentAt + 10 s and at most pull.recvAt + 10 s;
//   - two deliveries of one message are a definite violation when both pulls fit in a window
//     shorter than the deadline (minus MARGIN_MS), unless the earlier one was nacked before the
//     later pull answered (plus MARGIN_MS);
//   - an ack sent more than 10 s + MARGIN_MS after its pull answered must not succeed (the lease
//     had expired); an ack answered before pull.sentAt + 10 s - MARGIN_MS must not fail
//     permanently (it was the current, unexpired delivery: nothing else can have ended it);
//   - ack IDs carry the delivery generation: after a successful ack of generation g no
//     delivery of a generation above g may exist, nor may any pull sent after that ack answered
//     return the message;
//   - requests in flight at the very moment of the SIGKILL are ambiguous: Redis may have applied
//     and fsynced them without the broker getting the answer. A publish that failed then may
//     still show up (with an ID of the killed region, never another); an ack that failed then
//     may have taken effect (its retry then fails permanently and the message never comes back).
//     Those are counted separately and only allowed for that instant.
//
//   SEED=1234 npx tap test/regions/multi-region-processes.test.ts     # same random choices (timing still varies)
//   MESSAGES=6000 KILL_REGION=asia-east1 npx tap test/regions/multi-region-processes.test.ts

import { randomInt } from 'node:crypto';
import t, { type Test } from 'tap';
import { b64, unb64 } from '../helpers/app.ts';
import { seededRandom } from '../helpers/random.ts';
import { startBrokerProcess, stopProcess, type BrokerProcess } from '../helpers/processes.ts';
import { killAllRedisProcesses, startRedisProcess } from '../helpers/redis-process.ts';
import { uniquePrefix } from '../helpers/redis.ts';
import { unackedByRegion as parseUnackedByRegion } from '../helpers/metrics.ts';
import { waitUntil } from '../helpers/wait.ts';

const SEED = process.env.SEED ? Number(process.env.SEED) : randomInt(2 ** 31);
const MESSAGES = Number(process.env.MESSAGES ?? 3000);
/** In name order the arbiter of control-plane writes is asia-east1, then europe-west1. */
const REGION_NAMES = ['us-east1', 'europe-west1', 'asia-east1'];
const rnd = seededRandom(SEED);
const randomRegion = () => rnd.int(0, REGION_NAMES.length - 1);
const KILLED = process.env.KILL_REGION ? REGION_NAMES.indexOf(process.env.KILL_REGION) : randomRegion();
if (KILLED < 0) throw new Error(`KILL_REGION must be one of ${REGION_NAMES.join(', ')}`);

const P = 'mr';
const PUBLISHERS = 3;
const SUBSCRIBERS = 4;
const ACK_DEADLINE_S = 10;
const DEADLINE_MS = ACK_DEADLINE_S * 1000;
/** Slack for everything compared across this process's clock and Redis's TIME. */
const MARGIN_MS = 1000;
const ABANDON_PROBABILITY = 0.05;
const NACK_PROBABILITY = 0.03;
const MOVE_PROBABILITY = 0.5;
/** Publishing is paced to spread over this long. */
const PUBLISH_SPAN_MS = { s1: 10_000, s2: 18_000 };
const KILL_AFTER_MS = 5_000;
const DOWN_MS = 7_000;
/** From the first publish until everything is acked. */
const BUDGET_MS = { s1: 45_000, s2: 65_000 };
/** A pull with returnImmediately false waits PULL_WAIT_SECONDS (1 s): far longer means it hung. */
const SLOW_PULL_MS = 5_000;
const MAX_PROBLEMS = 40;

t.comment(`multi-region processes: SEED=${SEED} MESSAGES=${MESSAGES} KILL_REGION=${REGION_NAMES[KILLED]}`);

const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, Math.max(0, ms)));
const subPath = (sub: string) => `/v1/projects/${P}/subscriptions/${sub}`;
const topicPath = (topic: string) => `/v1/projects/${P}/topics/${topic}`;

// ---------------------------------------------------------------- processes

const redises = await Promise.all(REGION_NAMES.map((name) => startRedisProcess(t, `mr-redis-${name}`)));
const REGIONS = REGION_NAMES.map((name, i) => `${name}=${redises[i].url}`).join(',');
const KEY_PREFIX = uniquePrefix('multi-region');
const bootStarted = Date.now();
const brokerStarts = await Promise.allSettled(
  REGION_NAMES.map((name) => startBrokerProcess({ REGION: name, REGIONS, KEY_PREFIX, PULL_WAIT_SECONDS: '1' })),
);
const brokers: BrokerProcess[] = brokerStarts.flatMap((result) =>
  result.status === 'fulfilled' ? [result.value] : [],
);
/** Nothing outlives this process, even when tap times it out (teardowns do not run then). */
const killBrokers = () => {
  for (const { child } of brokers) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
};
const killEverything = () => {
  killBrokers();
  killAllRedisProcesses();
};
process.on('exit', killBrokers); // redis-process.ts kills its redis-servers on exit itself
t.on('timeout', killEverything);
const failedStart = brokerStarts.find((result) => result.status === 'rejected');
if (failedStart) {
  killEverything();
  throw (failedStart as PromiseRejectedResult).reason;
}
t.teardown(async () => {
  await Promise.all(brokers.map(({ child }) => stopProcess(child, 'SIGTERM', 3000)));
});
t.comment(
  `3 regions ready in ${Date.now() - bootStarted} ms: ${REGION_NAMES.map((name, i) => `${name} ${brokers[i].url} (redis ${redises[i].port})`).join(', ')}`,
);

interface Reply {
  status: number;
  body: any;
  text: string;
  sentAt: number;
  recvAt: number;
}

/** JSON over HTTP to one region's endpoint. Network failures and timeouts come back as status 0. */
async function http(region: number, method: string, path: string, body?: unknown, timeoutMs = 15_000): Promise<Reply> {
  const sentAt = Date.now();
  try {
    const response = await fetch(`${brokers[region].url}${path}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await response.text();
    let parsed: any;
    try {
      parsed = text ? JSON.parse(text) : undefined;
    } catch {
      parsed = undefined;
    }
    return { status: response.status, body: parsed, text, sentAt, recvAt: Date.now() };
  } catch (error) {
    return { status: 0, body: undefined, text: String((error as Error).message), sentAt, recvAt: Date.now() };
  }
}

const brief = (reply: Reply) => `${reply.status} ${reply.text.slice(0, 300)}`;

/** Unacked counts of one subscription by region, as one endpoint's /metrics reports them. */
async function unackedByRegion(region: number, sub: string): Promise<Map<string, number> | undefined> {
  const reply = await http(region, 'GET', '/metrics');
  return reply.status === 200 ? parseUnackedByRegion(reply.text, `projects/${P}/subscriptions/${sub}`) : undefined;
}

const allZero = (counts: Map<string, number> | undefined) =>
  counts !== undefined && counts.size === REGION_NAMES.length && REGION_NAMES.every((name) => counts.get(name) === 0);

/** Region name and delivery generation from an ack ID ("<region>.<uid>-<seq>-<gen>-<tag>"). */
const ACK_ID = /^([a-z][a-z0-9-]{0,62})\.([0-9a-f]{16})-([0-9a-z]{1,13})-([0-9a-z]{1,10})-([A-Za-z0-9_-]{22})$/;
function parseAckId(ackId: string): { region: string; generation: number } | undefined {
  const match = ACK_ID.exec(ackId);
  return match ? { region: match[1], generation: parseInt(match[4], 36) } : undefined;
}

/** "<region>-<seq>" */
function regionOfMessageId(id: string): string {
  const match = /^(.+)-(\d+)$/.exec(id);
  return match ? match[1] : '';
}

// ---------------------------------------------------------------- the ledger

type Outcome = 'ok' | 'permanent' | 'transient' | 'unavailable' | 'other';

interface PublishRecord {
  by: string;
  via: number;
  sentAt: number;
  recvAt: number;
  status: number;
  errorStatus?: string;
  payloads: string[];
  ids: string[];
  text: string;
}

interface PullRecord {
  sub: string;
  via: number;
  sentAt: number;
  recvAt: number;
  status: number;
  errorStatus?: string;
  text: string;
}

interface DeliveryRecord {
  sub: string;
  via: number;
  sentAt: number;
  recvAt: number;
  ackId: string;
  messageId: string;
  payload: string;
  /** Region that stores the message (from the ack ID), as an index; -1 if unknown. */
  stored: number;
  generation: number;
}

interface Attempt {
  kind: 'ack' | 'nack';
  via: number;
  sentAt: number;
  recvAt: number;
  outcome: Outcome;
  status: number;
  late: boolean;
  text: string;
}

/** The SIGKILL of one region's Redis; times stay Infinity until they happened. */
interface Outage {
  region: number;
  killAt: number;
  killExitAt: number;
  restartAt: number;
  /** The dead region's /readyz answered 200 again. */
  readyAt: number;
  /** Every endpoint's /readyz reports the region synced. */
  recoveredAt: number;
}

class Scenario {
  private readonly problemList: { category: string; text: string }[] = [];
  private problemCount = 0;
  readonly publishes: PublishRecord[] = [];
  readonly pulls: PullRecord[] = [];
  readonly deliveries: DeliveryRecord[] = [];
  readonly deliveryOf = new Map<string, DeliveryRecord>();
  readonly deliveriesOf = new Map<string, DeliveryRecord[]>();
  readonly attempts = new Map<string, Attempt[]>();
  /** Online bookkeeping (the analysis redoes it from the records). */
  readonly okIds = new Set<string>();
  readonly successes = new Map<string, number>();
  readonly stats = { abandoned: 0, abandonedBatches: 0, nacked: 0, lateAckIds: 0, retries: 0 };
  outage?: Outage;
  /** Abandons and late acks only while this is set (cleared when publishing is over). */
  disrupt = true;
  private payloadCounter = 0;

  constructor(
    readonly name: string,
    readonly topic: string,
    readonly sub: string,
  ) {}

  problem(category: string, text: string): void {
    this.problemCount++;
    if (this.problemList.filter((p) => p.category === category).length < MAX_PROBLEMS)
      this.problemList.push({ category, text });
  }

  problems(category: string): string[] {
    return this.problemList.filter((p) => p.category === category).map((p) => p.text);
  }

  get anyProblem(): boolean {
    return this.problemCount > 0;
  }

  async publish(by: string, via: number, count: number): Promise<PublishRecord> {
    const payloads = Array.from({ length: count }, () => `${this.name}:${by}:${this.payloadCounter++}`);
    const reply = await http(via, 'POST', `${topicPath(this.topic)}:publish`, {
      messages: payloads.map((p) => ({ data: b64(p), attributes: { by } })),
    });
    const record: PublishRecord = {
      by,
      via,
      sentAt: reply.sentAt,
      recvAt: reply.recvAt,
      status: reply.status,
      errorStatus: reply.body?.error?.status,
      payloads,
      ids: reply.status === 200 && Array.isArray(reply.body?.messageIds) ? reply.body.messageIds : [],
      text: reply.text.slice(0, 300),
    };
    this.publishes.push(record);
    if (reply.status === 200) for (const id of record.ids) this.okIds.add(id);
    return record;
  }

  /** One pull; the messages, or undefined if it failed. */
  async pull(
    sub: string,
    via: number,
    maxMessages: number,
    returnImmediately = false,
  ): Promise<DeliveryRecord[] | undefined> {
    const reply = await http(via, 'POST', `${subPath(this.sub)}:pull`, { maxMessages, returnImmediately });
    const received: any[] = reply.status === 200 ? (reply.body?.receivedMessages ?? []) : [];
    this.pulls.push({
      sub,
      via,
      sentAt: reply.sentAt,
      recvAt: reply.recvAt,
      status: reply.status,
      errorStatus: reply.body?.error?.status,
      text: reply.status === 200 ? '' : reply.text.slice(0, 300),
    });
    if (reply.status !== 200) return undefined;
    return received.map((m) => {
      const parsed = parseAckId(m.ackId);
      const delivery: DeliveryRecord = {
        sub,
        via,
        sentAt: reply.sentAt,
        recvAt: reply.recvAt,
        ackId: m.ackId,
        messageId: m.message?.messageId,
        payload: unb64(m.message?.data),
        stored: parsed ? REGION_NAMES.indexOf(parsed.region) : -1,
        generation: parsed?.generation ?? 0,
      };
      this.deliveries.push(delivery);
      if (this.deliveryOf.has(m.ackId)) this.problem('delivery', `ack ID ${m.ackId} handed out twice`);
      this.deliveryOf.set(m.ackId, delivery);
      const list = this.deliveriesOf.get(delivery.messageId) ?? [];
      list.push(delivery);
      this.deliveriesOf.set(delivery.messageId, list);
      return delivery;
    });
  }

  /** Acknowledges; returns the ack IDs to try again (transient failures). */
  async ack(via: number, ackIds: string[], late = false): Promise<string[]> {
    const reply = await http(via, 'POST', `${subPath(this.sub)}:acknowledge`, { ackIds });
    const outcomes = this.record('ack', via, ackIds, reply, late);
    const again: string[] = [];
    for (const [ackId, outcome] of outcomes) {
      if (outcome === 'ok') {
        const id = this.deliveryOf.get(ackId)?.messageId ?? '?';
        this.successes.set(id, (this.successes.get(id) ?? 0) + 1);
      } else if (outcome !== 'permanent') again.push(ackId);
    }
    return again;
  }

  /** Nacks (modifyAckDeadline 0); a failed nack is not retried: the lease runs out instead. */
  async nack(via: number, ackIds: string[]): Promise<void> {
    const reply = await http(via, 'POST', `${subPath(this.sub)}:modifyAckDeadline`, { ackIds, ackDeadlineSeconds: 0 });
    this.record('nack', via, ackIds, reply, false);
  }

  /** The per-ack-ID outcome of an acknowledge or modifyAckDeadline answer. */
  private record(
    kind: Attempt['kind'],
    via: number,
    ackIds: string[],
    reply: Reply,
    late: boolean,
  ): Map<string, Outcome> {
    const outcomes = new Map<string, Outcome>();
    const detail = reply.body?.error?.details?.[0];
    if (reply.status === 200 && reply.body && Object.keys(reply.body).length === 0) {
      for (const ackId of ackIds) outcomes.set(ackId, 'ok');
    } else if (
      reply.status === 400 &&
      reply.body?.error?.status === 'INVALID_ARGUMENT' &&
      detail?.['@type'] === 'type.googleapis.com/google.rpc.ErrorInfo' &&
      detail?.reason === 'EXACTLY_ONCE_ACKID_FAILURE' &&
      detail?.metadata &&
      typeof detail.metadata === 'object'
    ) {
      const metadata = detail.metadata as Record<string, string>;
      if (Object.keys(metadata).length === 0)
        this.problem('ack', `${kind} answered 400 without naming a failed ack ID`);
      for (const key of Object.keys(metadata)) {
        if (!ackIds.includes(key)) this.problem('ack', `${kind} answer names an ack ID that was not sent: ${key}`);
      }
      for (const ackId of ackIds) {
        const code = metadata[ackId];
        if (code === undefined) outcomes.set(ackId, 'ok');
        else if (code === 'PERMANENT_FAILURE_INVALID_ACK_ID') outcomes.set(ackId, 'permanent');
        else if (code === 'TRANSIENT_FAILURE_OTHER') outcomes.set(ackId, 'transient');
        else {
          outcomes.set(ackId, 'other');
          this.problem('ack', `${kind} of ${ackId}: unexpected failure code ${code}`);
        }
      }
    } else if (reply.status === 503 && reply.body?.error?.status === 'UNAVAILABLE') {
      for (const ackId of ackIds) outcomes.set(ackId, 'unavailable');
    } else {
      for (const ackId of ackIds) outcomes.set(ackId, 'other');
    }
    for (const [ackId, outcome] of outcomes) {
      const list = this.attempts.get(ackId) ?? [];
      list.push({
        kind,
        via,
        sentAt: reply.sentAt,
        recvAt: reply.recvAt,
        outcome,
        status: reply.status,
        late,
        text: outcome === 'ok' ? '' : reply.text.slice(0, 300),
      });
      this.attempts.set(ackId, list);
    }
    return outcomes;
  }

  /** Sent before the SIGKILL took effect and answered after it was sent: Redis may have applied it. */
  inFlightAtKill(request: { sentAt: number; recvAt: number }): boolean {
    const o = this.outage;
    return o !== undefined && request.sentAt < o.killExitAt && request.recvAt >= o.killAt;
  }

  /** An ack attempt whose failure may hide an applied ack (see the header). */
  ambiguous(delivery: DeliveryRecord, attempt: Attempt): boolean {
    return (
      this.outage !== undefined &&
      delivery.stored === this.outage.region &&
      (attempt.outcome === 'transient' || attempt.outcome === 'unavailable') &&
      this.inFlightAtKill(attempt)
    );
  }

  /**
   * A message never acked successfully whose ack may have been applied in the crash: an attempt
   * was ambiguous, a retry failed permanently, and its lease is long over with the region back
   * (so, had the ack not been applied, the message would have been delivered again by now).
   */
  answerLostInCrash(id: string, now = Date.now()): boolean {
    const o = this.outage;
    if (!o || now < o.recoveredAt + 3000) return false;
    return (this.deliveriesOf.get(id) ?? []).some((delivery) => {
      const attempts = (this.attempts.get(delivery.ackId) ?? []).filter((a) => a.kind === 'ack');
      const last = attempts[attempts.length - 1];
      return (
        attempts.some((a) => this.ambiguous(delivery, a)) &&
        last?.outcome === 'permanent' &&
        now > delivery.recvAt + DEADLINE_MS + 3000
      );
    });
  }

  settled(): boolean {
    for (const id of this.okIds) {
      if (!this.successes.has(id) && !this.answerLostInCrash(id)) return false;
    }
    return true;
  }

  describe(id: string): string {
    const deliveries = this.deliveriesOf.get(id) ?? [];
    return `${id}: ${deliveries.length} deliveries [${deliveries
      .map(
        (d) =>
          `gen ${d.generation} to ${d.sub} via ${REGION_NAMES[d.via]} at ${d.recvAt % 100_000}; ${(this.attempts.get(d.ackId) ?? []).map((a) => `${a.kind} via ${REGION_NAMES[a.via]} ${a.outcome}${a.late ? ' (late)' : ''} at ${a.recvAt % 100_000}`).join(', ')}`,
      )
      .join(' | ')}]`;
  }
}

// ---------------------------------------------------------------- workload

/** Publishers paced to spread `MESSAGES` successfully published messages over `spanMs`. */
async function publishers(sc: Scenario, spanMs: number): Promise<void> {
  const started = Date.now();
  let reserved = 0;
  await Promise.all(
    Array.from({ length: PUBLISHERS }, async (_, p) => {
      while (reserved < MESSAGES) {
        const n = Math.min(rnd.int(1, 20), MESSAGES - reserved);
        reserved += n;
        await sleep(started + (spanMs * reserved) / MESSAGES - Date.now());
        const record = await sc.publish(`publisher${p}`, randomRegion(), n);
        if (record.status !== 200) {
          reserved -= n; // not published: someone publishes that many again
          await sleep(50);
        }
      }
    }),
  );
}

/** One subscriber: pull through a random region, settle through random regions, move on. */
async function subscriber(sc: Scenario, id: number, stop: () => boolean, lateAcks: boolean): Promise<void> {
  const name = `subscriber${id}`;
  let via = randomRegion();
  let retries: string[] = [];
  let retryAt = 0;
  let batches = 0;
  let lateDone = !lateAcks;
  const again = (ackIds: string[]) => {
    if (ackIds.length === 0) return;
    retries.push(...ackIds);
    retryAt = Date.now() + 300;
  };
  let giveUpRetriesAt = Infinity;
  while (!stop() || (retries.length > 0 && Date.now() < giveUpRetriesAt)) {
    if (stop() && giveUpRetriesAt === Infinity) giveUpRetriesAt = Date.now() + 5000;
    if (retries.length > 0 && Date.now() >= retryAt) {
      const batch = retries;
      retries = [];
      sc.stats.retries += batch.length;
      again(await sc.ack(randomRegion(), batch));
      if (stop()) {
        await sleep(100);
        continue;
      }
    }
    if (stop()) {
      await sleep(50);
      continue;
    }
    if (rnd.chance(MOVE_PROBABILITY)) via = (via + rnd.int(1, REGION_NAMES.length - 1)) % REGION_NAMES.length;
    const received = await sc.pull(name, via, rnd.int(1, 100));
    if (!received) {
      await sleep(100);
      continue;
    }
    if (received.length === 0) continue;
    batches++;
    const ackIds = received.map((d) => d.ackId);
    // A crash: what was pulled is forgotten, its leases run out.
    if (sc.disrupt && ((id === 1 && batches === 2) || rnd.chance(ABANDON_PROBABILITY))) {
      sc.stats.abandoned += ackIds.length;
      sc.stats.abandonedBatches++;
      continue;
    }
    // Too slow: acks after the deadline, which must all fail.
    if (sc.disrupt && !lateDone && ((id === 0 && batches === 3) || rnd.chance(0.01))) {
      lateDone = true;
      await sleep(DEADLINE_MS + 1500);
      sc.stats.lateAckIds += ackIds.length;
      again(await sc.ack(randomRegion(), ackIds, true));
      continue;
    }
    const nacks = ackIds.filter((_, i) => (id === 2 && batches === 2 && i === 0) || rnd.chance(NACK_PROBABILITY));
    const acks = ackIds.filter((ackId) => !nacks.includes(ackId));
    if (nacks.length > 0) {
      sc.stats.nacked += nacks.length;
      await sc.nack(randomRegion(), nacks);
    }
    const parts = Math.min(rnd.int(1, 3), Math.max(acks.length, 1));
    for (let k = 0; k < parts; k++) {
      const chunk = acks.slice(Math.floor((k * acks.length) / parts), Math.floor(((k + 1) * acks.length) / parts));
      if (chunk.length > 0) again(await sc.ack(randomRegion(), chunk));
    }
  }
}

/**
 * Runs publishers and subscribers until every published message is settled and /metrics shows
 * nothing unacked anywhere, or the budget is spent. `during` runs alongside (the outage).
 */
async function runWorkload(
  t: Test,
  sc: Scenario,
  spanMs: number,
  budgetMs: number,
  lateAcks: boolean,
  during?: () => Promise<void>,
) {
  let stopped = false;
  const started = Date.now();
  const running = Array.from({ length: SUBSCRIBERS }, (_, i) => subscriber(sc, i, () => stopped, lateAcks));
  const publishing = publishers(sc, spanMs).then(() => {
    sc.disrupt = false;
    return Date.now() - started;
  });
  if (during) await during();
  const publishMs = await publishing;
  let lastMetrics: Map<string, number> | undefined;
  const finished = await waitUntil(
    async () => {
      if (!sc.settled()) return false;
      lastMetrics = await unackedByRegion(randomRegion(), sc.sub);
      return allZero(lastMetrics);
    },
    budgetMs - (Date.now() - started),
    250,
  );
  const elapsed = Date.now() - started;
  if (!finished) {
    const open = [...sc.okIds].filter((id) => !sc.successes.has(id) && !sc.answerLostInCrash(id));
    sc.problem(
      'final',
      `not finished within ${budgetMs} ms: ${open.length} of ${sc.okIds.size} messages not acked, metrics ${JSON.stringify([...(lastMetrics ?? [])])}; e.g. ${open
        .slice(0, 8)
        .map((id) => sc.describe(id))
        .join('; ')}`,
    );
  }
  stopped = true;
  await Promise.all(running);
  t.comment(`${sc.name}: published in ${publishMs} ms, everything acked after ${elapsed} ms`);
  return { finished };
}

// ---------------------------------------------------------------- analysis

/** Checks every record against the rules in the header; returns figures for the report. */
function analyze(sc: Scenario) {
  const o = sc.outage;
  const killedName = o ? REGION_NAMES[o.region] : '';
  const okPayload = new Map<string, string>();
  const failedPayload = new Map<string, boolean>(); // payload -> ambiguous (may have been stored)
  const allIds = new Set<string>();
  const figures = {
    okPublishes: 0,
    failedPublishes: 0,
    ambiguousPublishes: 0,
    extras: new Set<string>(),
    storedIn: REGION_NAMES.map(() => 0),
    deliveredVia: REGION_NAMES.map(() => 0),
    crossRegionDeliveries: 0,
    crossRegionAcks: 0,
    redeliveries: 0,
    nacksApplied: 0,
    lateOutcomes: new Map<Outcome, number>(),
    transientFailures: 0,
    unavailableAcks: 0,
    answersLostInCrash: [] as string[],
    maxPullMs: 0,
  };

  // Publishes.
  for (const pub of sc.publishes) {
    const viaKilled = o !== undefined && pub.via === o.region;
    const mayFail = viaKilled && pub.recvAt >= o!.killAt && pub.sentAt <= o!.readyAt + MARGIN_MS;
    const mustFail = viaKilled && pub.sentAt >= o!.killExitAt && pub.recvAt <= o!.restartAt;
    if (pub.status === 200) {
      figures.okPublishes++;
      if (mustFail)
        sc.problem('publish', `publish through ${REGION_NAMES[pub.via]} answered 200 while its Redis was down`);
      if (pub.ids.length !== pub.payloads.length)
        sc.problem('publish', `publish of ${pub.payloads.length} messages answered ${pub.ids.length} IDs`);
      pub.ids.forEach((id, i) => {
        if (regionOfMessageId(id) !== REGION_NAMES[pub.via])
          sc.problem('publish', `publish through ${REGION_NAMES[pub.via]} answered message ID ${id}`);
        if (allIds.has(id)) sc.problem('publish', `message ID ${id} answered twice`);
        allIds.add(id);
        okPayload.set(pub.payloads[i], id);
        figures.storedIn[Math.max(0, REGION_NAMES.indexOf(regionOfMessageId(id)))]++;
      });
    } else {
      figures.failedPublishes++;
      const ambiguous = sc.inFlightAtKill(pub) && viaKilled;
      if (ambiguous) figures.ambiguousPublishes++;
      for (const payload of pub.payloads) failedPayload.set(payload, ambiguous);
      if (!(mayFail && pub.status === 503 && pub.errorStatus === 'UNAVAILABLE')) {
        sc.problem(
          'publish',
          `publish by ${pub.by} through ${REGION_NAMES[pub.via]} failed: ${pub.status} ${pub.text} (at +${pub.sentAt - (o?.killAt ?? 0)} ms from the kill)`,
        );
      }
    }
  }

  // Pulls.
  for (const pull of sc.pulls) {
    figures.maxPullMs = Math.max(figures.maxPullMs, pull.recvAt - pull.sentAt);
    if (pull.recvAt - pull.sentAt > SLOW_PULL_MS)
      sc.problem(
        'pull',
        `a pull by ${pull.sub} through ${REGION_NAMES[pull.via]} took ${pull.recvAt - pull.sentAt} ms`,
      );
    const viaKilled = o !== undefined && pull.via === o.region;
    if (pull.status !== 200) {
      const allowed =
        viaKilled &&
        pull.status === 503 &&
        pull.errorStatus === 'UNAVAILABLE' &&
        pull.recvAt >= o!.killAt &&
        pull.sentAt <= o!.readyAt + MARGIN_MS;
      if (!allowed)
        sc.problem('pull', `pull by ${pull.sub} through ${REGION_NAMES[pull.via]} failed: ${pull.status} ${pull.text}`);
    } else if (viaKilled && pull.sentAt >= o!.killExitAt && pull.recvAt <= o!.restartAt) {
      sc.problem('pull', `pull through ${REGION_NAMES[pull.via]} answered 200 while its Redis was down`);
    }
  }

  // Deliveries: known payloads, consistent IDs, nothing from a dead store.
  for (const d of sc.deliveries) {
    figures.deliveredVia[d.via]++;
    if (d.stored < 0 || d.generation < 1) {
      sc.problem('delivery', `malformed ack ID ${d.ackId} for message ${d.messageId}`);
      continue;
    }
    if (d.stored !== d.via) figures.crossRegionDeliveries++;
    if (regionOfMessageId(d.messageId) !== REGION_NAMES[d.stored])
      sc.problem('delivery', `message ${d.messageId} came with ack ID of region ${REGION_NAMES[d.stored]}`);
    const expectedId = okPayload.get(d.payload);
    if (expectedId !== undefined) {
      if (expectedId !== d.messageId)
        sc.problem('delivery', `payload ${d.payload} published as ${expectedId} delivered as ${d.messageId}`);
    } else if (failedPayload.has(d.payload)) {
      if (!failedPayload.get(d.payload))
        sc.problem(
          'delivery',
          `payload ${d.payload} of a publish answered with an error was delivered (as ${d.messageId})`,
        );
      else if (regionOfMessageId(d.messageId) !== killedName || allIds.has(d.messageId))
        sc.problem('delivery', `payload ${d.payload} of an interrupted publish delivered as ${d.messageId}`);
      else figures.extras.add(d.messageId);
    } else {
      sc.problem('delivery', `unknown message ${d.messageId} (payload ${JSON.stringify(d.payload.slice(0, 80))})`);
    }
    if (o && d.stored === o.region && d.sentAt >= o.killExitAt && d.recvAt <= o.restartAt) {
      sc.problem('delivery', `message ${d.messageId} of the dead region delivered while its Redis was down`);
    }
  }

  // Settling: outcomes against the lease each ack ID names.
  const successesOf = new Map<string, { at: number; generation: number }[]>();
  for (const [ackId, attempts] of sc.attempts) {
    const d = sc.deliveryOf.get(ackId);
    if (!d) {
      sc.problem('ack', `settled an ack ID never delivered: ${ackId}`);
      continue;
    }
    let ambiguousBefore = false;
    for (const a of attempts) {
      const what = `${a.kind} of message ${d.messageId} (gen ${d.generation}, pulled by ${d.sub}) through ${REGION_NAMES[a.via]}, sent ${a.sentAt - d.recvAt} ms after the pull answered`;
      if (a.late) figures.lateOutcomes.set(a.outcome, (figures.lateOutcomes.get(a.outcome) ?? 0) + 1);
      switch (a.outcome) {
        case 'ok':
          if (a.sentAt > d.recvAt + DEADLINE_MS + MARGIN_MS)
            sc.problem('ack', `${what}: succeeded although the lease had expired`);
          if (a.kind === 'ack') {
            const list = successesOf.get(d.messageId) ?? [];
            list.push({ at: a.recvAt, generation: d.generation });
            successesOf.set(d.messageId, list);
            if (a.via !== d.stored) figures.crossRegionAcks++;
          } else figures.nacksApplied++;
          break;
        case 'permanent':
          if (a.recvAt < d.sentAt + DEADLINE_MS - MARGIN_MS && !ambiguousBefore) {
            sc.problem(
              'ack',
              `${what}: failed permanently although the delivery was current and unexpired (${a.text})`,
            );
          }
          break;
        case 'transient': {
          figures.transientFailures++;
          const allowed =
            o !== undefined && d.stored === o.region && a.recvAt >= o.killAt && a.sentAt <= o.recoveredAt + MARGIN_MS;
          if (!allowed)
            sc.problem('ack', `${what}: TRANSIENT_FAILURE_OTHER although region ${REGION_NAMES[d.stored]} was up`);
          break;
        }
        case 'unavailable': {
          figures.unavailableAcks++;
          const allowed =
            o !== undefined && a.via === o.region && a.recvAt >= o.killAt && a.sentAt <= o.readyAt + MARGIN_MS;
          if (!allowed) sc.problem('ack', `${what}: 503 from a region that was up`);
          break;
        }
        default:
          sc.problem('ack', `${what}: ${a.status} ${a.text}`);
      }
      if (sc.ambiguous(d, a)) ambiguousBefore = true;
    }
  }

  // Per message: one success, no delivery after it, no overlapping deliveries.
  const nackedAt = (d: DeliveryRecord) =>
    (sc.attempts.get(d.ackId) ?? [])
      .filter((a) => a.kind === 'nack' && (a.outcome === 'ok' || sc.ambiguous(d, a)))
      .map((a) => a.sentAt)
      .reduce((min, at) => Math.min(min, at), Infinity);
  for (const [id, list] of sc.deliveriesOf) {
    figures.redeliveries += list.length - 1;
    const sorted = list.slice().sort((a, b) => a.recvAt - b.recvAt);
    const generations = new Set<number>();
    for (let j = 0; j < sorted.length; j++) {
      const d2 = sorted[j];
      if (generations.has(d2.generation))
        sc.problem('exactly-once', `message ${id}: generation ${d2.generation} delivered twice`);
      generations.add(d2.generation);
      for (let i = 0; i < j; i++) {
        const d1 = sorted[i];
        if (d2.recvAt - Math.min(d1.sentAt, d2.sentAt) >= DEADLINE_MS - MARGIN_MS) continue;
        if (nackedAt(d1) < d2.recvAt + MARGIN_MS) continue;
        sc.problem(
          'exactly-once',
          `message ${id} delivered to ${d2.sub} (gen ${d2.generation}, pull sent ${d2.sentAt - d1.recvAt} ms and answered ${d2.recvAt - d1.recvAt} ms after the earlier one answered) while ${d1.sub}'s delivery (gen ${d1.generation}) was outstanding and unexpired`,
        );
      }
    }
    for (const success of successesOf.get(id) ?? []) {
      for (const d of list) {
        if (d.generation > success.generation || d.sentAt > success.at + MARGIN_MS) {
          sc.problem(
            'exactly-once',
            `message ${id} delivered again (gen ${d.generation}, pull sent ${d.sentAt - success.at} ms after the ack answered) after gen ${success.generation} was acked successfully`,
          );
        }
      }
    }
  }

  // Every published message acked exactly once; nothing else acked.
  for (const [id, list] of successesOf) {
    if (list.length > 1)
      sc.problem('exactly-once', `message ${id} acked successfully ${list.length} times: ${sc.describe(id)}`);
    if (!allIds.has(id) && !figures.extras.has(id))
      sc.problem('exactly-once', `acked a message nobody published: ${id}`);
  }
  for (const id of allIds) {
    if (successesOf.has(id)) continue;
    if (sc.answerLostInCrash(id)) figures.answersLostInCrash.push(id);
    else sc.problem('exactly-once', `message ${id} never acked successfully (lost?): ${sc.describe(id)}`);
  }
  return { ...figures, okPayload };
}

/** Whatever is left: a final pull through every endpoint finds nothing, /metrics says 0 everywhere. */
async function checkDrained(t: Test, sub: string) {
  for (let region = 0; region < REGION_NAMES.length; region++) {
    const pull = await http(region, 'POST', `${subPath(sub)}:pull`, { maxMessages: 1000, returnImmediately: true });
    t.strictSame(
      { status: pull.status, body: pull.body },
      { status: 200, body: {} },
      `${sub}: a final pull through ${REGION_NAMES[region]} finds nothing`,
    );
    const counts = await unackedByRegion(region, sub);
    t.strictSame(
      Object.fromEntries(counts ?? []),
      Object.fromEntries(REGION_NAMES.map((name) => [name, 0])),
      `${sub}: /metrics of ${REGION_NAMES[region]} shows 0 unacked in every region`,
    );
  }
}

function showBrokerLogs(t: Test, sc: Scenario) {
  if (!sc.anyProblem) return;
  for (let i = 0; i < brokers.length; i++) {
    const output = brokers[i].output();
    t.comment(`broker ${REGION_NAMES[i]} output (last 3000 characters):\n${output.slice(-3000) || '(none)'}`);
  }
}

async function create(t: Test, via: number, path: string, body: unknown, what: string) {
  const reply = await http(via, 'PUT', path, body);
  t.equal(reply.status, 200, `${what} created through ${REGION_NAMES[via]}: ${brief(reply)}`);
  for (let region = 0; region < REGION_NAMES.length; region++) {
    const seen = await http(region, 'GET', path);
    t.equal(seen.status, 200, `${what} visible through ${REGION_NAMES[region]} right after the call returned`);
  }
  return reply;
}

// ---------------------------------------------------------------- scenario 1

t.test('exactly-once across regions with random disconnects: every message acked exactly once', async (t) => {
  const sc = new Scenario('s1', 'eod-topic', 'eod-sub');
  await create(t, randomRegion(), topicPath(sc.topic), {}, 'topic');
  const sub = await create(
    t,
    randomRegion(),
    subPath(sc.sub),
    { topic: `projects/${P}/topics/${sc.topic}`, enableExactlyOnceDelivery: true, ackDeadlineSeconds: ACK_DEADLINE_S },
    'exactly-once subscription',
  );
  t.match(sub.body, { enableExactlyOnceDelivery: true, ackDeadlineSeconds: ACK_DEADLINE_S });

  // A side subscription nobody else pulls: a lease that ran out and was not handed out again
  // must refuse its ack (the late acks of the workload mostly meet leases superseded already).
  const probe = 'eod-expiry-probe';
  await create(
    t,
    randomRegion(),
    subPath(probe),
    { topic: `projects/${P}/topics/${sc.topic}`, enableExactlyOnceDelivery: true, ackDeadlineSeconds: ACK_DEADLINE_S },
    'expiry probe subscription',
  );
  const expiryProbe = async () => {
    await sleep(1000);
    let first: Reply | undefined;
    await waitUntil(async () => {
      first = await http(randomRegion(), 'POST', `${subPath(probe)}:pull`, {
        maxMessages: 20,
        returnImmediately: true,
      });
      return (first.body?.receivedMessages ?? []).length > 0;
    }, 10_000);
    const held: any[] = first?.body?.receivedMessages ?? [];
    t.ok(held.length > 0, `expiry probe holds ${held.length} messages`);
    await sleep(first!.recvAt + DEADLINE_MS + 1500 - Date.now());
    const late = await http(randomRegion(), 'POST', `${subPath(probe)}:acknowledge`, {
      ackIds: held.map((m) => m.ackId),
    });
    t.equal(late.status, 400, 'acks sent after the deadline of an expired lease fail');
    t.strictSame(
      late.body?.error?.details?.[0]?.metadata,
      Object.fromEntries(held.map((m) => [m.ackId, 'PERMANENT_FAILURE_INVALID_ACK_ID'])),
      'every one permanently',
    );
    // The messages come back (a newer generation), and that delivery's ack works.
    const wanted = new Map(held.map((m) => [m.message.messageId, parseAckId(m.ackId)?.generation ?? 0]));
    const again = new Map<string, string>();
    await waitUntil(
      async () => {
        const pull = await http(randomRegion(), 'POST', `${subPath(probe)}:pull`, {
          maxMessages: 1000,
          returnImmediately: true,
        });
        for (const m of pull.body?.receivedMessages ?? []) {
          if (
            wanted.has(m.message.messageId) &&
            (parseAckId(m.ackId)?.generation ?? 0) > wanted.get(m.message.messageId)!
          )
            again.set(m.message.messageId, m.ackId);
        }
        return again.size === wanted.size;
      },
      10_000,
      10,
    );
    t.equal(again.size, wanted.size, 'the expired messages were delivered again, with a newer generation');
    const acked = await http(randomRegion(), 'POST', `${subPath(probe)}:acknowledge`, { ackIds: [...again.values()] });
    t.strictSame(
      { status: acked.status, body: acked.body },
      { status: 200, body: {} },
      "and the new delivery's acks succeed",
    );
  };

  const { finished } = await runWorkload(t, sc, PUBLISH_SPAN_MS.s1, BUDGET_MS.s1, true, expiryProbe);
  t.equal((await http(randomRegion(), 'DELETE', subPath(probe))).status, 200, 'expiry probe subscription deleted');
  const figures = analyze(sc);
  t.comment(
    `s1: ${figures.okPublishes} publishes, stored per region ${JSON.stringify(figures.storedIn)}, ${sc.deliveries.length} deliveries (${figures.redeliveries} redeliveries, ` +
      `${figures.crossRegionDeliveries} through another region than the store), via ${JSON.stringify(figures.deliveredVia)}; ${figures.crossRegionAcks} acks through another region; ` +
      `${sc.stats.abandoned} messages abandoned in ${sc.stats.abandonedBatches} batches, ${sc.stats.nacked} nacked (${figures.nacksApplied} applied), ${sc.stats.lateAckIds} acked late ${JSON.stringify([...figures.lateOutcomes])}; longest pull ${figures.maxPullMs} ms`,
  );

  t.equal(sc.okIds.size, MESSAGES, `${MESSAGES} messages published`);
  t.ok(finished, 'everything acked within the budget');
  t.strictSame(sc.problems('publish'), [], 'every publish answered 200 with IDs of the region it went through');
  t.strictSame(sc.problems('pull'), [], 'every pull answered 200 in time');
  t.strictSame(sc.problems('delivery'), [], 'only published messages delivered, with their published IDs');
  t.strictSame(
    sc.problems('ack'),
    [],
    'acks: in-time acks and nacks succeed, late ones fail permanently, no transient failure',
  );
  t.strictSame(
    sc.problems('exactly-once'),
    [],
    'every message acked successfully exactly once; never delivered while an earlier delivery was outstanding, nor after its ack',
  );
  t.strictSame(sc.problems('final'), [], 'nothing left over');
  t.ok(
    REGION_NAMES.every((_, i) => figures.storedIn[i] > 0),
    'every region stored messages',
  );
  t.ok(
    REGION_NAMES.every((_, i) => figures.deliveredVia[i] > 0),
    'every region delivered messages',
  );
  t.ok(figures.crossRegionDeliveries > 0, 'messages were delivered through other regions than the one storing them');
  t.ok(figures.crossRegionAcks > 0, 'acks through other regions than the one storing the message succeeded');
  t.ok(
    sc.stats.abandonedBatches > 0 && figures.nacksApplied > 0 && figures.redeliveries > 0,
    'abandoned and nacked messages were delivered again',
  );
  t.ok(
    sc.stats.lateAckIds > 0 && figures.lateOutcomes.get('permanent') === sc.stats.lateAckIds,
    'every ack sent after the deadline failed permanently',
  );
  await checkDrained(t, sc.sub);
  showBrokerLogs(t, sc);
});

// ---------------------------------------------------------------- scenario 2

t.test(`SIGKILL of region ${REGION_NAMES[KILLED]}'s Redis under load`, async (t) => {
  const sc = new Scenario('s2', 'outage-topic', 'outage-sub');
  const killedName = REGION_NAMES[KILLED];
  const live = REGION_NAMES.map((_, i) => i).filter((i) => i !== KILLED);
  const [liveA, liveB] = rnd.chance(0.5) ? live : [live[1], live[0]];
  const topicName = `projects/${P}/topics/${sc.topic}`;
  await create(t, randomRegion(), topicPath(sc.topic), {}, 'topic');
  await create(
    t,
    randomRegion(),
    subPath(sc.sub),
    { topic: topicName, enableExactlyOnceDelivery: true, ackDeadlineSeconds: ACK_DEADLINE_S },
    'exactly-once subscription',
  );
  // A probe subscription with a long deadline: its acks fail while the store is down and succeed after.
  await create(
    t,
    randomRegion(),
    subPath('outage-probe'),
    { topic: topicName, enableExactlyOnceDelivery: true, ackDeadlineSeconds: 120 },
    'probe subscription',
  );
  const labels = { phase: 'outage', seed: String(SEED) };
  let sub2Create: Reply | undefined;
  let postRecovery: PublishRecord | undefined;
  const heldBeforeKill: DeliveryRecord[] = [];

  const outage = async () => {
    const started = Date.now();
    await sleep(started + KILL_AFTER_MS - Date.now());
    // Probe deliveries of the doomed region's messages, on the probe subscription (kept) and on
    // the main one (abandoned: they come back only after the region does).
    const probeHeld: string[] = [];
    let rounds = 0;
    const giveUpAt = Date.now() + 5000;
    for (; Date.now() < giveUpAt && (probeHeld.length === 0 || heldBeforeKill.length === 0); rounds++) {
      await sc.publish('main-before-kill', KILLED, 20);
      if (probeHeld.length === 0) {
        const probe = await http(KILLED, 'POST', `${subPath('outage-probe')}:pull`, {
          maxMessages: 10,
          returnImmediately: true,
        });
        for (const m of probe.body?.receivedMessages ?? [])
          if (m.ackId.startsWith(`${killedName}.`)) probeHeld.push(m.ackId);
      }
      if (heldBeforeKill.length === 0) {
        const pulled = (await sc.pull('main-probe', KILLED, 5, true)) ?? [];
        heldBeforeKill.push(...pulled.filter((d) => d.stored === KILLED));
      }
    }
    t.ok(
      probeHeld.length > 0 && heldBeforeKill.length > 0,
      `holding messages of ${killedName} before the kill (${probeHeld.length} on the probe subscription, ${heldBeforeKill.length} on the main one, after ${rounds} rounds)`,
    );

    const o: Outage = {
      region: KILLED,
      killAt: Date.now(),
      killExitAt: Infinity,
      restartAt: Infinity,
      readyAt: Infinity,
      recoveredAt: Infinity,
    };
    sc.outage = o;
    await redises[KILLED].kill();
    o.killExitAt = Date.now();
    t.comment(`s2: SIGKILLed redis-server of ${killedName} ${o.killAt - started} ms in`);

    // The dead region's endpoint refuses everything with 503 UNAVAILABLE.
    const deadPublish = await sc.publish('main-dead', KILLED, 5);
    t.equal(deadPublish.status, 503, `publish through ${killedName} answers 503`);
    t.equal(deadPublish.errorStatus, 'UNAVAILABLE');
    const deadCalls: [string, string, string, unknown][] = [
      ['pull', 'POST', `${subPath(sc.sub)}:pull`, { maxMessages: 10, returnImmediately: true }],
      ['acknowledge', 'POST', `${subPath('outage-probe')}:acknowledge`, { ackIds: probeHeld }],
      ['get topic', 'GET', topicPath(sc.topic), undefined],
      ['create subscription', 'PUT', subPath('never-created'), { topic: topicName }],
      [
        'update topic',
        'PATCH',
        topicPath(sc.topic),
        { topic: { labels: { phase: 'dead-endpoint' } }, updateMask: 'labels' },
      ],
    ];
    for (const [what, method, path, body] of deadCalls) {
      const reply = await http(KILLED, method, path, body);
      t.equal(
        `${reply.status} ${reply.body?.error?.status}`,
        '503 UNAVAILABLE',
        `${what} through ${killedName} answers 503 UNAVAILABLE`,
      );
    }
    const deadReady = await http(KILLED, 'GET', '/readyz');
    t.equal(deadReady.status, 503, `${killedName}'s /readyz answers 503`);
    t.match(deadReady.body, {
      status: 'unavailable',
      region: killedName,
      regions: {
        [killedName]: { reachable: false, synced: false },
        [REGION_NAMES[liveA]]: { reachable: true, synced: true },
        [REGION_NAMES[liveB]]: { reachable: true, synced: true },
      },
    });
    for (const region of live) {
      const ready = await http(region, 'GET', '/readyz');
      t.equal(ready.status, 200, `${REGION_NAMES[region]}'s /readyz answers 200`);
      t.match(ready.body, {
        status: 'ready',
        region: REGION_NAMES[region],
        regions: { [killedName]: { reachable: false, synced: false } },
      });
    }

    // Acks of the dead region's messages fail transiently through a live region.
    const transient = await http(liveA, 'POST', `${subPath('outage-probe')}:acknowledge`, { ackIds: probeHeld });
    t.equal(transient.status, 400, `acks of ${killedName}'s messages through ${REGION_NAMES[liveA]} fail`);
    t.strictSame(
      transient.body?.error?.details?.[0]?.metadata,
      Object.fromEntries(probeHeld.map((ackId) => [ackId, 'TRANSIENT_FAILURE_OTHER'])),
      'every one with TRANSIENT_FAILURE_OTHER',
    );

    // Control-plane writes through live regions.
    sub2Create = await http(liveA, 'PUT', subPath('outage-new-sub'), { topic: topicName, ackDeadlineSeconds: 60 });
    t.equal(
      sub2Create.status,
      200,
      `a subscription created through ${REGION_NAMES[liveA]} meanwhile: ${brief(sub2Create)}`,
    );
    t.equal(
      (await http(liveB, 'GET', subPath('outage-new-sub'))).status,
      200,
      `and visible through ${REGION_NAMES[liveB]}`,
    );
    const patched = await http(liveB, 'PATCH', topicPath(sc.topic), { topic: { labels }, updateMask: 'labels' });
    t.equal(patched.status, 200, `topic labels changed through ${REGION_NAMES[liveB]} meanwhile: ${brief(patched)}`);
    t.strictSame(
      (await http(liveA, 'GET', topicPath(sc.topic))).body?.labels,
      labels,
      `and visible through ${REGION_NAMES[liveA]}`,
    );
    for (const region of live) {
      const counts = await unackedByRegion(region, sc.sub);
      t.ok(
        counts !== undefined && live.every((r) => counts.has(REGION_NAMES[r])),
        `/metrics of ${REGION_NAMES[region]} still reports the live regions (${JSON.stringify([...(counts ?? [])])})`,
      );
    }

    await sleep(o.killAt + DOWN_MS - Date.now());
    o.restartAt = Date.now();
    await redises[KILLED].start();
    const ready = await waitUntil(async () => (await http(KILLED, 'GET', '/readyz')).status === 200, 20_000);
    o.readyAt = Date.now();
    t.ok(ready, `${killedName}'s /readyz answers 200 again ${o.readyAt - o.restartAt} ms after the restart`);
    const recovered = await waitUntil(async () => {
      const replies = await Promise.all(REGION_NAMES.map((_, i) => http(i, 'GET', '/readyz')));
      return replies.every(
        (reply) =>
          reply.status === 200 &&
          reply.body?.regions?.[killedName]?.synced === true &&
          REGION_NAMES.every((name) => reply.body.regions[name]?.reachable === true),
      );
    }, 20_000);
    o.recoveredAt = Date.now();
    t.ok(
      recovered,
      `every region reports ${killedName} reachable and synced ${o.recoveredAt - o.restartAt} ms after the restart`,
    );

    // What changed meanwhile reached the restarted region.
    const topic = await http(KILLED, 'GET', topicPath(sc.topic));
    t.strictSame(topic.body?.labels, labels, `the labels set while ${killedName} was down are visible through it`);
    const sub2 = await http(KILLED, 'GET', subPath('outage-new-sub'));
    t.equal(sub2.status, 200, `the subscription created while ${killedName} was down is visible through it`);
    t.equal(sub2.body?.topic, topicName);
    const listed = await http(KILLED, 'GET', `${topicPath(sc.topic)}/subscriptions`);
    t.strictSame(
      [...(listed.body?.subscriptions ?? [])].sort(),
      ['outage-new-sub', 'outage-probe', sc.sub].map((s) => `projects/${P}/subscriptions/${s}`).sort(),
      `${killedName} lists the topic's subscriptions, the new one included`,
    );
    t.equal(
      (await http(KILLED, 'GET', subPath('never-created'))).status,
      404,
      'the create refused by the dead endpoint left nothing behind',
    );
    const retried = await http(KILLED, 'POST', `${subPath('outage-probe')}:acknowledge`, { ackIds: probeHeld });
    t.strictSame(
      { status: retried.status, body: retried.body },
      { status: 200, body: {} },
      'the acks that failed transiently succeed when retried after the restart',
    );
    postRecovery = await sc.publish('main-after-restart', KILLED, 20);
    t.equal(postRecovery.status, 200, `publish through ${killedName} after its restart: ${postRecovery.text}`);
  };

  const { finished } = await runWorkload(t, sc, PUBLISH_SPAN_MS.s2, BUDGET_MS.s2, false, outage);
  const o = sc.outage!;
  const figures = analyze(sc);
  const inOutage = (r: { sentAt: number; recvAt: number }) => r.sentAt >= o.killExitAt && r.recvAt <= o.restartAt;
  const livePublishesInOutage = sc.publishes.filter((p) => p.via !== KILLED && inOutage(p));
  const deadPublishesInOutage = sc.publishes.filter((p) => p.via === KILLED && inOutage(p));
  const deliveredInOutage = live.map((region) => sc.deliveries.filter((d) => d.via === region && inOutage(d)));
  const publishedInOutage = new Set(livePublishesInOutage.flatMap((p) => p.ids));
  const storedBeforeKill = sc.publishes
    .filter((p) => p.status === 200 && p.via === KILLED && p.recvAt < o.killAt)
    .flatMap((p) => p.ids);
  t.comment(
    `s2: ${figures.okPublishes} publishes OK, ${figures.failedPublishes} refused (${figures.ambiguousPublishes} in flight at the kill, ${figures.extras.size} of whose messages were stored anyway); ` +
      `stored per region ${JSON.stringify(figures.storedIn)}; ${sc.deliveries.length} deliveries (${figures.redeliveries} redeliveries), via ${JSON.stringify(figures.deliveredVia)}; ` +
      `during the outage: ${livePublishesInOutage.length} publishes through live regions, ${deadPublishesInOutage.length} refused by the dead one, deliveries via live regions ${JSON.stringify(deliveredInOutage.map((l) => l.length))}; ` +
      `${figures.transientFailures} TRANSIENT_FAILURE_OTHER, ${figures.unavailableAcks} acks refused with 503, ${sc.stats.retries} ack retries; ${figures.answersLostInCrash.length} acks applied by the crashed Redis without an answer; ` +
      `${sc.stats.abandoned} abandoned, ${sc.stats.nacked} nacked; longest pull ${figures.maxPullMs} ms`,
  );

  t.ok(sc.okIds.size >= MESSAGES, `${sc.okIds.size} messages published`);
  t.ok(finished, 'everything acked within the budget');
  t.strictSame(
    sc.problems('publish'),
    [],
    'publishes through live regions always succeeded; the dead region refused with 503 exactly while it was down',
  );
  t.strictSame(
    sc.problems('pull'),
    [],
    'pulls through live regions always succeeded in time; the dead region refused with 503 while it was down',
  );
  t.strictSame(
    sc.problems('delivery'),
    [],
    'only published messages delivered (refused publishes never), nothing from the dead region while it was down',
  );
  t.strictSame(
    sc.problems('ack'),
    [],
    "acks: transient failures only for the dead region's messages while it was down, in-time acks never failed permanently",
  );
  t.strictSame(
    sc.problems('exactly-once'),
    [],
    'every message acked successfully exactly once; never delivered while an earlier delivery was outstanding, nor after its ack',
  );
  t.strictSame(sc.problems('final'), [], 'nothing left over');
  t.ok(livePublishesInOutage.length > 0, 'live regions took publishes during the outage');
  t.ok(
    deadPublishesInOutage.length > 0 && deadPublishesInOutage.every((p) => p.status === 503),
    'the dead region refused every publish during the outage',
  );
  t.ok(
    deliveredInOutage.every((list) => list.length > 0),
    'both live regions delivered during the outage',
  );
  t.ok(
    deliveredInOutage.flat().some((d) => publishedInOutage.has(d.messageId)),
    'messages published during the outage were delivered during the outage',
  );
  t.ok(
    storedBeforeKill.length > 0,
    `${storedBeforeKill.length} messages were stored in ${killedName} before the kill (all acked: see above)`,
  );
  const heldAgain = heldBeforeKill.filter((held) =>
    (sc.deliveriesOf.get(held.messageId) ?? []).some((d) => d.recvAt > o.restartAt),
  );
  t.equal(
    heldAgain.length,
    heldBeforeKill.length,
    `the ${heldBeforeKill.length} messages of ${killedName} leased before the kill were delivered again after the restart`,
  );
  await checkDrained(t, sc.sub);

  // The subscription created during the outage got everything published after it, in every region.
  const created = sub2Create!;
  const required = new Set(
    sc.publishes.filter((p) => p.status === 200 && p.sentAt > created.recvAt).flatMap((p) => p.ids),
  );
  const forbidden = new Set(
    sc.publishes.filter((p) => p.status === 200 && p.recvAt < created.sentAt).flatMap((p) => p.ids),
  );
  const got = new Set<string>();
  const strays: string[] = [];
  let empties = 0;
  for (let i = 0; empties < REGION_NAMES.length && i < 200; i++) {
    const via = i % REGION_NAMES.length;
    const pull = await http(via, 'POST', `${subPath('outage-new-sub')}:pull`, {
      maxMessages: 1000,
      returnImmediately: true,
    });
    const received: any[] = pull.status === 200 ? (pull.body?.receivedMessages ?? []) : [];
    if (pull.status !== 200) strays.push(`pull failed: ${brief(pull)}`);
    if (received.length === 0) {
      empties++;
      continue;
    }
    empties = 0;
    for (const m of received) {
      got.add(m.message.messageId);
      if (
        figures.okPayload.get(unb64(m.message.data)) !== m.message.messageId &&
        !figures.extras.has(m.message.messageId)
      )
        strays.push(`unknown ${m.message.messageId}`);
    }
    const ack = await http(randomRegion(), 'POST', `${subPath('outage-new-sub')}:acknowledge`, {
      ackIds: received.map((m) => m.ackId),
    });
    if (ack.status !== 200) strays.push(`ack failed: ${brief(ack)}`);
  }
  const missing = [...required].filter((id) => !got.has(id));
  t.strictSame(
    missing.slice(0, 20),
    [],
    `the new subscription got all ${required.size} messages published after its creation`,
  );
  t.strictSame([...got].filter((id) => forbidden.has(id)).slice(0, 20), [], 'and none published before it');
  t.strictSame(strays, [], 'and nothing unknown');
  t.ok(
    postRecovery?.ids.length === 20 &&
      postRecovery.ids.every((id) => got.has(id) && regionOfMessageId(id) === killedName),
    `the publish through ${killedName} after its restart reached the new subscription`,
  );
  const lateKilled = sc.publishes
    .filter((p) => p.status === 200 && p.via === KILLED && p.sentAt > o.readyAt)
    .flatMap((p) => p.ids);
  t.ok(
    lateKilled.every((id) => got.has(id)),
    `all ${lateKilled.length} publishes through ${killedName} after it came back reached it`,
  );
  await checkDrained(t, 'outage-new-sub');
  showBrokerLogs(t, sc);
});
