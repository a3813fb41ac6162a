// What the raw streaming pull clients of the tests share (the WebSocket one in
// test/streaming/_ws.ts, the gRPC one in test/grpc/_client.ts): every server response is kept in
// arrival order, and a test takes the first pending one that matches a predicate, so that
// heartbeats and confirmations arriving in between do not get in the way.

export const isHeartbeat = (response: any) =>
  response !== null && typeof response === 'object' && Object.keys(response).length === 0;
export const hasMessages = (response: any) => Array.isArray(response?.receivedMessages);
export const ackIdsOf = (messages: { ackId: string }[]) => messages.map((m) => m.ackId);
export const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));

/** `promise`, or a rejection naming `what` after timeoutMs. */
export async function within<T>(promise: Promise<T>, timeoutMs: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

export abstract class StreamResponses<Message> {
  /** Every response the server sent, in arrival order. */
  protected readonly arrived: any[] = [];
  /** Responses not taken yet by take(). */
  protected pending: any[] = [];
  private readonly listeners = new Set<() => void>();

  /** `unit` names one response in error messages ("a frame", "a response"). */
  constructor(private readonly unit: string) {}

  /** How the stream ended ("stream closed (4014 ...)"), once it has; undefined while open. */
  protected abstract ending(): string | undefined;

  /** Sends the keep-alive request `{}`. */
  protected abstract sendKeepAlive(): void;

  protected arrive(response: any): void {
    this.arrived.push(response);
    this.pending.push(response);
    this.onArrival(response);
    this.notify();
  }

  /** Called with every response once it is kept, before the takes waiting are woken. */
  protected onArrival(_response: any): void {}

  /** Wakes the takes waiting (a response arrived, or the stream ended). */
  protected notify(): void {
    for (const listener of [...this.listeners]) listener();
  }

  /** Takes (removes) the first pending response that matches, waiting up to timeoutMs for it. */
  take(match: (response: any) => boolean = () => true, timeoutMs = 3000, what = this.unit): Promise<any> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const index = this.pending.findIndex(match);
        const ending = this.ending();
        if (index >= 0) {
          done();
          resolve(this.pending.splice(index, 1)[0]);
        } else if (ending) {
          done();
          reject(new Error(`${ending} while waiting for ${what}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`no ${what} within ${timeoutMs} ms; pending: ${JSON.stringify(this.pending).slice(0, 500)}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        this.listeners.delete(check);
      };
      this.listeners.add(check);
      check();
    });
  }

  /** Takes responses with messages until `count` messages arrived; returns the messages. */
  async takeMessages(count: number, timeoutMs = 3000): Promise<Message[]> {
    const out: Message[] = [];
    const giveUpAt = Date.now() + timeoutMs;
    while (out.length < count) {
      const response = await this.take(
        hasMessages,
        Math.max(1, giveUpAt - Date.now()),
        `${count - out.length} more message(s)`,
      );
      out.push(...response.receivedMessages);
    }
    return out;
  }

  /** True if no pending-or-new response matching `match` shows up within `ms` (nothing is taken). */
  async quiet(ms: number, match: (response: any) => boolean = hasMessages): Promise<boolean> {
    const startIndex = this.arrived.length;
    if (this.pending.some(match)) return false;
    await sleep(ms);
    return !this.arrived.slice(startIndex).some(match);
  }

  /** Drops the pending responses that match (e.g. old heartbeats before a keep-alive round trip). */
  discard(match: (response: any) => boolean): void {
    this.pending = this.pending.filter((response) => !match(response));
  }

  /**
   * Sends a keep-alive {} and waits for the {} answer: requests are handled in order, so every
   * request sent before it has been handled by then.
   */
  async roundTrip(timeoutMs = 3000): Promise<void> {
    this.discard(isHeartbeat);
    this.sendKeepAlive();
    await this.take(isHeartbeat, timeoutMs, 'keep-alive answer');
  }

  /** Responses received but not taken yet. */
  get untaken(): any[] {
    return [...this.pending];
  }
}
