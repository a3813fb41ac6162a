// Randomized property test of exactly-once delivery (README.md, Semantics, "Exactly-once";
// https://cloud.google.com/pubsub/docs/exactly-once-delivery), through the HTTP API.
//
// ~2000 messages are published to an exactly-once subscription (ackDeadlineSeconds 10), then K
// simulated pullers, interleaved by a seeded PRNG, pull, ack, nack, extend, re-ack, ack stale and
// forged IDs and let (manual) time pass; some steps run two pullers' requests at once so the
// server really sees concurrent requests. Every other round stages all publishes' bodies (the
// path large publishes take) instead of passing them to the publish script. A model of every message's current lease (ack ID and
// deadline in clock time) checks every response:
//   (a) a message is never delivered while an earlier delivery of it is leased and unexpired;
//   (b) a message is never delivered after its successful ack;
//   (c) every ack/modack of an invalid ID (stale, expired, already acked, nacked, forged) fails
//       with HTTP 400 INVALID_ARGUMENT + ErrorInfo EXACTLY_ONCE_ACKID_FAILURE whose metadata lists
//       exactly the failed IDs as PERMANENT_FAILURE_INVALID_ACK_ID, and every valid one succeeds;
//   (d) valid IDs in a request that also holds invalid ones take effect (requests mix them);
//   (e) a receipt modack on fresh ack IDs succeeds; a nacked delivery's ack ID fails afterwards.
// Finally everything is drained: every message was acked successfully exactly once, a last pull
// answers {}, and Redis holds no bodies, staging keys, leases or ready entries for the
// subscription any more.
//
//   SEED=1234 npx tap test/e2e/exactly-once.property.test.ts      # replay a run
//   MESSAGES=5000 STEPS=6000 SEED=... npx tap ...                   # a longer run
import { randomInt } from 'node:crypto';
import t, { type Test } from 'tap';
import { seededRandom } from '../helpers/random.ts';
import { AckIdCodec } from '../../src/broker/ack-id.ts';
import { ManualClock } from '../../src/broker/clock.ts';
import { resourceName } from '../../src/broker/names.ts';
import { Keys } from '../../src/redis/keys.ts';
import { b64, startBroker, unb64 } from '../helpers/app.ts';
import { redisTargets, scanKeys, storedBodies, type RedisTarget } from '../helpers/redis.ts';

const SEED = process.env.SEED ? Number(process.env.SEED) : randomInt(2 ** 31);
const MESSAGES = Number(process.env.MESSAGES ?? 2000);
const STEPS = Number(process.env.STEPS ?? 4000);
const ROUNDS = Number(process.env.ROUNDS ?? 6);
const PULLERS = 4;
const ACK_DEADLINE_SECONDS = 10;
const US = 1_000_000;
const MAX_PROBLEMS = 50;

t.comment(`exactly-once property test: SEED=${SEED} MESSAGES=${MESSAGES} STEPS=${STEPS} ROUNDS=${ROUNDS}`);

type DeliveryState = 'leased' | 'nacked' | 'acked' | 'superseded';

interface Delivery {
  ackId: string;
  messageId: string;
  deliveredAtUs: number;
  deadlineUs: number;
  state: DeliveryState;
}

interface MessageModel {
  id: string;
  text: string;
  acked: boolean;
  ackSuccesses: number;
  deliveries: Delivery[];
  current?: Delivery;
}

interface Puller {
  name: string;
  held: string[];
}

/** One request and its response, applied to the model after the step's requests finished. */
type Outcome =
  | { kind: 'pull'; puller: Puller; maxMessages: number; alone: boolean; status: number; body: any }
  | { kind: 'ack'; ids: string[]; why: string; status: number; body: any }
  | { kind: 'modack'; ids: string[]; seconds: number; why: string; status: number; body: any };

// Several rounds per target, each with a fresh topic, its own seed and a different share of
// concurrent steps; SEED replays all of them (up to the interleaving of concurrent requests).
for (const target of redisTargets()) {
  for (let round = 0; round < ROUNDS; round++) {
    const seed = (SEED + round + (target.name === 'cluster' ? 1000 : 0)) >>> 0;
    const pairChance = [0.25, 0.5, 0.75][round % 3];
    const staged = round % 2 === 1;
    t.test(
      `${target.name} round ${round + 1}: exactly-once guarantees hold (seed ${seed}, ${pairChance * 100}% concurrent steps${staged ? ', staged publishes' : ''})`,
      (t) => runRound(t, target, seed, pairChance, staged),
    );
  }
}

async function runRound(t: Test, target: RedisTarget, seed: number, pairChance: number, staged: boolean) {
  const rnd = seededRandom(seed);
  const clock = new ManualClock();
  // Staged: every publish, however small, stages its bodies for the script (publish.lua).
  const broker = await startBroker(t, {
    target,
    clock,
    name: 'eod-property',
    stageBodiesFromBytes: staged ? 0 : undefined,
  });
  const api = broker.api;
  const nowUs = () => Number(clock.scriptTime());

  const SUB = '/v1/projects/p/subscriptions/eod';
  const problems: string[] = [];
  const check = (ok: boolean, message: () => string) => {
    if (!ok && problems.length < MAX_PROBLEMS * 4) problems.push(`[t=${(nowUs() - startUs) / US}s] ${message()}`);
    return ok;
  };
  const stats: Record<string, number> = {};
  const count = (what: string, n = 1) => (stats[what] = (stats[what] ?? 0) + n);

  // ---- setup ----
  t.equal((await api('PUT', '/v1/projects/p/topics/eod', {})).status, 200, 'topic created');
  const created = await api('PUT', SUB, {
    topic: 'projects/p/topics/eod',
    ackDeadlineSeconds: ACK_DEADLINE_SECONDS,
    enableExactlyOnceDelivery: true,
  });
  t.equal(created.status, 200, 'exactly-once subscription created');
  t.equal(created.body.enableExactlyOnceDelivery, true);

  // Ack IDs of another subscription (on another topic, so its seqs and generations are the
  // same small numbers as ours): correctly sealed, but not ours.
  t.equal((await api('PUT', '/v1/projects/p/topics/other', {})).status, 200);
  t.equal(
    (
      await api('PUT', '/v1/projects/p/subscriptions/other', {
        topic: 'projects/p/topics/other',
        enableExactlyOnceDelivery: true,
      })
    ).status,
    200,
  );
  const otherPublish = await api('POST', '/v1/projects/p/topics/other:publish', {
    messages: Array.from({ length: 5 }, (_, i) => ({ data: b64(`other-${i}`) })),
  });
  t.equal(otherPublish.status, 200);
  const otherPull = await api('POST', '/v1/projects/p/subscriptions/other:pull', {
    maxMessages: 10,
    returnImmediately: true,
  });
  const foreignIds: string[] = otherPull.body.receivedMessages.map((m: any) => m.ackId);
  t.equal(foreignIds.length, 5, 'ack IDs of another subscription');
  // White box: the shared ack ID secret, to seal IDs the broker could have issued but did not
  // issue for these deliveries (another subscription's uid, a future generation).
  const secret = await broker.redis.get(new Keys(broker.prefix).ackSecret);
  t.ok(secret, 'the ack ID secret is in Redis');
  const codec = new AckIdCodec(Buffer.from(secret!, 'hex'));
  const ourUid = (await broker.app.broker.subscriptions.read(resourceName('subscriptions', 'p', 'eod'))).uid;
  const otherUid = (await broker.app.broker.subscriptions.read(resourceName('subscriptions', 'p', 'other'))).uid;

  const messages = new Map<string, MessageModel>();
  for (let first = 0; first < MESSAGES; first += 100) {
    const texts = Array.from(
      { length: Math.min(100, MESSAGES - first) },
      (_, i) => `message ${first + i} of run ${seed}`,
    );
    const published = await api('POST', '/v1/projects/p/topics/eod:publish', {
      messages: texts.map((text) => ({ data: b64(text) })),
    });
    t.equal(published.status, 200);
    published.body.messageIds.forEach((id: string, i: number) => {
      messages.set(id, { id, text: texts[i], acked: false, ackSuccesses: 0, deliveries: [] });
    });
  }
  t.equal(messages.size, MESSAGES, `published ${MESSAGES} messages with distinct IDs`);

  const startUs = nowUs();
  const byAckId = new Map<string, Delivery>();
  const ackedIds: string[] = [];
  const pullers: Puller[] = Array.from({ length: PULLERS }, (_, i) => ({ name: `puller${i}`, held: [] }));

  const isValid = (ackId: string, at: number) => {
    const delivery = byAckId.get(ackId);
    if (!delivery) return false;
    const message = messages.get(delivery.messageId)!;
    return !message.acked && message.current === delivery && delivery.state === 'leased' && delivery.deadlineUs > at;
  };
  const available = (at: number) => {
    let n = 0;
    for (const m of messages.values()) {
      if (m.acked) continue;
      if (m.current?.state !== 'leased' || m.current.deadlineUs <= at) n++;
    }
    return n;
  };

  // ---- forged IDs ----
  const liveDelivery = () => {
    const live = [...messages.values()].filter((m) => m.current && isValid(m.current.ackId, nowUs()));
    return live.length > 0 ? rnd.pick(live).current : undefined;
  };
  const anyKnownId = () => (byAckId.size > 0 ? rnd.pick([...byAckId.keys()].slice(-200)) : foreignIds[0]);
  const forge = (): string => {
    const real = anyKnownId();
    const parts = real.split('-');
    switch (rnd.int(0, 7)) {
      case 0:
        return `garbage-${rnd.int(0, 1e9)}`;
      case 1: {
        // change the first character of the MAC (the last one carries padding bits, see the
        // separate "ack ID spellings" test)
        const mac = parts[3];
        parts[3] = (mac[0] === 'A' ? 'B' : 'A') + mac.slice(1);
        return parts.join('-');
      }
      case 2: {
        // bump the generation, keep the MAC
        parts[2] = (parseInt(parts[2], 36) + 1).toString(36);
        return parts.join('-');
      }
      case 3: {
        // sealed for another subscription, naming one of our live deliveries
        const live = liveDelivery();
        if (!live) return rnd.pick(foreignIds);
        return codec.encode({ ...codec.decode(live.ackId)!, subscriptionUid: otherUid });
      }
      case 7: {
        // sealed for us, but a generation not delivered yet
        const live = liveDelivery();
        const delivery = live
          ? codec.decode(live.ackId)!
          : { region: '', subscriptionUid: ourUid, seq: '999999', generation: 0 };
        return codec.encode({ ...delivery, generation: delivery.generation + 1 });
      }
      case 4: {
        // another subscription uid, our MAC
        parts[0] = parts[0].split('').reverse().join('');
        return parts.join('-');
      }
      case 5:
        return real.toUpperCase() === real ? `${real}x` : real.toUpperCase();
      default:
        return rnd.chance(0.5) ? '' : 'x'.repeat(rnd.int(1, 400));
    }
  };

  // ---- requests ----
  const pull = async (puller: Puller, alone: boolean): Promise<Outcome[]> => {
    const maxMessages = rnd.int(1, 50);
    const receiptModack = rnd.chance(0.6);
    const seconds = rnd.int(10, 60);
    const response = await api('POST', `${SUB}:pull`, { maxMessages, returnImmediately: true });
    const outcomes: Outcome[] = [{ kind: 'pull', puller, maxMessages, alone, ...response }];
    const fresh: string[] =
      response.status === 200 ? (response.body?.receivedMessages ?? []).map((m: any) => m.ackId) : [];
    if (receiptModack && fresh.length > 0) {
      const ids = rnd.chance(0.5) ? fresh : rnd.someOf(fresh, rnd.int(1, fresh.length));
      const modack = await api('POST', `${SUB}:modifyAckDeadline`, { ackIds: ids, ackDeadlineSeconds: seconds });
      outcomes.push({ kind: 'modack', ids, seconds, why: 'receipt modack', ...modack });
    }
    return outcomes;
  };

  const takeHeld = (puller: Puller, k: number) => {
    const ids = rnd.someOf(puller.held, k, true);
    puller.held = puller.held.filter((id) => !ids.includes(id));
    return ids;
  };

  const ack = async (ids: string[], why: string): Promise<Outcome[]> => {
    ids = [...new Set(ids)];
    if (ids.length === 0) return [];
    const response = await api('POST', `${SUB}:acknowledge`, { ackIds: ids });
    return [{ kind: 'ack', ids, why, ...response }];
  };

  const modack = async (ids: string[], seconds: number, why: string): Promise<Outcome[]> => {
    ids = [...new Set(ids)];
    if (ids.length === 0) return [];
    const response = await api('POST', `${SUB}:modifyAckDeadline`, { ackIds: ids, ackDeadlineSeconds: seconds });
    return [{ kind: 'modack', ids, seconds, why, ...response }];
  };

  const staleIds = () => {
    const stale: string[] = [];
    for (const [ackId, delivery] of byAckId) {
      if (delivery.state === 'superseded' || delivery.state === 'nacked') stale.push(ackId);
    }
    return stale;
  };

  type ActionName = 'pull' | 'ack' | 'nack' | 'extend' | 'reack' | 'stale' | 'forged' | 'advance';
  const WEIGHTS: [ActionName, number][] = [
    ['pull', 26],
    ['ack', 26],
    ['nack', 7],
    ['extend', 9],
    ['reack', 6],
    ['stale', 7],
    ['forged', 6],
    ['advance', 13],
  ];
  const chooseAction = (allowAdvance: boolean): ActionName => {
    const weights = WEIGHTS.filter(([name]) => allowAdvance || name !== 'advance');
    let x = rnd.next() * weights.reduce((sum, [, w]) => sum + w, 0);
    for (const [name, w] of weights) if ((x -= w) < 0) return name;
    return 'pull';
  };

  /** Runs one action; decides everything from the model *before* any request is sent. */
  const act = (puller: Puller, action: ActionName, alone: boolean): Promise<Outcome[]> => {
    count(`action:${action}`);
    switch (action) {
      case 'pull':
        return pull(puller, alone);
      case 'ack':
        return ack(takeHeld(puller, rnd.int(1, 20)), 'ack held');
      case 'nack': {
        const ids = takeHeld(puller, rnd.int(1, 5));
        const ackAfter = rnd.chance(0.5);
        return modack(ids, 0, 'nack').then(async (outcomes) => {
          // A nacked delivery's ack ID must fail afterwards (only those the nack accepted).
          const o = outcomes[0];
          const failed = o?.status === 400 ? Object.keys(o.body?.error?.details?.[0]?.metadata ?? {}) : [];
          const nacked = o && (o.status === 200 || o.status === 400) ? ids.filter((id) => !failed.includes(id)) : [];
          return ackAfter && nacked.length ? [...outcomes, ...(await ack(nacked, 'ack after nack'))] : outcomes;
        });
      }
      case 'extend': {
        const k = rnd.int(1, 10);
        const ids = rnd.someOf(puller.held, k, true); // still held afterwards
        return modack(ids, rnd.int(10, 60), 'extend');
      }
      case 'reack': {
        const ids = [...rnd.someOf(ackedIds, rnd.int(1, 3)), ...takeHeld(puller, rnd.int(0, 5))];
        return ack(ids, 're-ack of acked IDs mixed with held');
      }
      case 'stale': {
        const ids = [...rnd.someOf(staleIds(), rnd.int(1, 3)), ...takeHeld(puller, rnd.int(0, 5))];
        if (rnd.chance(0.3)) return modack(ids, rnd.int(10, 60), 'extend stale mixed with held');
        return ack(ids, 'ack stale mixed with held');
      }
      case 'forged': {
        const ids = [...Array.from({ length: rnd.int(1, 3) }, forge), ...takeHeld(puller, rnd.int(0, 5))];
        if (rnd.chance(0.3)) return modack(ids, rnd.int(0, 1) * rnd.int(10, 60), 'modack forged mixed with held');
        return ack(ids, 'ack forged mixed with held');
      }
      case 'advance':
        clock.advanceSeconds(rnd.int(0, 15));
        return Promise.resolve([]);
    }
  };

  // ---- the model ----
  const describe = (o: Outcome) => `${o.kind}${'why' in o ? ` (${o.why})` : ''}`;

  const applyAckOrModack = (o: Extract<Outcome, { kind: 'ack' | 'modack' }>, at: number) => {
    const expectedFailed = o.ids.filter((id) => !isValid(id, at));
    count(`${o.kind}:ids`, o.ids.length);
    count(`${o.kind}:expected-failures`, expectedFailed.length);
    if (expectedFailed.length > 0 && expectedFailed.length < o.ids.length) count(`${o.kind}:mixed-requests`);
    let failed: string[];
    if (o.status === 200) {
      check(JSON.stringify(o.body) === '{}', () => `${describe(o)}: 200 with body ${JSON.stringify(o.body)}`);
      failed = [];
    } else if (o.status === 400) {
      const error = o.body?.error ?? {};
      const detail = error.details?.[0] ?? {};
      check(
        error.code === 400 && error.status === 'INVALID_ARGUMENT',
        () => `${describe(o)}: error ${JSON.stringify(error)}`,
      );
      check(
        detail['@type'] === 'type.googleapis.com/google.rpc.ErrorInfo' &&
          detail.reason === 'EXACTLY_ONCE_ACKID_FAILURE' &&
          detail.domain === 'pubsub.googleapis.com',
        () => `${describe(o)}: details[0] is not the exactly-once ErrorInfo: ${JSON.stringify(error.details)}`,
      );
      const metadata: Record<string, string> = detail.metadata ?? {};
      failed = Object.keys(metadata);
      for (const [id, code] of Object.entries(metadata)) {
        check(
          code === 'PERMANENT_FAILURE_INVALID_ACK_ID',
          () => `${describe(o)}: ${JSON.stringify(id)} failed with ${code}`,
        );
        check(o.ids.includes(id), () => `${describe(o)}: metadata names ${JSON.stringify(id)}, which was not sent`);
      }
    } else {
      check(false, () => `${describe(o)}: unexpected HTTP ${o.status} ${JSON.stringify(o.body)}`);
      failed = o.ids; // unknown effect; the final drain will still judge the end state
    }
    const failedSet = new Set(failed);
    const expectedSet = new Set(expectedFailed);
    for (const id of o.ids) {
      if (expectedSet.has(id) && !failedSet.has(id)) {
        const d = byAckId.get(id);
        check(
          false,
          () =>
            `${describe(o)}: invalid ack ID accepted: ${JSON.stringify(id.slice(0, 80))} ` +
            (d
              ? `(message ${d.messageId}, delivery ${d.state}, deadline ${(d.deadlineUs - startUs) / US}s)`
              : '(forged)'),
        );
      }
      if (!expectedSet.has(id) && failedSet.has(id)) {
        check(
          false,
          () => `${describe(o)}: valid ack ID reported failed: ${id} (message ${byAckId.get(id)?.messageId})`,
        );
      }
    }
    // Follow what the server says it did, so one discrepancy does not cascade.
    for (const id of o.ids) {
      if (failedSet.has(id)) continue;
      const delivery = byAckId.get(id);
      if (!delivery) continue;
      const message = messages.get(delivery.messageId)!;
      if (o.kind === 'ack') {
        message.ackSuccesses++;
        check(
          message.ackSuccesses === 1,
          () => `message ${message.id} acknowledged successfully ${message.ackSuccesses} times`,
        );
        message.acked = true;
        message.current = undefined;
        delivery.state = 'acked';
        ackedIds.push(id);
        count('acked');
      } else if (o.seconds === 0) {
        delivery.state = 'nacked';
        count('nacked');
      } else {
        delivery.deadlineUs = at + o.seconds * US;
        count(o.why === 'receipt modack' ? 'receipt-modacks' : 'extended');
      }
    }
  };

  const applyPull = (o: Extract<Outcome, { kind: 'pull' }>, at: number) => {
    if (!check(o.status === 200, () => `pull: HTTP ${o.status} ${JSON.stringify(o.body)}`)) return;
    const received: any[] = o.body?.receivedMessages ?? [];
    if (received.length === 0) {
      check(JSON.stringify(o.body) === '{}', () => `empty pull answered ${JSON.stringify(o.body)} instead of {}`);
    }
    check(received.length <= o.maxMessages, () => `pull of ${o.maxMessages} returned ${received.length}`);
    if (o.alone && received.length === 0) {
      const n = available(at);
      check(n === 0, () => `a pull alone returned nothing while ${n} messages were available`);
    }
    const seen = new Set<string>();
    for (const r of received) {
      const id: string = r.message?.messageId;
      const message = messages.get(id);
      if (!check(message !== undefined, () => `pull delivered unknown message ${JSON.stringify(r)}`)) continue;
      check(!seen.has(id), () => `message ${id} delivered twice in one pull response`);
      seen.add(id);
      check(unb64(r.message.data) === message!.text, () => `message ${id} carries ${unb64(r.message.data)}`);
      check(typeof r.ackId === 'string' && !byAckId.has(r.ackId), () => `message ${id}: ack ID ${r.ackId} is not new`);
      // (b) never after a successful ack
      check(!message!.acked, () => `(b) message ${id} delivered again after it was acknowledged`);
      // (a) never while another delivery is leased and unexpired
      const previous = message!.current;
      check(
        previous?.state !== 'leased' || previous.deadlineUs <= at,
        () =>
          `(a) message ${id} delivered at ${(at - startUs) / US}s while delivery ${previous!.ackId.slice(-8)} ` +
          `is leased until ${(previous!.deadlineUs - startUs) / US}s`,
      );
      if (previous) {
        if (previous.state === 'leased')
          count(previous.deadlineUs <= at ? 'redelivered-after-expiry' : 'redelivered-while-leased');
        if (previous.state === 'nacked') count('redelivered-after-nack');
        if (previous.state === 'leased' || previous.state === 'nacked') previous.state = 'superseded';
      }
      const delivery: Delivery = {
        ackId: r.ackId,
        messageId: id,
        deliveredAtUs: at,
        deadlineUs: at + ACK_DEADLINE_SECONDS * US,
        state: 'leased',
      };
      message!.deliveries.push(delivery);
      message!.current = delivery;
      byAckId.set(r.ackId, delivery);
      o.puller.held.push(r.ackId);
      count('delivered');
    }
  };

  /**
   * Applies the outcomes of one step. Time does not move during a step. Acks and modacks go
   * first: their validity is decided by the lease state at the step's time, which a concurrent
   * pull cannot change (a pull only re-leases messages whose current ack ID is already invalid),
   * while a concurrent nack may legitimately make a message available to that pull.
   */
  const apply = (groups: Outcome[][], at: number) => {
    for (const outcomes of groups) {
      for (const o of outcomes) {
        if (o.kind !== 'pull' && o.why !== 'receipt modack') applyAckOrModack(o, at);
      }
    }
    for (const outcomes of groups) {
      for (const o of outcomes) {
        if (o.kind === 'pull') applyPull(o, at);
        else if (o.why === 'receipt modack') applyAckOrModack(o, at);
      }
    }
  };

  // ---- the randomized run ----
  // Runs until every message is acknowledged (the usual end) or STEPS steps have passed.
  const unacked = () => MESSAGES - (stats.acked ?? 0);
  let step = 0;
  for (; step < STEPS && unacked() > 0 && problems.length < MAX_PROBLEMS; step++) {
    if (rnd.chance(pairChance)) {
      const [a, b] = rnd.someOf(pullers, 2);
      const at = nowUs();
      const groups = await Promise.all([act(a, chooseAction(false), false), act(b, chooseAction(false), false)]);
      count('concurrent-steps');
      apply(groups, at);
    } else {
      const puller = rnd.pick(pullers);
      const at = nowUs();
      const outcomes = await act(puller, chooseAction(true), true);
      apply([outcomes], at);
    }
  }

  count('steps', step);
  count('acked-before-drain', [...messages.values()].filter((m) => m.acked).length);

  // ---- drain: let every lease (at most 60 s long) run out, then pull and ack everything ----
  clock.advanceSeconds(61);
  const drainer: Puller = { name: 'drainer', held: [] };
  for (let round = 0; round < MESSAGES + 10 && problems.length < MAX_PROBLEMS; round++) {
    const at = nowUs();
    const pulled = await pull(drainer, true);
    const pullOutcome = pulled[0];
    apply([pulled], at);
    const received = pullOutcome.status === 200 ? (pullOutcome.body?.receivedMessages ?? []) : [];
    if (received.length === 0) break;
    drainer.held = [];
    apply(
      [
        await ack(
          received.map((m: any) => m.ackId),
          'drain',
        ),
      ],
      at,
    );
  }

  const finalPull = await api('POST', `${SUB}:pull`, { maxMessages: 1000, returnImmediately: true });
  t.equal(finalPull.status, 200, 'final pull answers 200');
  t.same(finalPull.body, {}, 'final pull returns {}');
  clock.advanceSeconds(700);
  const laterPull = await api('POST', `${SUB}:pull`, { maxMessages: 1000, returnImmediately: true });
  t.same(laterPull.body, {}, 'nothing comes back after every lease could have run out');

  const notOnce = [...messages.values()].filter((m) => m.ackSuccesses !== 1).map((m) => `${m.id}:${m.ackSuccesses}`);
  t.same(notOnce.slice(0, 20), [], 'every message was acknowledged successfully exactly once');
  t.equal(notOnce.length, 0, `messages not acked exactly once: ${notOnce.length}`);

  // Redis: nothing left for the subscription, and every body was released.
  const topic = await broker.app.broker.topics.read(resourceName('topics', 'p', 'eod'));
  const sub = await broker.app.broker.subscriptions.read(resourceName('subscriptions', 'p', 'eod'));
  const data = new Keys(broker.prefix).topicData(topic.uid);
  const subKeys = data.subscription(sub.uid);
  t.equal((await storedBodies(broker.redis, data)).size, 0, 'no message bodies are left');
  t.same(await scanKeys(broker.redis, data.staging('*')), [], 'no staging keys are left');
  t.equal(await broker.redis.zcard(subKeys.leased), 0, 'no leases are left');
  t.equal(await broker.redis.llen(subKeys.ready), 0, 'no ready entries are left');

  t.comment(`stats: ${JSON.stringify(stats)}`);
  t.same(problems.slice(0, 30), [], `no guarantee was broken (seed ${seed}; ${problems.length} problems)`);

  // The run must really have exercised what it claims to test.
  for (const what of [
    'concurrent-steps',
    'redelivered-after-expiry',
    'redelivered-after-nack',
    'receipt-modacks',
    'extended',
    'ack:mixed-requests',
    'modack:expected-failures',
  ]) {
    t.ok((stats[what] ?? 0) > 0, `the run exercised ${what} (${stats[what] ?? 0})`);
  }
}

// Deterministic companion of the "forged" action: the last character of an ack ID's MAC carries
// four base64 padding bits, so 15 other spellings decode to the same bytes. They were never
// issued, so on an exactly-once subscription each must be reported as an invalid ack ID.
for (const target of redisTargets()) {
  t.test(`${target.name}: an ack ID is accepted only exactly as issued`, async (t) => {
    const broker = await startBroker(t, { target, clock: new ManualClock(), name: 'eod-spelling' });
    const { api } = broker;
    t.equal((await api('PUT', '/v1/projects/p/topics/spell', {})).status, 200);
    t.equal(
      (
        await api('PUT', '/v1/projects/p/subscriptions/spell', {
          topic: 'projects/p/topics/spell',
          enableExactlyOnceDelivery: true,
        })
      ).status,
      200,
    );
    t.equal((await api('POST', '/v1/projects/p/topics/spell:publish', { messages: [{ data: b64('x') }] })).status, 200);
    const pulled = await api('POST', '/v1/projects/p/subscriptions/spell:pull', {
      maxMessages: 1,
      returnImmediately: true,
    });
    const ackId: string = pulled.body.receivedMessages[0].ackId;
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const base = alphabet.indexOf(ackId.at(-1)!) & ~15;
    const aliases = [...alphabet.slice(base, base + 16)].map((c) => ackId.slice(0, -1) + c).filter((a) => a !== ackId);

    const modack = await api('POST', '/v1/projects/p/subscriptions/spell:modifyAckDeadline', {
      ackIds: aliases,
      ackDeadlineSeconds: 60,
    });
    t.equal(modack.status, 400, 'a modack with only never-issued spellings fails');
    t.same(
      modack.body?.error?.details?.[0]?.metadata ?? {},
      Object.fromEntries(aliases.map((a) => [a, 'PERMANENT_FAILURE_INVALID_ACK_ID'])),
      'every other spelling is reported PERMANENT_FAILURE_INVALID_ACK_ID (AckIdCodec.decode must reject non-canonical base64url)',
    );
    const ack = await api('POST', '/v1/projects/p/subscriptions/spell:acknowledge', { ackIds: [aliases[0], ackId] });
    t.equal(ack.status, 400, 'an ack mixing a never-issued spelling with the real ID fails');
    t.same(
      ack.body?.error?.details?.[0]?.metadata ?? {},
      { [aliases[0]]: 'PERMANENT_FAILURE_INVALID_ACK_ID' },
      'only the other spelling failed',
    );
    const again = await api('POST', '/v1/projects/p/subscriptions/spell:acknowledge', { ackIds: [ackId] });
    t.equal(again.status, 400, 'the real ID was acknowledged by the mixed request, so acking it again fails');
  });
}
