// A raw WebSocket client for streaming pull tests (no Pub/Sub library in between): it keeps
// every server frame, lets a test take the first pending frame that matches a predicate (so
// heartbeats and confirmations arriving in between do not get in the way), and records how the
// stream ended (close code and reason).

import WebSocket from 'ws';

export interface CloseInfo {
  code: number;
  reason: string;
}

export interface ReceivedMessage {
  ackId: string;
  message: {
    data?: string;
    attributes?: Record<string, string>;
    messageId: string;
    publishTime: string;
    orderingKey?: string;
  };
}

export class StreamClient {
  readonly ws: WebSocket;
  /** Every frame the server sent, in arrival order (parsed JSON; raw text if it was not JSON). */
  readonly frames: any[] = [];
  /** Frames not taken yet by take(). */
  private pending: any[] = [];
  /** Called with every frame as it arrives (before it is queued for take()). */
  onFrame?: (frame: any) => void;
  private readonly listeners = new Set<() => void>();
  closeInfo?: CloseInfo;
  readonly opened: Promise<void>;
  readonly closed: Promise<CloseInfo>;
  /** Set when the upgrade was refused with an HTTP answer instead of a 101. */
  httpRefusal?: { status: number; body: string };

  constructor(url: string, options: WebSocket.ClientOptions = {}) {
    this.ws = new WebSocket(url, options);
    this.opened = new Promise((resolve, reject) => {
      this.ws.once('open', () => resolve());
      this.ws.once('error', reject);
      this.ws.once('unexpected-response', (_request, response) => {
        let body = '';
        response.on('data', (chunk: Buffer) => (body += chunk));
        response.on('end', () => {
          this.httpRefusal = { status: response.statusCode ?? 0, body };
          reject(new Error(`upgrade refused with HTTP ${response.statusCode}`));
        });
        response.on('error', () => reject(new Error(`upgrade refused with HTTP ${response.statusCode}`)));
      });
    });
    this.opened.catch(() => {});
    this.closed = new Promise((resolve) => {
      this.ws.on('close', (code, reason) => {
        this.closeInfo = { code, reason: reason.toString() };
        resolve(this.closeInfo);
        this.notify();
      });
    });
    this.ws.on('error', () => {});
    this.ws.on('message', (data: Buffer) => {
      let frame: any;
      try {
        frame = JSON.parse(data.toString());
      } catch {
        frame = data.toString();
      }
      this.frames.push(frame);
      this.pending.push(frame);
      this.onFrame?.(frame);
      this.notify();
    });
  }

  static async connect(url: string, options?: WebSocket.ClientOptions): Promise<StreamClient> {
    const client = new StreamClient(url, options);
    await client.opened;
    return client;
  }

  get isOpen(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  send(frame: object | string | Buffer, binary = false): void {
    const payload = typeof frame === 'string' || Buffer.isBuffer(frame) ? frame : JSON.stringify(frame);
    this.ws.send(payload, { binary });
  }

  /** Takes (removes) the first pending frame that matches, waiting up to timeoutMs for it. */
  take(match: (frame: any) => boolean = () => true, timeoutMs = 3000, what = 'a frame'): Promise<any> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const index = this.pending.findIndex(match);
        if (index >= 0) {
          done();
          resolve(this.pending.splice(index, 1)[0]);
        } else if (this.closeInfo) {
          done();
          reject(
            new Error(`stream closed (${this.closeInfo.code} ${this.closeInfo.reason}) while waiting for ${what}`),
          );
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

  /** Takes receivedMessages frames until `count` messages arrived; returns the messages. */
  async takeMessages(count: number, timeoutMs = 3000): Promise<ReceivedMessage[]> {
    const out: ReceivedMessage[] = [];
    const giveUpAt = Date.now() + timeoutMs;
    while (out.length < count) {
      const frame = await this.take(
        (f) => Array.isArray(f?.receivedMessages),
        Math.max(1, giveUpAt - Date.now()),
        `${count - out.length} more message(s)`,
      );
      out.push(...frame.receivedMessages);
    }
    return out;
  }

  /** True if no pending-or-new frame matching `match` shows up within `ms` (frames are not taken). */
  async quiet(
    ms: number,
    match: (frame: any) => boolean = (f) => Array.isArray(f?.receivedMessages),
  ): Promise<boolean> {
    const startIndex = this.frames.length;
    if (this.pending.some(match)) return false;
    await new Promise((done) => setTimeout(done, ms));
    return !this.frames.slice(startIndex).some(match);
  }

  /** Drops the pending frames that match (e.g. old heartbeats before a keep-alive round trip). */
  discard(match: (frame: any) => boolean): void {
    this.pending = this.pending.filter((frame) => !match(frame));
  }

  /**
   * Sends a keep-alive {} and waits for the {} answer: frames are handled in order, so every
   * frame sent before it has been handled by then.
   */
  async roundTrip(timeoutMs = 5000): Promise<void> {
    this.discard(isHeartbeat);
    this.send({});
    await this.take(isHeartbeat, timeoutMs, 'keep-alive answer');
  }

  /** Frames received but not taken yet. */
  get untaken(): any[] {
    return [...this.pending];
  }

  async waitClose(timeoutMs = 3000): Promise<CloseInfo> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`stream not closed within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      return await Promise.race([this.closed, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  terminate(): void {
    this.ws.terminate();
  }

  private notify(): void {
    for (const listener of [...this.listeners]) listener();
  }
}

export const isHeartbeat = (frame: any) =>
  frame !== null && typeof frame === 'object' && Object.keys(frame).length === 0;
export const hasMessages = (frame: any) => Array.isArray(frame?.receivedMessages);
export const ackIdsOf = (messages: ReceivedMessage[]) => messages.map((m) => m.ackId);
export const sleep = (ms: number) => new Promise<void>((done) => setTimeout(done, ms));
/** The delivery generation inside one of the broker's ack IDs (<uid>-<seq36>-<gen36>-<mac>). */
export const generationOf = (ackId: string) => parseInt(ackId.split('-')[2], 36);

/** Waits until one of the clients has a message frame and takes it (never leaves a take pending). */
export async function takeFromAny(
  clients: StreamClient[],
  timeoutMs = 3000,
): Promise<{ client: StreamClient; messages: ReceivedMessage[] }> {
  const giveUpAt = Date.now() + timeoutMs;
  for (;;) {
    for (const client of clients) {
      if (client.untaken.some(hasMessages))
        return { client, messages: (await client.take(hasMessages)).receivedMessages };
    }
    if (Date.now() > giveUpAt) throw new Error(`no message on any of ${clients.length} streams within ${timeoutMs} ms`);
    await sleep(10);
  }
}
