import { utf8Decode } from './encoding.ts';
import { describe, PubSubError, type ErrorBody } from './errors.ts';
import type { ReceivedFrame } from './message.ts';
import type { SubscriptionProperties, WebSocketLike } from './types.ts';

/** The client sends `{}` this often; a stream that answers nothing in between is considered dead. */
const KEEP_ALIVE_MS = 30_000;
const WS_OPEN = 1;

/** A frame the broker sends on a streaming pull. */
export interface ServerFrame {
  receivedMessages?: ReceivedFrame[];
  subscriptionProperties?: Partial<SubscriptionProperties>;
  acknowledgeConfirmation?: Confirmation;
  modifyAckDeadlineConfirmation?: Confirmation;
  error?: ErrorBody;
}

/** The broker's answer to one frame of acks or deadline changes, on exactly-once subscriptions. */
export interface Confirmation {
  ackIds?: string[];
  invalidAckIds?: string[];
  unorderedAckIds?: string[];
  temporaryFailedAckIds?: string[];
}

/** What the owner of a StreamingPull hears from it. */
export interface StreamEvents {
  /** A frame from the broker (never an error frame). `opened`: the first of its stream, which is open from now on. */
  frame(frame: ServerFrame, opened: boolean): void;
  /**
   * The stream closed or dropped, or no WebSocket could be made. A retryable error is followed by
   * a new stream (unless stopped); after any other the stream stays closed.
   */
  ended(error: PubSubError): void;
  /** A frame that could not be read or handled; the stream goes on. */
  error(error: PubSubError): void;
}

/** One WebSocket. */
interface Connection {
  ws: WebSocketLike;
  /** The broker's first frame arrived. */
  open: boolean;
  createdAt: number;
  lastReceivedAt: number;
  keepAliveSentAt: number;
  emptyFrames: number;
  /** The `{"error": ...}` frame sent just before the broker closed the stream. */
  error?: ErrorBody;
}

type Timer = ReturnType<typeof setTimeout>;

/**
 * The WebSocket of a streaming pull, one at a time: sends the first frame on each new stream,
 * sends keep-alives and drops a stream that stops answering, and opens a new stream after a
 * retryable end, with exponential backoff capped at maxDelayMs and jitter.
 */
export class StreamingPull {
  private conn?: Connection;
  /** Reconnects since a stream last opened. */
  private attempt = 0;
  private stopped = false;
  private reconnectTimer?: Timer;
  private keepAliveTimer?: ReturnType<typeof setInterval>;

  constructor(
    private readonly url: string,
    private readonly openSocket: (url: string) => WebSocketLike,
    /** Sent first on every stream. */
    private readonly firstFrame: object,
    private readonly backoff: { initialDelayMs: number; maxDelayMs: number },
    private readonly events: StreamEvents,
  ) {}

  /** Starts the keep-alives and opens the first stream. */
  start(): void {
    this.keepAliveTimer = setInterval(() => this.keepAlive(), KEEP_ALIVE_MS);
    // On the next tick, so that listeners added right after subscribe() see everything.
    this.reconnectTimer = setTimeout(() => this.connect(), 0);
  }

  /** A stream is there and the broker has sent its first frame on it. */
  get isOpen(): boolean {
    return this.conn?.open === true;
  }

  /** Sends a frame on the current stream; false if there is none or the socket would not take it. */
  send(frame: object): boolean {
    return this.conn !== undefined && sendFrame(this.conn.ws, frame);
  }

  /**
   * Sends `{}` on the open stream (undefined if none is open). The broker handles a stream's
   * frames in order and answers `{}` with `{}`: once `answered()`, it has read everything sent
   * before. `gone()`: the stream has ended.
   */
  barrier(): { answered(): boolean; gone(): boolean } | undefined {
    const conn = this.conn;
    if (!conn?.open) return undefined;
    const before = conn.emptyFrames;
    sendFrame(conn.ws, {});
    return { answered: () => conn.emptyFrames > before, gone: () => this.conn !== conn };
  }

  /** No new streams from now on; the current one stays. */
  stop(): void {
    this.stopped = true;
    if (this.reconnectTimer !== undefined) clearTimeout(this.reconnectTimer);
    this.reconnectTimer = undefined;
  }

  /** Stops, and closes the current stream (its close is not reported). */
  close(): void {
    this.stop();
    clearInterval(this.keepAliveTimer);
    const conn = this.conn;
    this.conn = undefined;
    if (conn) closeSocket(conn.ws, 1000, 'closed by the client');
  }

  private connect(): void {
    this.reconnectTimer = undefined;
    let ws: WebSocketLike;
    try {
      ws = this.openSocket(this.url);
    } catch (error) {
      this.events.ended(
        new PubSubError('INVALID_ARGUMENT', `Cannot open a WebSocket to ${this.url}: ${describe(error)}`),
      );
      return;
    }
    const now = Date.now();
    const conn: Connection = {
      ws,
      open: false,
      createdAt: now,
      lastReceivedAt: now,
      keepAliveSentAt: 0,
      emptyFrames: 0,
    };
    this.conn = conn;
    ws.addEventListener('open', () => {
      if (this.conn === conn) sendFrame(ws, this.firstFrame);
    });
    ws.addEventListener('message', (event: { data?: unknown }) => {
      if (this.conn !== conn) return;
      try {
        this.onMessage(conn, event.data);
      } catch (error) {
        // Never let a surprise escape into the WebSocket's event loop (in Node: an uncaught exception).
        this.events.error(
          new PubSubError('INTERNAL', `A streaming pull frame could not be handled: ${describe(error)}`, {
            retryable: true,
          }),
        );
      }
    });
    ws.addEventListener('close', (event: { code?: number; reason?: string }) => {
      this.onClose(conn, event.code ?? 1006, event.reason ?? '');
    });
    ws.addEventListener('error', () => {
      // A close event always follows; it decides what happens next.
    });
  }

  private onMessage(conn: Connection, data: unknown): void {
    let frame: ServerFrame;
    try {
      const text = typeof data === 'string' ? data : utf8Decode(toBytes(data));
      frame = JSON.parse(text) as ServerFrame;
      if (frame === null || typeof frame !== 'object') throw new Error('not an object');
    } catch {
      this.events.error(
        new PubSubError('INTERNAL', 'The broker sent a streaming pull frame that is not a JSON object.', {
          retryable: true,
        }),
      );
      return;
    }
    conn.lastReceivedAt = Date.now();
    if (frame.error) {
      conn.error = frame.error;
      return;
    }
    const opened = !conn.open;
    if (opened) {
      conn.open = true;
      this.attempt = 0;
    }
    this.events.frame(frame, opened);
    if (Object.keys(frame).length === 0) conn.emptyFrames++;
  }

  private onClose(conn: Connection, code: number, reason: string): void {
    if (this.conn !== conn) return;
    this.conn = undefined;
    const error = PubSubError.fromClose(code, reason, conn.error);
    this.events.ended(error);
    if (!error.retryable || this.stopped) return;
    const { initialDelayMs, maxDelayMs } = this.backoff;
    const base = Math.min(maxDelayMs, initialDelayMs * 2 ** Math.min(this.attempt, 30));
    this.attempt++;
    this.reconnectTimer = setTimeout(() => this.connect(), base / 2 + (Math.random() * base) / 2);
  }

  /** Drops a stream that stopped answering, as if it had closed with 1006. */
  private drop(conn: Connection, message: string): void {
    // Detached first, so that the close event of this socket is ignored, whenever it comes.
    conn.error ??= { status: 'UNAVAILABLE', message };
    this.onClose(conn, 1006, '');
    closeSocket(conn.ws, 4000, 'keep-alive timeout');
  }

  /** Every KEEP_ALIVE_MS: `{}` on an open stream (the broker answers it), or drop a silent one. */
  private keepAlive(): void {
    const conn = this.conn;
    if (!conn) return;
    const now = Date.now();
    if (!conn.open) {
      if (now - conn.createdAt >= KEEP_ALIVE_MS) this.drop(conn, 'The streaming pull did not open within 30 s.');
    } else if (conn.keepAliveSentAt > 0 && conn.lastReceivedAt < conn.keepAliveSentAt) {
      this.drop(conn, 'The broker did not answer a keep-alive within 30 s.');
    } else if (sendFrame(conn.ws, {})) {
      conn.keepAliveSentAt = now;
    }
  }
}

function sendFrame(ws: WebSocketLike, frame: object): boolean {
  if (ws.readyState !== WS_OPEN) return false;
  try {
    ws.send(JSON.stringify(frame));
    return true;
  } catch {
    return false;
  }
}

function toBytes(data: unknown): Uint8Array {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  throw new TypeError('unsupported frame data');
}

/** Closes a socket that may already be closed. */
function closeSocket(ws: WebSocketLike, code: number, reason: string): void {
  try {
    ws.close(code, reason);
  } catch {
    // already closed
  }
}
