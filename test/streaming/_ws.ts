// A raw WebSocket client for streaming pull tests (no Pub/Sub library in between): it keeps
// every server frame (test/helpers/stream-responses.ts: take the first pending frame that
// matches), and records how the stream ended (close code and reason).

import WebSocket from 'ws';
import { hasMessages, sleep, StreamResponses, within } from '../helpers/stream-responses.ts';

export { ackIdsOf, hasMessages, isHeartbeat, sleep } from '../helpers/stream-responses.ts';

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

export class StreamClient extends StreamResponses<ReceivedMessage> {
  readonly ws: WebSocket;
  /** Called with every frame as it arrives (before the takes waiting for it are woken). */
  onFrame?: (frame: any) => void;
  closeInfo?: CloseInfo;
  readonly opened: Promise<void>;
  readonly closed: Promise<CloseInfo>;
  /** Set when the upgrade was refused with an HTTP answer instead of a 101. */
  httpRefusal?: { status: number; body: string };

  constructor(url: string, options: WebSocket.ClientOptions = {}) {
    super('a frame');
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
      this.arrive(frame);
    });
  }

  static async connect(url: string, options?: WebSocket.ClientOptions): Promise<StreamClient> {
    const client = new StreamClient(url, options);
    await client.opened;
    return client;
  }

  /** Every frame the server sent, in arrival order (parsed JSON; raw text if it was not JSON). */
  get frames(): any[] {
    return this.arrived;
  }

  get isOpen(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  send(frame: object | string | Buffer, binary = false): void {
    const payload = typeof frame === 'string' || Buffer.isBuffer(frame) ? frame : JSON.stringify(frame);
    this.ws.send(payload, { binary });
  }

  override roundTrip(timeoutMs = 5000): Promise<void> {
    return super.roundTrip(timeoutMs);
  }

  waitClose(timeoutMs = 3000): Promise<CloseInfo> {
    return within(this.closed, timeoutMs, 'stream not closed');
  }

  terminate(): void {
    this.ws.terminate();
  }

  protected ending(): string | undefined {
    return this.closeInfo && `stream closed (${this.closeInfo.code} ${this.closeInfo.reason})`;
  }

  protected sendKeepAlive(): void {
    this.send({});
  }

  protected override onArrival(frame: any): void {
    this.onFrame?.(frame);
  }
}

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
