import { toBase64, utf8Encode } from './encoding.ts';
import { PubSubError } from './errors.ts';
import type { MessageHandler } from './leases.ts';
import { Subscriber } from './subscriber.ts';
import type {
  FetchLike,
  PubSubClientOptions,
  PublishMessage,
  SubscribeOptions,
  WebSocketConstructor,
} from './types.ts';

/** The broker's publish limits: 1000 messages per request, 10 MB of data (here counted base64-encoded). */
const MAX_BATCH_MESSAGES = 1000;
const MAX_BATCH_BYTES = 9_000_000;

/**
 * A client of the broker: publishes over REST and subscribes over streaming pull (WebSocket).
 * Uses only web APIs (fetch, WebSocket, TextEncoder, btoa), so it runs in browsers and Node 20.
 *
 *   const client = new PubSubClient({ endpoint: 'http://localhost:8085', projectId: 'demo', WebSocket });
 *   await client.publish('orders', [{ data: 'hello' }]);
 *   const subscriber = client.subscribe('orders-sub', async (message) => { ...; message.ack(); });
 */
export class PubSubClient {
  /** Base URL of the broker, without a trailing slash. */
  readonly endpoint: string;
  readonly projectId: string;
  private readonly WebSocketImpl?: WebSocketConstructor;
  private readonly fetchImpl?: FetchLike;
  private readonly headers: Record<string, string>;
  /** The subprotocols every stream offers: with a token, the one that carries it. */
  private readonly streamProtocols?: string[];

  constructor(options: PubSubClientOptions) {
    if (!/^https?:\/\/[^/]/i.test(options.endpoint ?? '')) {
      throw new TypeError(`endpoint must be an http:// or https:// URL, not ${JSON.stringify(options.endpoint)}.`);
    }
    if (!options.projectId) throw new TypeError('projectId is required.');
    this.endpoint = options.endpoint.replace(/\/+$/, '');
    this.projectId = options.projectId;
    const globals = globalThis as { WebSocket?: WebSocketConstructor; fetch?: FetchLike };
    this.WebSocketImpl = options.WebSocket ?? globals.WebSocket;
    this.fetchImpl = options.fetch ?? (globals.fetch ? globals.fetch.bind(globalThis) : undefined);
    this.headers = { ...options.headers };
    if (options.token !== undefined) {
      if (!/^[A-Za-z0-9\-._~]+$/.test(options.token)) {
        throw new TypeError('token may hold only letters, digits and -._~ (a WebSocket subprotocol carries it).');
      }
      this.headers.authorization = `Bearer ${options.token}`;
      this.streamProtocols = ['pubsub', `bearer.${options.token}`];
    }
  }

  /** `projects/{projectId}/topics/{topic}` for a topic ID; a full name is returned as is. */
  topicName(topic: string): string {
    return fullName('topics', this.projectId, topic);
  }

  /** `projects/{projectId}/subscriptions/{subscription}` for a subscription ID; a full name is returned as is. */
  subscriptionName(subscription: string): string {
    return fullName('subscriptions', this.projectId, subscription);
  }

  /**
   * Publishes messages to a topic (ID or full name) and resolves with their message IDs, in
   * order. Large lists, and runs of different ordering keys, go out as several requests, one
   * after the other, so per-key order is kept. Rejects with a PubSubError; it does not retry.
   */
  async publish(topic: string, messages: PublishMessage[]): Promise<string[]> {
    const path = `${encodePath(this.topicName(topic))}:publish`;
    const ids: string[] = [];
    let batch: object[] = [];
    let batchKey = '';
    let batchBytes = 0;
    const send = async () => {
      if (batch.length === 0) return;
      const response = (await this.request('POST', path, { messages: batch })) as { messageIds?: string[] };
      if (!Array.isArray(response.messageIds) || response.messageIds.length !== batch.length) {
        throw new PubSubError('INTERNAL', 'The publish response does not hold one message ID per message.');
      }
      ids.push(...response.messageIds);
      batch = [];
      batchBytes = 0;
    };
    for (const message of messages) {
      const wire: { data?: string; attributes?: Record<string, string>; orderingKey?: string } = {};
      const data = typeof message.data === 'string' ? utf8Encode(message.data) : message.data;
      if (data && data.length > 0) wire.data = toBase64(data);
      if (message.attributes && Object.keys(message.attributes).length > 0) wire.attributes = message.attributes;
      if (message.orderingKey) wire.orderingKey = message.orderingKey;
      const key = message.orderingKey ?? '';
      const bytes = JSON.stringify(wire).length;
      if (
        batch.length > 0 &&
        (key !== batchKey || batch.length >= MAX_BATCH_MESSAGES || batchBytes + bytes > MAX_BATCH_BYTES)
      ) {
        await send();
      }
      batch.push(wire);
      batchKey = key;
      batchBytes += bytes;
    }
    await send();
    return ids;
  }

  /**
   * Opens a streaming pull on a subscription (ID or full name) and runs `handler` for each
   * message. The handler should ack() or nack() the message; if it throws or rejects, the
   * message is nacked. See SubscribeOptions for flow control, leases and reconnection.
   */
  subscribe(subscription: string, handler: MessageHandler, options: SubscribeOptions = {}): Subscriber {
    const WebSocketImpl = this.WebSocketImpl;
    if (!WebSocketImpl) {
      throw new TypeError(
        "No WebSocket implementation: pass { WebSocket } (in Node 20, import { WebSocket } from 'ws').",
      );
    }
    const name = this.subscriptionName(subscription);
    const path = encodePath(name);
    return new Subscriber(
      {
        subscription: name,
        streamUrl: `${this.endpoint.replace(/^http/i, 'ws')}/v1/${path}:streamingPull`,
        openSocket: (url) => new WebSocketImpl(url, this.streamProtocols),
        rest: (verb, body) => this.request('POST', `${path}:${verb}`, body),
      },
      handler,
      options,
    );
  }

  /**
   * A REST call: `path` is relative to /v1/ (e.g. `projects/p/topics/t`). Resolves with the
   * parsed JSON body; rejects with a PubSubError (UNAVAILABLE when the broker cannot be reached).
   */
  async request(method: string, path: string, body?: unknown): Promise<unknown> {
    if (!this.fetchImpl) throw new TypeError('No fetch implementation: pass { fetch }.');
    let status: number;
    let ok: boolean;
    let text: string;
    try {
      const response = await this.fetchImpl(`${this.endpoint}/v1/${path}`, {
        method,
        headers: { 'content-type': 'application/json', ...this.headers },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      ({ status, ok } = response);
      text = await response.text();
    } catch (error) {
      throw new PubSubError(
        'UNAVAILABLE',
        `The broker cannot be reached: ${error instanceof Error ? error.message : String(error)}`,
        {
          retryable: true,
        },
      );
    }
    if (!ok) throw PubSubError.fromResponse(status, text);
    try {
      return text ? (JSON.parse(text) as unknown) : {};
    } catch {
      throw new PubSubError('INTERNAL', `The broker answered ${status} with a body that is not JSON.`, {
        httpStatus: status,
      });
    }
  }
}

function fullName(collection: 'topics' | 'subscriptions', projectId: string, name: string): string {
  if (name.startsWith('projects/')) {
    const parts = name.split('/');
    if (parts.length !== 4 || parts[2] !== collection || !parts[1] || !parts[3]) {
      throw new TypeError(
        `Expected a ${collection} name like projects/{project}/${collection}/{id}, not ${JSON.stringify(name)}.`,
      );
    }
    return name;
  }
  if (!name || name.includes('/')) throw new TypeError(`Invalid ${collection} ID: ${JSON.stringify(name)}.`);
  return `projects/${projectId}/${collection}/${name}`;
}

/** Percent-encodes each segment of a resource name for use in a URL path. */
const encodePath = (name: string) => name.split('/').map(encodeURIComponent).join('/');
