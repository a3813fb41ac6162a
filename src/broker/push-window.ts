/**
 * Flow control of one push subscription, as Pub/Sub's push delivery describes it
 * (https://cloud.google.com/pubsub/docs/push, "Push backoff" and "Delivery rate"): a window of
 * outstanding requests that starts small, grows by slow start on successes and shrinks on
 * failures, and an exponential backoff after failed pushes.
 *
 * - window: starts at INITIAL_WINDOW; +1 per success (so it doubles every round of requests
 *   that all succeed), halved on a failure, never below 1 nor above MAX_WINDOW;
 * - backoff: after n consecutive failures, min(MAX_BACKOFF_MS, INITIAL_BACKOFF_MS × 2^(n−1)):
 *   100 ms, 200 ms, 400 ms ... up to 60 s; a success resets it. No new request starts during
 *   a backoff, and the failed message is given back to be delivered again when it ends.
 */
export const INITIAL_WINDOW = 3;
export const MAX_WINDOW = 1000;
export const INITIAL_BACKOFF_MS = 100;
export const MAX_BACKOFF_MS = 60_000;

export class PushWindow {
  private size = INITIAL_WINDOW;
  private failures = 0;
  /** No new request starts before this time (this node's clock): the backoff of the last failure. */
  private pausedUntilMs = 0;

  constructor(private readonly nowMs: () => number = Date.now) {}

  /**
   * How many more requests may start now, with `outstanding` under way, and how long the backoff
   * pause has left (0: not paused; while it lasts there is no room). Both come from one reading
   * of the clock: read apart, a pause that ended between the readings said "no room" and "not
   * paused", and the caller then waited for a request to finish when none was under way.
   */
  now(outstanding: number): { room: number; pauseLeftMs: number } {
    const pauseLeftMs = Math.max(0, this.pausedUntilMs - this.nowMs());
    return { room: pauseLeftMs > 0 ? 0 : Math.max(0, Math.floor(this.size) - outstanding), pauseLeftMs };
  }

  get limit(): number {
    return Math.floor(this.size);
  }

  succeeded(): void {
    this.failures = 0;
    this.pausedUntilMs = 0;
    this.size = Math.min(MAX_WINDOW, this.size + 1);
  }

  /**
   * Records a failure and returns its backoff in milliseconds. Failures of requests that were
   * under way when an earlier one started the backoff do not lengthen it: only a request sent
   * after the pause can show that the endpoint still fails (else a burst of concurrent
   * timeouts would jump straight to the longest backoff).
   */
  failed(): number {
    const now = this.nowMs();
    if (now >= this.pausedUntilMs) this.failures++;
    this.size = Math.max(1, this.size / 2);
    const backoffMs = Math.min(MAX_BACKOFF_MS, INITIAL_BACKOFF_MS * 2 ** Math.min(this.failures - 1, 30));
    this.pausedUntilMs = Math.max(this.pausedUntilMs, now + backoffMs);
    return backoffMs;
  }
}
