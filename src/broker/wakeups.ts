import type { RedisClient } from '../redis/client.ts';

/**
 * Wakes long-polling pulls and streams when a topic gets messages (a publish, or a nack, lease
 * expiry or released key that makes some available again). The scripts PUBLISH on the topic's
 * wake channel how many messages became available (wakeMessage); this node keeps one subscriber
 * connection and listens only to channels that have waiters. Waiters arm before they look for
 * messages, so a publish between the look and the wait is never missed.
 *
 * Wake-ups are proportional to work, not to the number of waiters. The waiters of one
 * subscription in this process (a waiter group) queue in arming order, and a wake-up for n
 * messages wakes waiters from the front of the queue only until their capacities (how many
 * messages each would take) cover n; a waiter re-arms at the back, so every waiter gets its turn
 * (streams and long polls alike). A woken waiter that leaves without looking again (a pull that
 * answers, a stream whose flow control is full) while it may have left messages behind (it was
 * woken during its look, or took as many as it could) passes the wake-up on to the next waiter
 * (passOn): no message waits while another consumer is free, and a waiter that finds nothing
 * costs one look. Messages that become available by time alone (a lease deadline, a retry
 * backoff, a scheduled delivery time) need no publish: waiters report when their look found the
 * next one due (Waiter.lookAgainIn), and the group keeps one timer that wakes one waiter then.
 * Every process wakes its own waiters: each gets every wake-up message.
 */
export interface Waiter {
  /**
   * Resolves on the next wake-up on the channel with its message (a count: messages may be
   * available; CONFIG_CHANGED: a subscription of the topic changed), or '' when cancelled.
   */
  readonly woken: Promise<string>;
  /** A look found messages that become available in `ms` by time alone: a waiter looks then. */
  lookAgainIn(ms: number): void;
  /** Stops waiting; true when this waiter had been woken (by a wake-up it may not have acted on). */
  cancel(): boolean;
}

/** Published on a topic's wake channel when one of its subscriptions is updated, detached or deleted. */
export const CONFIG_CHANGED = 'config';

/** The wake-up message announcing `count` messages: the scripts publish the same (publish.lua). */
export const wakeMessage = (count: number) => String(count);

/** One armed waiter: `capacity` is how many messages its look takes at most. */
interface Entry {
  readonly capacity: number;
  readonly resolve: (message: string) => void;
  woken: boolean;
}

/** The waiters of one subscription on one channel, in this process (see Wakeups). */
class WaiterGroup {
  /** Armed and not yet woken, in arming order (a Set keeps insertion order). */
  readonly queue = new Set<Entry>();
  /** Every armed entry, woken or not: the channel stays subscribed while there are any. */
  live = 0;
  private dueAt = Infinity;
  private dueTimer?: NodeJS.Timeout;

  /** Wakes queued waiters, the longest waiting first, until their capacities cover `count`. */
  wake(count: number, message: string): void {
    let left = count;
    for (const entry of this.queue) {
      if (left <= 0) break;
      this.resolve(entry, message);
      left -= entry.capacity;
    }
  }

  wakeAll(message: string): void {
    for (const entry of this.queue) this.resolve(entry, message);
  }

  resolve(entry: Entry, message: string): void {
    this.queue.delete(entry);
    entry.woken = true;
    entry.resolve(message);
  }

  /** One timer for the group: the earliest time a waiter's look found, then one waiter looks. */
  lookAgainIn(ms: number): void {
    const at = Date.now() + ms;
    if (at >= this.dueAt) return;
    clearTimeout(this.dueTimer);
    this.dueAt = at;
    // A timer longer than setTimeout allows would fire at once; waking early only looks again.
    this.dueTimer = setTimeout(
      () => {
        this.dueAt = Infinity;
        this.wake(1, wakeMessage(1));
      },
      Math.min(ms, MAX_TIMER_MS),
    );
    this.dueTimer.unref();
  }

  clear(): void {
    clearTimeout(this.dueTimer);
  }
}

export class Wakeups {
  /** Channel → waiter groups by subscription ('' for waiters of the channel as a whole). */
  private readonly channels = new Map<string, Map<string, WaiterGroup>>();
  /** The SUBSCRIBE of each listened channel: every waiter waits for it to be confirmed. */
  private readonly subscribed = new Map<string, Promise<unknown>>();
  private closed = false;

  constructor(private readonly subscriber: RedisClient) {
    subscriber.on('message', (channel: string, message: string) => this.wake(channel, message));
  }

  /**
   * Arms a waiter on `channel` for the subscription `group` (see Wakeups), whose look takes up
   * to `capacity` messages. Without a group or capacity it is woken by every wake-up message of
   * the channel (the only waiter of its group).
   */
  async arm(channel: string, group = '', capacity = Infinity): Promise<Waiter> {
    let resolve!: (message: string) => void;
    const woken = new Promise<string>((done) => (resolve = done));
    let groups = this.channels.get(channel);
    if (!groups) {
      groups = new Map();
      this.channels.set(channel, groups);
    }
    let waiters = groups.get(group);
    if (!waiters) {
      waiters = new WaiterGroup();
      groups.set(group, waiters);
    }
    const entry: Entry = { capacity: Math.max(1, capacity), resolve, woken: false };
    waiters.queue.add(entry);
    waiters.live++;
    let cancelled = false;
    const cancel = () => {
      if (cancelled) return entry.woken;
      cancelled = true;
      const wasWoken = entry.woken;
      resolve('');
      this.remove(channel, group, entry);
      return wasWoken;
    };
    const lookAgainIn = (ms: number) => {
      if (!cancelled) this.channels.get(channel)?.get(group)?.lookAgainIn(ms);
    };
    if (this.closed) {
      cancel();
      return { woken, lookAgainIn, cancel };
    }
    let subscribing = this.subscribed.get(channel);
    if (!subscribing) {
      subscribing = this.subscriber.subscribe(channel);
      this.subscribed.set(channel, subscribing);
    }
    try {
      await subscribing;
    } catch (error) {
      if (this.subscribed.get(channel) === subscribing) this.subscribed.delete(channel);
      cancel();
      throw error;
    }
    return { woken, lookAgainIn, cancel };
  }

  /**
   * Hands a wake-up on to the next waiter of the group, if one is waiting: a woken waiter that
   * leaves without looking again, or whose look took all it could, calls this (see Wakeups).
   * With no waiter queued, every consumer of the group here is about to look anyway.
   */
  passOn(channel: string, group: string): void {
    this.channels.get(channel)?.get(group)?.wake(1, wakeMessage(1));
  }

  /** Releases every waiter (shutdown): their pulls answer with what they have. */
  async close(): Promise<void> {
    this.closed = true;
    for (const [channel, groups] of this.channels) {
      for (const waiters of groups.values()) {
        waiters.wakeAll('');
        waiters.clear();
      }
      this.channels.delete(channel);
    }
  }

  /**
   * A wake-up message: a count wakes, in each group, waiters enough to take that many
   * messages; anything else (CONFIG_CHANGED) wakes every waiter of the channel.
   */
  private wake(channel: string, message: string): void {
    const groups = this.channels.get(channel);
    if (!groups) return;
    const count = /^\d+$/.test(message) ? Number(message) : undefined;
    for (const waiters of groups.values()) {
      if (count === undefined) waiters.wakeAll(message);
      else waiters.wake(count, message);
    }
  }

  private remove(channel: string, group: string, entry: Entry): void {
    const groups = this.channels.get(channel);
    const waiters = groups?.get(group);
    if (!groups || !waiters) return;
    waiters.queue.delete(entry);
    if (--waiters.live > 0) return;
    waiters.clear();
    groups.delete(group);
    if (groups.size > 0) return;
    this.channels.delete(channel);
    this.subscribed.delete(channel);
    // Nobody waits any more; a failed unsubscribe only costs an unused subscription.
    this.subscriber.unsubscribe(channel).catch(() => {});
  }
}

/** The longest delay setTimeout takes (2^31 − 1 ms, about 24.8 days). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A delivery loop's sleep: it ends after `ms` (never, if undefined), when `woken` settles, or when
 * the loop is nudged (flow-control room, a close, new settings), whichever comes first. A nudge
 * while the loop is awake (in the middle of a pull, say) ends its next sleep at once, so that
 * what the nudge announced is never slept through.
 */
export class Nap {
  private wake?: () => void;
  private nudged = false;

  nudge(): void {
    if (this.wake) this.wake();
    else this.nudged = true;
  }

  sleep(ms: number | undefined, woken?: Promise<unknown>): Promise<void> {
    if (this.nudged) {
      this.nudged = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const done = () => {
        clearTimeout(timer);
        if (this.wake === done) this.wake = undefined;
        resolve();
      };
      // A timer longer than setTimeout allows would fire at once; waking early only looks again.
      if (ms !== undefined) timer = setTimeout(done, Math.min(ms, MAX_TIMER_MS));
      this.wake = done;
      woken?.then(done);
    });
  }
}
