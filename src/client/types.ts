// Public types of the client. Structural on purpose: the browser's WebSocket and fetch, and the
// `ws` package's WebSocket in Node 20, all fit without any DOM or Node typings.

/** The subset of the WebSocket API the subscriber uses (the browser's, or the `ws` package's). */
export interface WebSocketLike {
  readonly readyState: number;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  // biome-ignore lint/suspicious/noExplicitAny: the browser's and the ws package's event types differ; any lets both fit
  addEventListener(type: 'open' | 'message' | 'close' | 'error', listener: (event: any) => void): void;
}

/** A WebSocket class: `globalThis.WebSocket` in browsers, `WebSocket` from 'ws' in Node 20. */
export type WebSocketConstructor = new (url: string, protocols?: string[]) => WebSocketLike;

/** The subset of the fetch API the client uses. */
export type FetchLike = (
  url: string,
  init: { method: string; headers: Record<string, string>; body?: string },
) => Promise<{ ok: boolean; status: number; text(): Promise<string> }>;

export interface PubSubClientOptions {
  /** Base URL of the broker, e.g. `http://localhost:8085` (https:// gives wss:// streams). */
  endpoint: string;
  /** Project of the topics and subscriptions named by short ID. */
  projectId: string;
  /** WebSocket class for streaming pull. Default `globalThis.WebSocket` (Node 20 has none: pass 'ws'). */
  WebSocket?: WebSocketConstructor;
  /** fetch implementation for REST calls. Default `globalThis.fetch`. */
  fetch?: FetchLike;
  /** Extra headers for REST calls. Browsers cannot set headers on WebSockets: see `token`. */
  headers?: Record<string, string>;
  /**
   * A bearer token of a broker that authenticates (its README, "Authentication"): sent as
   * `Authorization: Bearer <token>` on REST calls, and on streams as the WebSocket subprotocol
   * `bearer.<token>`, which browsers can send. A subprotocol holds only letters, digits and
   * `-._~`, so the token must too (a JWT, or a base64url token, does).
   */
  token?: string;
}

/** A message to publish. */
export interface PublishMessage {
  /** The payload; a string is sent as its UTF-8 bytes. */
  data?: Uint8Array | string;
  attributes?: Record<string, string>;
  /** Messages with the same key are delivered in publish order on subscriptions with message ordering. */
  orderingKey?: string;
}

/**
 * The outcome of an acknowledgement or a nack, as exactly-once subscriptions report it:
 * SUCCESS applied; INVALID the ack ID had expired, was superseded by a redelivery or was already
 * settled; UNORDERED an earlier message of the same ordering key is not acknowledged yet;
 * TEMPORARY_FAILURE the broker failed transiently (already retried); OTHER unknown (e.g. the
 * subscriber closed first, or the connection dropped before the confirmation and the retry found
 * the ack ID used up). Without exactly-once delivery every send reports SUCCESS.
 */
export type AckResponse = 'SUCCESS' | 'INVALID' | 'UNORDERED' | 'TEMPORARY_FAILURE' | 'OTHER';

/**
 * connecting: opening the first stream; open: streaming; reconnecting: waiting to reopen (or
 * reopening) after a dropped stream; closing: close() is draining; closed: stopped for good.
 */
export type SubscriberState = 'connecting' | 'open' | 'reconnecting' | 'closing' | 'closed';

export interface SubscribeOptions {
  /** Lease length of delivered messages, 10 to 600 seconds (default 60). Leases are renewed every half of it. */
  streamAckDeadlineSeconds?: number;
  /** At most this many messages are handed out and not yet acked or nacked (default 1000; 0 = no limit). */
  maxOutstandingMessages?: number;
  /** At most this many bytes of message data are handed out and not yet settled (default: no limit). */
  maxOutstandingBytes?: number;
  /** Leases are renewed for at most this long after a message arrives (default 3600 s); then it may be redelivered. */
  maxExtensionSeconds?: number;
  /** Identifies this subscriber across reconnects (default: random, kept for the subscriber's life). */
  clientId?: string;
  /** Backoff between reconnects: exponential from initialDelayMs to maxDelayMs, with jitter (default 100 ms, 10 s). */
  reconnect?: { initialDelayMs?: number; maxDelayMs?: number };
  /** How long close() waits for running handlers and for the broker to take the last acks (default 30 s). */
  closeTimeoutMs?: number;
  /** Called with stream errors (PubSubError, `retryable` says whether it reconnects) and handler failures (HandlerError). */
  onError?: (error: Error) => void;
  /** Called on every state change. */
  onStateChange?: (state: SubscriberState) => void;
}

/** What the broker says about the subscription (sent when a stream opens and when it changes). */
export interface SubscriptionProperties {
  exactlyOnceDeliveryEnabled: boolean;
  messageOrderingEnabled: boolean;
}
