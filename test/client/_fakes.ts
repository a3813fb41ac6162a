// Test doubles for the subscriber's unit tests: a WebSocket the test drives by hand, and a fake
// clock (setTimeout, setInterval, Date.now) advanced explicitly.

type Listener = (event: any) => void;

/** A WebSocket whose server side is the test: open(), serverSend(), serverClose(). */
export class FakeSocket {
  static instances: FakeSocket[] = [];
  static now: () => number = () => Date.now();
  readyState = 0;
  /** Every frame the client sent, parsed, with the (fake) time it was sent. */
  sent: { at: number; frame: any }[] = [];
  closedByClient?: { code?: number; reason?: string };
  private readonly listeners: Record<string, Listener[]> = { open: [], message: [], close: [], error: [] };

  constructor(readonly url: string) {
    FakeSocket.instances.push(this);
  }

  static reset(): void {
    FakeSocket.instances = [];
  }

  static last(): FakeSocket {
    return FakeSocket.instances[FakeSocket.instances.length - 1];
  }

  addEventListener(type: string, listener: Listener): void {
    this.listeners[type].push(listener);
  }

  send(data: string): void {
    if (this.readyState !== 1) throw new Error('InvalidStateError: not open');
    this.sent.push({ at: Date.now(), frame: JSON.parse(data) });
  }

  close(code?: number, reason?: string): void {
    this.closedByClient = { code, reason };
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.emit('close', { code: code ?? 1005, reason: reason ?? '' });
  }

  open(): void {
    this.readyState = 1;
    this.emit('open', {});
  }

  serverSend(frame: object): void {
    this.emit('message', { data: JSON.stringify(frame) });
  }

  serverClose(code: number, reason = ''): void {
    this.readyState = 3;
    this.emit('close', { code, reason });
  }

  /** Frames sent so far, optionally only those with a given field. */
  frames(field?: string): any[] {
    return this.sent.map(({ frame }) => frame).filter((frame) => field === undefined || frame[field] !== undefined);
  }

  private emit(type: string, event: object): void {
    for (const listener of this.listeners[type]) listener(event);
  }
}

interface FakeTimer {
  at: number;
  fn: () => void;
  interval?: number;
}

/** Replaces setTimeout/setInterval/Date.now until uninstall(); advance() fires timers in order. */
export class FakeClock {
  now = 1_700_000_000_000;
  private readonly timers = new Map<number, FakeTimer>();
  private nextId = 1;
  private saved?: {
    setTimeout: typeof setTimeout;
    clearTimeout: typeof clearTimeout;
    setInterval: typeof setInterval;
    clearInterval: typeof clearInterval;
    dateNow: typeof Date.now;
  };

  install(): this {
    this.saved = { setTimeout, clearTimeout, setInterval, clearInterval, dateNow: Date.now };
    const g = globalThis as any;
    g.setTimeout = (fn: () => void, ms = 0) => this.add(fn, ms);
    g.setInterval = (fn: () => void, ms = 0) => this.add(fn, ms, Math.max(1, ms));
    g.clearTimeout = g.clearInterval = (id: number | undefined) => {
      if (id !== undefined) this.timers.delete(id);
    };
    Date.now = () => this.now;
    return this;
  }

  uninstall(): void {
    if (!this.saved) return;
    const g = globalThis as any;
    g.setTimeout = this.saved.setTimeout;
    g.clearTimeout = this.saved.clearTimeout;
    g.setInterval = this.saved.setInterval;
    g.clearInterval = this.saved.clearInterval;
    Date.now = this.saved.dateNow;
    this.saved = undefined;
  }

  /** Moves time forward by `ms`, firing due timers in time order, settling promises after each. */
  async advance(ms: number): Promise<void> {
    const end = this.now + ms;
    for (;;) {
      let nextId: number | undefined;
      let next: FakeTimer | undefined;
      for (const [id, timer] of this.timers) {
        if (timer.at <= end && (!next || timer.at < next.at)) {
          next = timer;
          nextId = id;
        }
      }
      if (!next || nextId === undefined) break;
      this.now = Math.max(this.now, next.at);
      if (next.interval) next.at += next.interval;
      else this.timers.delete(nextId);
      next.fn();
      await settle();
    }
    this.now = end;
    await settle();
  }

  private add(fn: () => void, ms: number, interval?: number): number {
    const id = this.nextId++;
    this.timers.set(id, { at: this.now + Math.max(0, ms), fn, interval });
    return id;
  }
}

/** Lets pending promise callbacks run. */
export async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}
