import type { RedisClient } from '../redis/client.ts';

/**
 * Wakes long-polling pulls when a topic gets messages (publish, or a nack that makes one
 * available again). The scripts PUBLISH on the topic's wake channel; this node keeps one
 * subscriber connection and listens only to channels that have waiters. Waiters arm before
 * they look for messages, so a publish between the look and the wait is never missed.
 */
export interface Waiter {
  /**
   * Resolves on the next wake-up on the channel with its message ('1': messages may be
   * available; CONFIG_CHANGED: a subscription of the topic changed), or '' when cancelled.
   */
  readonly woken: Promise<string>;
  cancel(): void;
}

/** Published on a topic's wake channel when one of its subscriptions is updated, detached or deleted. */
export const CONFIG_CHANGED = 'config';

export class Wakeups {
  private readonly waiters = new Map<string, Set<(message: string) => void>>();
  /** The SUBSCRIBE of each listened channel: every waiter waits for it to be confirmed. */
  private readonly subscribed = new Map<string, Promise<unknown>>();
  private closed = false;

  constructor(private readonly subscriber: RedisClient) {
    subscriber.on('message', (channel: string, message: string) => this.wake(channel, message));
  }

  async arm(channel: string): Promise<Waiter> {
    let resolve!: (message: string) => void;
    const woken = new Promise<string>((done) => (resolve = done));
    let set = this.waiters.get(channel);
    if (!set) {
      set = new Set();
      this.waiters.set(channel, set);
    }
    set.add(resolve);
    const cancel = () => {
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

  /** Releases every waiter (shutdown): their pulls answer with what they have. */
  async close(): Promise<void> {
    this.closed = true;
    for (const [channel, set] of this.waiters) {
      for (const resolve of set) resolve('');
      this.waiters.delete(channel);
    }
  }

  private wake(channel: string, message: string): void {
    const set = this.waiters.get(channel);
    if (!set) return;
    for (const resolve of set) resolve(message);
  }

  private remove(channel: string, resolve: (message: string) => void): void {
    const set = this.waiters.get(channel);
    if (!set) return;
    set.delete(resolve);
    if (set.size === 0) {
      this.waiters.delete(channel);
      this.subscribed.delete(channel);
      // Nobody waits any more; a failed unsubscribe only costs an unused subscription.
      this.subscriber.unsubscribe(channel).catch(() => {});
    }
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
