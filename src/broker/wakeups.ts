import type { RedisClient } from '../redis/client.ts';

/**
 * Wakes the consumers of a subscription when its topic gets messages (a publish, or a nack, lease
 * expiry or released key that makes some available again). The scripts PUBLISH on the topic's
 * wake channel how many messages became available; this node keeps one subscriber
 * connection and listens only to channels that have waiters. Each subscription has one waiter
 * in this process, its leaser (leaser.ts) or its pusher (push.ts), which serves all of the
 * subscription's consumers here: wake-ups are proportional to subscriptions, not to consumers.
 * A waiter arms before it looks for messages, so a publish between the look and the wait is never
 * missed; one that looks again arms anew before cancelling the fired one, so the channel stays
 * subscribed. Every process wakes its own waiters: each gets every wake-up message.
 */
export interface Waiter {
  /**
   * Resolves on the next wake-up on the channel with its message (a count: messages may be
   * available; CONFIG_CHANGED: a subscription of the topic changed), or '' when cancelled.
   */
  readonly woken: Promise<string>;
  /** Stops waiting. */
  cancel(): void;
}

/** Published on a topic's wake channel when one of its subscriptions is updated, detached or deleted. */
export const CONFIG_CHANGED = 'config';

export class Wakeups {
  /** Channel → its armed waiters' resolvers: the channel stays subscribed while there are any. */
  private readonly channels = new Map<string, Set<(message: string) => void>>();
  /** The SUBSCRIBE of each listened channel: every waiter waits for it to be confirmed. */
  private readonly subscribed = new Map<string, Promise<unknown>>();
  private closed = false;

  constructor(private readonly subscriber: RedisClient) {
    subscriber.on('message', (channel: string, message: string) => {
      for (const resolve of this.channels.get(channel) ?? []) resolve(message);
    });
  }

  /** Arms a waiter on `channel`: woken by the channel's next wake-up message, whatever it is. */
  async arm(channel: string): Promise<Waiter> {
    let resolve!: (message: string) => void;
    const woken = new Promise<string>((done) => (resolve = done));
    let waiters = this.channels.get(channel);
    if (!waiters) {
      waiters = new Set();
      this.channels.set(channel, waiters);
    }
    waiters.add(resolve);
    let cancelled = false;
    const cancel = () => {
      if (cancelled) return;
      cancelled = true;
      resolve('');
      this.remove(channel, resolve);
    };
    if (this.closed) {
      cancel();
      return { woken, cancel };
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
    return { woken, cancel };
  }

  /** Releases every waiter (shutdown). */
  async close(): Promise<void> {
    this.closed = true;
    for (const [channel, waiters] of this.channels) {
      for (const resolve of waiters) resolve('');
      this.channels.delete(channel);
    }
  }

  private remove(channel: string, resolve: (message: string) => void): void {
    const waiters = this.channels.get(channel);
    if (!waiters) return;
    waiters.delete(resolve);
    if (waiters.size > 0) return;
    this.channels.delete(channel);
    this.subscribed.delete(channel);
    // Nobody waits any more; a failed unsubscribe only costs an unused subscription.
    this.subscriber.unsubscribe(channel).catch(() => {});
  }
}

/** The longest delay setTimeout takes (2^31 − 1 ms, about 24.8 days). */
export const MAX_TIMER_MS = 2 ** 31 - 1;

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
