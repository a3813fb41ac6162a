import type { ResourceName } from './names.ts';
import { type LeasedMessage, MAX_PULL_BYTES, MAX_PULL_MESSAGES, type ReceivedMessage } from './pull.ts';
import type { Puller } from './pull.ts';
import type { SubscriptionRecord } from './records.ts';
import { CONFIG_CHANGED, MAX_TIMER_MS, Nap, type Waiter } from './wakeups.ts';

/**
 * One leaser per subscription per process: the streams (WebSocket and gRPC alike, both are a
 * StreamingSession) and waiting long polls of a subscription in this process share ONE pull loop
 * instead of each running its own pull scripts, so the scripts a subscription costs follow the
 * messages, not the number of consumers.
 *
 * - Registry: Leasers maps a subscription uid to its Leaser. A consumer joins (the leaser is
 *   created, and its wake-up armed, on the first join), adds itself with a way to tell its room
 *   (messages, and bytes one pull may bring it), its ack deadline and a way to take messages, and
 *   leaves when done; the last one to leave stops the leaser and its wake-up.
 * - Wake-ups: the leaser is the only waiter of its subscription on the topic's wake channel
 *   (wakeups.ts). A wake-up, a look that leased messages, or messages given back make a look
 *   owed (a look that leased may have left more, and only a look that finds nothing learns from
 *   the pull script when the next message falls due by time alone); the leaser looks when one is owed and some consumer has room, after re-arming its
 *   wake-up (a fired one is replaced before the look, so no publish is missed). Room that acks
 *   free needs no look unless one is owed: the last look left nothing behind, and whatever becomes
 *   available announces itself. Messages that become available by time alone (a lease deadline,
 *   a retry backoff, a scheduled delivery) are looked for when the earliest look reported them
 *   due (one timer per leaser). CONFIG_CHANGED re-reads the subscription and tells the consumers.
 * - One pull per deadline: consumers are grouped by the ack deadline their leases get (a stream's
 *   streamAckDeadlineSeconds; undefined for long polls: the subscription's ackDeadlineSeconds),
 *   and each group with room gets one pull script for its summed room, capped as any pull is
 *   (MAX_PULL_MESSAGES, MAX_PULL_BYTES). So a publish that wakes the leaser costs two pull
 *   scripts while its consumers have room (one that leases, one that finds nothing), however
 *   many consumers there are.
 * - Distribution: the consumers are queued longest-unserved first (one that is handed messages
 *   goes to the back), and the pulled messages fill the room of the first in the queue, then of
 *   the next, unit by unit: a trickle of messages goes to every consumer in turn, and a batch
 *   reaches few consumers in full frames (each frame costs its client one ack, and the broker one
 *   ack script), not every consumer a message. A unit is one message, or on an ordered subscription all the messages of one ordering key in the
 *   pull, in order: the pull script hands out a key only while nothing of it is outstanding
 *   (pull.lua), so giving a key's messages to one consumer keeps the key with one consumer at a
 *   time. A unit longer than any consumer's room goes to the roomiest, and the rest of it is given
 *   back. Each consumer takes its share in one call, and hands back what it would not take (over
 *   its byte budget, or closed meanwhile): a unit it took none of is offered to the other
 *   consumers; the rest of a unit it took the head of is given back (a key stays with its holder).
 *   What nobody takes is given back at once (releaseLeased: no delivery attempt counts), not left
 *   leased until its deadline.
 * - Long polls first run their own immediate pull (a pull that finds messages costs that one
 *   script either way, and answers without waiting for the leaser's turn), and only wait through
 *   the leaser; a look made while the leaser's wake-up was armed and unfired counts as the
 *   leaser's, so a new long poll costs one script, as before.
 * - Settlements reach streams as before (DeliveryService.onSettled); they only tell the leaser of
 *   new room. Shutdown (close) answers waiting long polls with nothing and ends streams.
 */
export interface LeaseConsumer {
  /** The ack deadline its leases get, in seconds; undefined: the subscription's ackDeadlineSeconds. */
  readonly deadlineSeconds: number | undefined;
  /** How many messages it takes now (0: none), and how many message bytes one pull may bring it. */
  room(): { messages: number; bytes: number };
  /** Hands it messages, in pull order; answers those it did not take (closed, or over its byte budget). */
  take(messages: LeasedMessage[]): LeasedMessage[];
  /** The leaser no longer serves it: with the error that stopped it, or none (shutdown). */
  end(error?: unknown): void;
  /** The subscription was re-read after a change (CONFIG_CHANGED). */
  changed?(record: SubscriptionRecord): void;
}

/** What a leaser needs of the delivery service (the instance, so that tests may wrap pullOnce). */
export interface LeaseSource {
  pullOnce: Puller['pullOnce'];
  releaseLeased(record: SubscriptionRecord, deliveries: readonly LeasedMessage['delivery'][]): Promise<void>;
  armWaiter(record: SubscriptionRecord): Promise<Waiter>;
  readPullable(name: ResourceName): Promise<SubscriptionRecord>;
}

export class Leasers {
  private readonly leasers = new Map<string, Leaser>();
  private closing = false;

  constructor(
    private readonly source: LeaseSource,
    /** Upper bound of a long-polling pull, in milliseconds. */
    private readonly pullWaitMs: number,
  ) {}

  /**
   * The subscription's leaser, its wake-up armed; the caller must leave() it once. Fails when
   * the wake-up cannot be armed.
   */
  async join(record: SubscriptionRecord, name: ResourceName): Promise<Leaser> {
    let leaser = this.leasers.get(record.uid);
    if (!leaser) {
      const created = new Leaser(record, name, this.source, () => {
        if (this.leasers.get(record.uid) === created) this.leasers.delete(record.uid);
      });
      this.leasers.set(record.uid, created);
      leaser = created;
    }
    leaser.refs++;
    try {
      await leaser.armed();
    } catch (error) {
      leaser.leave();
      throw error;
    }
    return leaser;
  }

  /**
   * A long-polling pull: its own immediate look, then, with nothing found, a wait through the
   * subscription's leaser until messages come, `cancelled` fires, the wait runs out or the broker
   * closes (which answer with nothing).
   */
  async longPoll(
    record: SubscriptionRecord,
    name: ResourceName,
    maxMessages: number,
    cancelled: AbortSignal,
  ): Promise<ReceivedMessage[]> {
    const max = Math.min(maxMessages, MAX_PULL_MESSAGES);
    // Without a wake-up channel the pull answers at once; clients pull again.
    const leaser = this.closing ? undefined : await this.join(record, name).catch(() => undefined);
    if (!leaser) return (await this.source.pullOnce(record, max)).received;
    try {
      const mark = leaser.mark();
      const { received, nextDueUs } = await this.source.pullOnce(record, max);
      if (received.length > 0 || cancelled.aborted || this.closing) return received;
      leaser.looked(mark, nextDueUs);
      return await new Promise<ReceivedMessage[]>((resolve, reject) => {
        let done = false;
        const finish = (answer: () => void) => {
          if (done) return;
          done = true;
          clearTimeout(timer);
          cancelled.removeEventListener('abort', stop);
          leaser.remove(consumer);
          answer();
        };
        const stop = () => finish(() => resolve([]));
        const consumer: LeaseConsumer = {
          deadlineSeconds: undefined,
          room: () => ({ messages: done ? 0 : max, bytes: MAX_PULL_BYTES }),
          take: (messages) => {
            finish(() => resolve(messages));
            return [];
          },
          end: (error) => finish(() => (error === undefined ? resolve([]) : reject(error))),
        };
        const timer = setTimeout(stop, this.pullWaitMs);
        cancelled.addEventListener('abort', stop, { once: true });
        leaser.add(consumer);
      });
    } finally {
      leaser.leave();
    }
  }

  /** Shutdown: waiting long polls answer with nothing, and new ones do not wait. */
  close(): void {
    this.closing = true;
    for (const leaser of this.leasers.values()) leaser.endAll(undefined);
  }
}

export class Leaser {
  /** Consumers, longest-unserved first (a Set keeps insertion order: one served is re-added). */
  private readonly consumers = new Set<LeaseConsumer>();
  /** Joined and not yet left: the leaser stops at 0. */
  refs = 0;
  private waiter?: Waiter;
  /** The waiter is armed and has not fired: anything that becomes available wakes it. */
  private fresh = false;
  private arming?: Promise<void>;
  /** A look may find messages: the first, and after a wake-up, a look that leased or a give-back. */
  private owed = true;
  /** How many times a look became owed (see mark). */
  private owings = 0;
  private configChanged = false;
  private stopped = false;
  private readonly nap = new Nap();
  private dueAt = Infinity;
  private dueTimer?: NodeJS.Timeout;

  constructor(
    private record: SubscriptionRecord,
    private readonly name: ResourceName,
    private readonly source: LeaseSource,
    private readonly onStop: () => void,
  ) {
    void this.run();
  }

  /** The wake-up is armed (re-armed if the last one fired). */
  armed(): Promise<void> {
    if (this.fresh) return Promise.resolve();
    this.arming ??= this.rearm().finally(() => (this.arming = undefined));
    return this.arming;
  }

  add(consumer: LeaseConsumer): void {
    this.consumers.add(consumer);
    this.nap.nudge();
  }

  remove(consumer: LeaseConsumer): void {
    this.consumers.delete(consumer);
  }

  leave(): void {
    if (--this.refs > 0) return;
    this.stopped = true;
    this.waiter?.cancel();
    clearTimeout(this.dueTimer);
    this.nap.nudge();
    this.onStop();
  }

  /** A consumer has room again (acks, a drained transport, run-out leases): look if one is owed. */
  roomFreed(): void {
    this.nap.nudge();
  }

  /** Before a consumer's own look: `looked` then tells whether it counts as the leaser's. */
  mark(): number {
    return this.fresh ? this.owings : -1;
  }

  /**
   * A consumer's own look, begun after mark(), found nothing: while the wake-up stayed armed and
   * unfired since, the leaser owes no look of its own.
   */
  looked(mark: number, nextDueUs: number | undefined): void {
    if (nextDueUs !== undefined) this.lookAgainIn(Math.ceil(nextDueUs / 1000) + 1);
    if (mark === this.owings && this.fresh) this.owed = false;
  }

  endAll(error: unknown): void {
    for (const consumer of [...this.consumers]) {
      this.consumers.delete(consumer);
      consumer.end(error);
    }
  }

  private owe(): void {
    this.owed = true;
    this.owings++;
    this.nap.nudge();
  }

  /** Arms a new wake-up before the fired one is cancelled, so that the channel stays subscribed. */
  private async rearm(): Promise<void> {
    const next = await this.source.armWaiter(this.record);
    this.waiter?.cancel();
    this.waiter = next;
    this.fresh = true;
    if (this.stopped) next.cancel();
    void next.woken.then((message) => {
      if (this.waiter !== next || this.stopped) return;
      this.fresh = false;
      // Cancelled: the broker is closing, and wakes nobody any more.
      if (message === '') return;
      if (message === CONFIG_CHANGED) this.configChanged = true;
      this.owe();
    });
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      const groups = this.configChanged || this.owed ? this.takersByDeadline() : undefined;
      if (!this.configChanged && (!groups || groups.size === 0)) {
        await this.nap.sleep(undefined);
        continue;
      }
      try {
        await this.armed();
        if (this.configChanged) {
          this.configChanged = false;
          this.record = await this.source.readPullable(this.name);
          for (const consumer of [...this.consumers]) consumer.changed?.(this.record);
        }
      } catch (error) {
        // No wake-up, or the subscription is gone (deleted, detached, pushing): nobody is served.
        this.endAll(error);
        continue;
      }
      if (!this.owed) continue;
      this.owed = false;
      for (const [deadlineSeconds, takers] of this.takersByDeadline()) {
        if (this.stopped) break;
        await this.lease(deadlineSeconds, takers);
      }
    }
  }

  /** The consumers with room, longest-unserved first, by the deadline their leases get. */
  private takersByDeadline(): Map<number | undefined, Map<LeaseConsumer, { messages: number; bytes: number }>> {
    const groups = new Map<number | undefined, Map<LeaseConsumer, { messages: number; bytes: number }>>();
    for (const consumer of this.consumers) {
      const room = consumer.room();
      if (room.messages <= 0) continue;
      let group = groups.get(consumer.deadlineSeconds);
      if (!group) groups.set(consumer.deadlineSeconds, (group = new Map()));
      group.set(consumer, room);
    }
    return groups;
  }

  /** One pull for the summed room of consumers that share a deadline, handed out to them. */
  private async lease(
    deadlineSeconds: number | undefined,
    takers: Map<LeaseConsumer, { messages: number; bytes: number }>,
  ): Promise<void> {
    let messages = 0;
    let bytes = 0;
    for (const room of takers.values()) {
      messages += room.messages;
      bytes += room.bytes;
    }
    let pulled: Awaited<ReturnType<Puller['pullOnce']>>;
    try {
      pulled = await this.source.pullOnce(this.record, Math.min(messages, MAX_PULL_MESSAGES), {
        deadlineSeconds,
        maxBytes: Math.min(bytes, MAX_PULL_BYTES),
      });
    } catch (error) {
      // Redis failed, or the subscription's data is gone: these consumers end (streams fail,
      // long polls answer with the error), as their own pull failing ended them before.
      for (const consumer of takers.keys()) {
        if (!this.consumers.delete(consumer)) continue;
        consumer.end(error);
      }
      return;
    }
    const { received, nextDueUs } = pulled;
    // A look that leased owes the next: more may have come meanwhile (a filled look), and only a
    // look that leases nothing learns when the next message falls due by time alone (pull.lua).
    if (received.length > 0) this.owe();
    if (nextDueUs !== undefined) this.lookAgainIn(Math.ceil(nextDueUs / 1000) + 1);
    if (received.length > 0) await this.handOut(received, [...takers.keys()]);
  }

  /** Distributes what one pull leased (see Leasers), and gives back what nobody took. */
  private async handOut(received: LeasedMessage[], takers: LeaseConsumer[]): Promise<void> {
    const back: LeasedMessage[] = [];
    let pending = unitsOf(received, this.record.enableMessageOrdering === true);
    let candidates = takers;
    while (pending.length > 0) {
      // Room now: a consumer may have closed, or its transport blocked, during the pull.
      const left = new Map<LeaseConsumer, number>();
      for (const consumer of candidates) {
        const room = this.consumers.has(consumer) ? consumer.room().messages : 0;
        if (room > 0) left.set(consumer, room);
      }
      if (left.size === 0) break;
      const shares = share(pending, left, back);
      pending = [];
      candidates = [...left.keys()].filter((consumer) => !shares.has(consumer));
      for (const [consumer, units] of shares) {
        const rejected = new Set(consumer.take(units.flat()));
        this.served(consumer);
        if (rejected.size === 0) {
          candidates.push(consumer);
          continue;
        }
        for (const unit of units) {
          if (unit.every((message) => rejected.has(message))) pending.push(unit);
          else back.push(...unit.filter((message) => rejected.has(message)));
        }
      }
    }
    back.push(...pending.flat());
    if (back.length === 0) return;
    this.owe();
    // A failed give-back only costs time: the leases run out by themselves.
    await this.source
      .releaseLeased(
        this.record,
        back.map((message) => message.delivery),
      )
      .catch(() => {});
  }

  /** A consumer handed messages waits behind the others for its next share. */
  private served(consumer: LeaseConsumer): void {
    if (!this.consumers.delete(consumer)) return;
    this.consumers.add(consumer);
  }

  /** One timer: the earliest time a look found the next message due by time alone. */
  private lookAgainIn(ms: number): void {
    const at = Date.now() + ms;
    if (at >= this.dueAt || this.stopped) return;
    clearTimeout(this.dueTimer);
    this.dueAt = at;
    // A timer longer than setTimeout allows would fire at once; waking early only looks again.
    this.dueTimer = setTimeout(
      () => {
        this.dueAt = Infinity;
        this.owe();
      },
      Math.min(ms, MAX_TIMER_MS),
    );
    this.dueTimer.unref();
  }
}

/**
 * The pulled messages in units handed out whole: each message alone, or, on an ordered
 * subscription, the messages of one ordering key (of one region) together, in pull order.
 */
function unitsOf(received: LeasedMessage[], ordered: boolean): LeasedMessage[][] {
  const units: LeasedMessage[][] = [];
  const byKey = new Map<string, LeasedMessage[]>();
  for (const message of received) {
    const key = message.message.orderingKey;
    if (!ordered || key === undefined) {
      units.push([message]);
      continue;
    }
    const keyed = `${message.delivery.region}/${key}`;
    const unit = byKey.get(keyed);
    if (unit) unit.push(message);
    else {
      const first = [message];
      byKey.set(keyed, first);
      units.push(first);
    }
  }
  return units;
}

/**
 * Deals units out to the consumers in `left`'s order (with the room each has left): each
 * consumer is filled before the next gets anything, so that a batch reaches few consumers in
 * full frames (one ack each) rather than every consumer a message; a unit that does not fit
 * whole goes to the next consumer it fits, else in part to the roomiest, its rest to `back`, as
 * does a unit when no room is left.
 */
function share(
  units: LeasedMessage[][],
  left: Map<LeaseConsumer, number>,
  back: LeasedMessage[],
): Map<LeaseConsumer, LeasedMessage[][]> {
  const order = [...left.keys()];
  const shares = new Map<LeaseConsumer, LeasedMessage[][]>();
  // Every consumer before `at` is full.
  let at = 0;
  for (const unit of units) {
    while (at < order.length && left.get(order[at]) === 0) at++;
    let chosen: LeaseConsumer | undefined;
    let roomiest: LeaseConsumer | undefined;
    for (let i = at; i < order.length; i++) {
      const room = left.get(order[i])!;
      if (room >= unit.length) {
        chosen = order[i];
        break;
      }
      if (room > 0 && (!roomiest || room > left.get(roomiest)!)) roomiest = order[i];
    }
    chosen ??= roomiest;
    if (!chosen) {
      back.push(...unit);
      continue;
    }
    const room = left.get(chosen)!;
    back.push(...unit.slice(room));
    const part = unit.slice(0, room);
    left.set(chosen, room - part.length);
    let mine = shares.get(chosen);
    if (!mine) shares.set(chosen, (mine = []));
    mine.push(part);
  }
  return shares;
}
