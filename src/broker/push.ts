import type { DeliveryService } from './delivery.ts';
import type { LeasedMessage } from './pull.ts';
import { type PushHosts, pushHostAllowed } from './push-config.ts';
import { ApiError } from '../errors.ts';
import { withTimeout } from '../timeout.ts';
import type { Delivery } from './ack-id.ts';
import { push, type PushTarget, pushTarget, RequestGroup } from './push-request.ts';
import { PushWindow } from './push-window.ts';
import type { SubscriptionRecord } from './records.ts';
import type { Regions } from './regions.ts';
import type { SubscriptionRecords } from './subscription-records.ts';
import { Nap, type Waiter } from './wakeups.ts';
import { Rerun } from './rerun.ts';

/**
 * Push delivery (README.md, "Push subscriptions"). Every broker node pushes every push
 * subscription, and leasing keeps them from pushing one message twice at a time: a pusher
 * leases messages with the same pull script as pulls and streams (DeliveryService.pullOnce,
 * the subscription's ack deadline as lease), POSTs each to the endpoint, then acknowledges it
 * or gives it back. Ordering keys keep one request outstanding per key: a key's later messages
 * are not leased while any of its messages is outstanding, and those one pull leases together
 * are pushed one after the other.
 *
 * Which subscriptions push: each node lists the subscription records of its region (its copy
 * of them, subscription-records.ts: one GET while none changed) at start, whenever the control plane
 * announces a change of any subscription record on the subscriptions channel (every create,
 * update and delete, also copies made by a region sync), and every PushOptions.relistIntervalMs
 * in case an announcement was missed (Redis pub/sub does not queue for a reconnecting node).
 */
export interface PushOptions {
  /** The hosts push endpoints may name (PUSH_ENDPOINT_HOSTS). */
  hosts: PushHosts;
  /** How often the push subscriptions are listed again without an announcement. */
  relistIntervalMs: number;
  /** How long stopping waits for requests under way before it ends them. */
  closeWaitMs: number;
  log: (message: string) => void;
}

/** After a failed Redis call, a pusher tries again this much later (never a tight loop). */
const RETRY_MS = 1_000;
/** A pusher with nothing to push looks again at least this often, woken or not. */
const LOOK_AGAIN_MS = 30_000;
/**
 * Requests end this long before their lease runs out: a busy node's timer may fire late, and
 * once the lease is over another node may push the message again while this one is still open.
 */
const LEASE_MARGIN_MS = 1_000;

export class PushService {
  private readonly pushers = new Map<string, Pusher>();
  private readonly stopping = new Set<Promise<void>>();
  private readonly listings = new Rerun(
    () => this.listLogged(),
    () => this.closed,
  );
  private timer?: NodeJS.Timeout;
  private announcements?: Waiter;
  private closed = false;
  /** Subscriptions whose endpoint the host setting refuses, warned about once. */
  private readonly refused = new Set<string>();

  constructor(
    private readonly regions: Regions,
    private readonly delivery: DeliveryService,
    private readonly records: SubscriptionRecords,
    private readonly options: PushOptions,
  ) {}

  start(): void {
    void this.listen();
    this.requestListing();
    this.timer = setInterval(() => this.requestListing(), this.options.relistIntervalMs);
    this.timer.unref();
  }

  /** The names of the subscriptions this node pushes now. */
  get pushing(): string[] {
    return [...this.pushers.keys()];
  }

  /** Stops pushing: requests under way may finish (bounded), what is left is given back. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    this.announcements?.cancel();
    await this.listings.settled();
    for (const [name, pusher] of this.pushers) this.stop(name, pusher);
    await Promise.all(this.stopping);
  }

  /** Lists the push subscriptions now, or once more after the listing under way. */
  requestListing(): Promise<void> {
    return this.listings.request();
  }

  private async listLogged(): Promise<void> {
    try {
      await this.list();
    } catch (error) {
      this.options.log(`listing push subscriptions failed: ${(error as Error).message}`);
    }
  }

  private async listen(): Promise<void> {
    const { wakeups, ctx } = this.regions.local;
    const channel = ctx.keys.subscriptionsChannel;
    while (!this.closed) {
      try {
        this.announcements ??= await wakeups.arm(channel);
        // Closed while arming: close() found nothing to cancel.
        if (this.closed) return void this.announcements.cancel();
        const message = await this.announcements.woken;
        // Cancelled: closing.
        if (message === '') return;
        // The next wake-up is armed before this one is released, so the channel stays subscribed.
        const next = await wakeups.arm(channel);
        this.announcements.cancel();
        this.announcements = next;
        if (this.closed) return void next.cancel();
        this.requestListing();
      } catch {
        this.announcements = undefined;
        await sleep(RETRY_MS);
      }
    }
  }

  private async list(): Promise<void> {
    const region = this.regions.local;
    if (!region.usable) {
      // Its storage not checked or not synced yet (starting, reconnecting): look again shortly,
      // rather than wait for the next periodic listing.
      setTimeout(() => this.requestListing(), RETRY_MS).unref();
      return;
    }
    const { byName } = await this.records.read(region);
    if (this.closed) return;
    const found = new Map<string, SubscriptionRecord>();
    for (const { record } of byName.values()) {
      // A detached subscription has nothing to push: its backlog is gone and it gets no more.
      if (record.pushConfig && !record.detached) found.set(record.name, record);
    }
    for (const [name, pusher] of this.pushers) {
      const record = found.get(name);
      if (!record || record.uid !== pusher.uid || !this.allowed(record)) this.stop(name, pusher);
    }
    for (const [name, record] of found) {
      const pusher = this.pushers.get(name);
      if (pusher) pusher.update(record);
      else if (this.allowed(record)) this.pushers.set(name, new Pusher(record, this.delivery, this.options.log));
    }
  }

  /** A record made before the host setting changed may name a host it now refuses: not pushed. */
  private allowed(record: SubscriptionRecord): boolean {
    const allowed = pushHostAllowed(record.pushConfig!.pushEndpoint, this.options.hosts);
    if (!allowed && !this.refused.has(record.name)) {
      this.refused.add(record.name);
      this.options.log(`not pushing ${record.name}: PUSH_ENDPOINT_HOSTS does not allow its endpoint's host`);
    }
    return allowed;
  }

  private stop(name: string, pusher: Pusher): void {
    this.pushers.delete(name);
    const stopped = pusher.stop(this.options.closeWaitMs).finally(() => this.stopping.delete(stopped));
    this.stopping.add(stopped);
  }
}

/** Pushes one subscription: leases within its window, POSTs, acknowledges or gives back. */
class Pusher {
  private record: SubscriptionRecord;
  /** Where the record's push config sends its requests. */
  private target: PushTarget;
  private readonly window = new PushWindow();
  /** Leased and not yet acknowledged or given back: requests under way and ordered messages waiting their turn. */
  private outstanding = 0;
  private readonly tasks = new Set<Promise<void>>();
  private readonly pendingAcks: Delivery[] = [];
  private flushing?: Promise<void>;
  /** No more leasing: stopping was asked for. */
  private stopped = false;
  /** Stopping has waited long enough: the requests still under way are ended. */
  private ending = false;
  /** The batches whose requests are not all done, for stopping to end them. */
  private readonly batches = new Set<LeaseBatch>();
  private readonly nap = new Nap();
  /** The wake-up of the subscription's topic; armed again only after it fired (see armed). */
  private waiter?: Waiter;
  private waiterFired = false;
  private readonly loop: Promise<void>;

  constructor(
    record: SubscriptionRecord,
    private readonly delivery: DeliveryService,
    private readonly log: (message: string) => void,
  ) {
    this.record = record;
    this.target = pushTarget(record.name, record.pushConfig!);
    this.loop = this.run();
  }

  get uid(): string {
    return this.record.uid;
  }

  /** A newer version of the record (another endpoint, ack deadline, ...): later requests follow it. */
  update(record: SubscriptionRecord): void {
    if (record.version <= this.record.version) return;
    this.record = record;
    this.target = pushTarget(record.name, record.pushConfig!);
    this.nap.nudge();
  }

  async stop(waitMs: number): Promise<void> {
    this.stopped = true;
    this.nap.nudge();
    await this.loop;
    this.waiter?.cancel();
    const settled = Promise.all(this.tasks);
    await withTimeout(settled, waitMs).catch(() => {});
    this.ending = true;
    for (const batch of this.batches) batch.end();
    await settled;
    await this.flushing;
  }

  private async run(): Promise<void> {
    while (!this.stopped) {
      const { room, pauseLeftMs } = this.window.now(this.outstanding);
      if (room === 0) {
        // Backing off until the pause ends, or the window is full: a finished request nudges the loop.
        await this.nap.sleep(pauseLeftMs || undefined);
        continue;
      }
      try {
        const waiter = await this.armed();
        if (this.stopped) break;
        const leasedAtMs = Date.now();
        const { received, nextDueUs } = await this.delivery.pullOnce(this.record, room);
        if (this.stopped) {
          // Leased as stopping began: nobody will push these.
          if (received.length > 0) await this.release(received);
          break;
        }
        if (received.length > 0) {
          this.dispatch(received, leasedAtMs + this.record.ackDeadlineSeconds * 1000 - LEASE_MARGIN_MS);
          continue;
        }
        // Nothing available: sleep until a publish or nack wakes the topic, or a lease runs out,
        // and look again now and then anyway (a wake-up published while this node reconnected
        // to Redis is lost).
        const dueMs =
          nextDueUs === undefined ? LOOK_AGAIN_MS : Math.min(LOOK_AGAIN_MS, Math.ceil(nextDueUs / 1000) + 1);
        await this.nap.sleep(dueMs, waiter.woken);
      } catch (error) {
        // Redis away, or the subscription deleted: the listing its deletion announced stops this pusher.
        const deleted = error instanceof ApiError && error.status === 'NOT_FOUND';
        if (!deleted) this.log(`push delivery of ${this.record.name} failed: ${(error as Error).message}`);
        await this.nap.sleep(RETRY_MS);
      }
    }
  }

  /**
   * The topic's wake-up, armed before looking so that a publish between the look and the sleep
   * is not missed. One that has not fired yet serves the next look too; a fired one is armed
   * again, the new before the old is cancelled, so the channel stays subscribed.
   */
  private async armed(): Promise<Waiter> {
    if (this.waiter && !this.waiterFired) return this.waiter;
    // The pusher is the subscription's only consumer here: every wake-up of it is its own.
    const next = await this.delivery.armWaiter(this.record);
    this.waiter?.cancel();
    this.waiter = next;
    this.waiterFired = false;
    void next.woken.then(() => {
      if (this.waiter === next) this.waiterFired = true;
    });
    return next;
  }

  /** Starts the requests: each message at once, or one key's messages one after another. */
  private dispatch(received: LeasedMessage[], deadlineMs: number): void {
    this.outstanding += received.length;
    const batch = new LeaseBatch(received.length, deadlineMs, (done) => this.batches.delete(done));
    this.batches.add(batch);
    if (!this.record.enableMessageOrdering) {
      for (const message of received) this.track(this.pushOne(message, batch).then(() => {}));
      return;
    }
    const byKey = new Map<string, LeasedMessage[]>();
    for (const message of received) {
      const key = message.message.orderingKey;
      if (key === undefined) this.track(this.pushOne(message, batch).then(() => {}));
      else {
        const messages = byKey.get(key);
        if (messages) messages.push(message);
        else byKey.set(key, [message]);
      }
    }
    for (const messages of byKey.values()) this.track(this.pushInOrder(messages, batch));
  }

  private async pushInOrder(messages: LeasedMessage[], batch: LeaseBatch): Promise<void> {
    for (let i = 0; i < messages.length; i++) {
      const rest = messages.length - i;
      if (this.stopped && i > 0) {
        // Stopping: the rest were never sent and go back at once, the first of them taking its
        // successors along (the ordering cascade).
        try {
          await this.release(messages.slice(i));
        } finally {
          batch.done(rest);
          this.finish(rest);
        }
        return;
      }
      if (!(await this.pushOne(messages[i], batch))) {
        // The later ones come back with it (the ordering cascade), when its backoff or nack ends its lease.
        batch.done(rest - 1);
        this.finish(rest - 1);
        return;
      }
    }
  }

  /** One request; true when the endpoint acknowledged the message. */
  private async pushOne(message: LeasedMessage, batch: LeaseBatch): Promise<boolean> {
    try {
      if (batch.ended) {
        // Never sent. Stopping: it goes back. Else its lease ran out: it is available again already.
        if (this.ending) await this.release([message]);
        return false;
      }
      const acked = await push(this.target, message, batch);
      if (acked) {
        this.window.succeeded();
        this.acknowledge(message.delivery);
      } else if (this.ending) {
        await this.giveBack([message], 0);
      } else {
        const backoffMs = this.window.failed();
        // With a retry policy its backoff decides when the message comes again; else push backoff does.
        await this.giveBack([message], this.record.retryPolicy !== undefined ? 0 : backoffMs / 1000);
      }
      return acked;
    } finally {
      batch.done(1);
      this.finish(1);
    }
  }

  /** Acks are sent in batches: those that come while one is sent go in the next. */
  private acknowledge(delivery: Delivery): void {
    this.pendingAcks.push(delivery);
    this.flushing ??= this.flushAcks();
  }

  private async flushAcks(): Promise<void> {
    while (this.pendingAcks.length > 0) {
      const batch = this.pendingAcks.splice(0, 1000);
      try {
        await this.delivery.acknowledgeLeased(this.record, batch);
      } catch (error) {
        // Not lost: the messages are pushed again when their leases run out.
        this.log(`acknowledging pushed messages of ${this.record.name} failed: ${(error as Error).message}`);
      }
    }
    this.flushing = undefined;
  }

  /** The messages' leases end `seconds` from now (0: at once, a failed delivery attempt). */
  private async giveBack(messages: LeasedMessage[], seconds: number): Promise<void> {
    try {
      await this.delivery.modifyLeased(
        this.record,
        messages.map((message) => message.delivery),
        seconds,
      );
    } catch (error) {
      // Their leases run out by themselves.
      this.log(`giving back pushed messages of ${this.record.name} failed: ${(error as Error).message}`);
    }
  }

  /** Messages never sent go back at once, with no delivery attempt counted. */
  private async release(messages: LeasedMessage[]): Promise<void> {
    try {
      await this.delivery.releaseLeased(
        this.record,
        messages.map((message) => message.delivery),
      );
    } catch (error) {
      // Their leases run out by themselves.
      this.log(`giving back unsent messages of ${this.record.name} failed: ${(error as Error).message}`);
    }
  }

  private finish(count: number): void {
    this.outstanding -= count;
    this.nap.nudge();
  }

  private track(task: Promise<void>): void {
    const tracked = task
      .catch((error: Error) => this.log(`push of ${this.record.name} failed: ${error.message}`))
      .finally(() => this.tasks.delete(tracked));
    this.tasks.add(tracked);
  }
}

/**
 * The requests of the messages one pull leased: they end when the leases run out (after that
 * another node may push the messages) or when stopping has waited long enough. One timer per
 * batch, not per request: a timeout signal combined with a stop signal for every request cost a
 * push about as much CPU as writing it to its socket.
 */
class LeaseBatch extends RequestGroup {
  private readonly timer: NodeJS.Timeout;
  private left: number;

  constructor(
    count: number,
    deadlineMs: number,
    private readonly onDone: (batch: LeaseBatch) => void,
  ) {
    super();
    this.left = count;
    this.timer = setTimeout(() => this.end(), Math.max(0, deadlineMs - Date.now()));
  }

  /** `count` messages of the batch are done with: no request of theirs is under way or to come. */
  done(count: number): void {
    this.left -= count;
    if (this.left > 0) return;
    clearTimeout(this.timer);
    this.onDone(this);
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms).unref());
