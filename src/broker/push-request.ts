import { validateHeaderName, validateHeaderValue } from 'node:http';
import { Agent, type Dispatcher } from 'undici';
import type { LeasedMessage } from './pull.ts';
import type { PushConfig } from './push-config.ts';
import { MAX_WINDOW } from './push-window.ts';

/**
 * One push request (https://cloud.google.com/pubsub/docs/push): the POST of one message to the
 * subscription's endpoint, and what its answer means. Wrapped (the default), the body is
 * Pub/Sub's JSON envelope; with noWrapper it is the message's data bytes unchanged, and with
 * writeMetadata the attributes and the message's metadata go as headers.
 */

/** The answers that acknowledge a push; anything else, a connection error or a timeout is a nack. */
const ACK_STATUSES = new Set([102, 200, 201, 202, 204]);

/**
 * The requests go through undici: at a window of a thousand requests, node:http's client cost
 * about twice as much CPU per push (its agent, request objects and socket writes) and was most
 * of a push's cost. Keep-alive connections, at most as many per endpoint origin (scheme, host
 * and port) as a subscription's window may have requests outstanding: a slow endpoint is not
 * held below the window by its connections, and a busy subscription reuses its sockets (node:http's
 * agent kept 256 idle ones and closed and opened the rest at every round of a full window).
 * Fewer connections measured slower too: at 64 the pusher leased in small batches as each
 * request finished, three times the Redis calls. Requests are never retried by the client: a
 * failure is a nack, and the broker pushes again.
 */
const CONNECTIONS_PER_ORIGIN = MAX_WINDOW;
const dispatcher = new Agent({ connections: CONNECTIONS_PER_ORIGIN, keepAliveTimeout: 30_000 });

export interface PushTarget {
  subscription: string;
  config: PushConfig;
  /** The endpoint's origin and path, parsed once per subscription version rather than per push. */
  origin: string;
  path: string;
}

export function pushTarget(subscription: string, config: PushConfig): PushTarget {
  const url = new URL(config.pushEndpoint);
  return { subscription, config, origin: url.origin, path: `${url.pathname}${url.search}` };
}

/** Headers a message's attributes may not set: they would change how the request is framed or routed. */
const FRAMING_HEADERS = new Set(['content-length', 'content-type', 'transfer-encoding', 'host', 'connection']);

const WRAPPED_HEADERS: Readonly<Record<string, string>> = Object.freeze({ 'content-type': 'application/json' });

function pushRequest(
  target: PushTarget,
  leased: LeasedMessage,
): { headers: Readonly<Record<string, string>>; body: Buffer | string } {
  const { message } = leased;
  const data = message.data ?? Buffer.alloc(0);
  if (target.config.noWrapper) {
    const headers: Record<string, string> = {};
    if (target.config.noWrapper.writeMetadata) {
      for (const [name, value] of Object.entries(message.attributes ?? {})) {
        if (validHeader(name, value)) headers[name] = value;
      }
      headers['x-goog-pubsub-message-id'] = message.messageId;
      headers['x-goog-pubsub-publish-time'] = message.publishTime;
      headers['x-goog-pubsub-subscription-name'] = target.subscription;
      if (message.orderingKey && validHeader('x-goog-pubsub-ordering-key', message.orderingKey))
        headers['x-goog-pubsub-ordering-key'] = message.orderingKey;
    }
    return { headers, body: data };
  }
  const envelope = {
    message: {
      ...(message.attributes ? { attributes: message.attributes } : {}),
      ...(data.length > 0 ? { data: data.toString('base64') } : {}),
      messageId: message.messageId,
      message_id: message.messageId,
      ...(message.orderingKey ? { orderingKey: message.orderingKey } : {}),
      publishTime: message.publishTime,
      publish_time: message.publishTime,
    },
    subscription: target.subscription,
    // Set by the pull on subscriptions with a dead-letter policy, as Pub/Sub puts it in the envelope.
    ...(leased.deliveryAttempt !== undefined ? { deliveryAttempt: leased.deliveryAttempt } : {}),
  };
  return { headers: WRAPPED_HEADERS, body: JSON.stringify(envelope) };
}

function validHeader(name: string, value: string): boolean {
  if (FRAMING_HEADERS.has(name.toLowerCase())) return false;
  try {
    validateHeaderName(name);
    validateHeaderValue(name, value);
    return true;
  } catch {
    return false;
  }
}

/**
 * Requests that end together (those of one leased batch, see push.ts). Each open request
 * registers its end here: a plain set, where an abort signal warns beyond ten listeners and
 * walks its list at every add and remove.
 */
export class RequestGroup {
  private readonly open = new Set<() => void>();
  private isEnded = false;

  get ended(): boolean {
    return this.isEnded;
  }

  /** Ends every open request of the group, and any started later at once. */
  end(): void {
    this.isEnded = true;
    for (const endRequest of this.open) endRequest();
    this.open.clear();
  }

  add(endRequest: () => void): void {
    if (this.isEnded) endRequest();
    else this.open.add(endRequest);
  }

  delete(endRequest: () => void): void {
    this.open.delete(endRequest);
  }
}

/** POSTs the message; true when the endpoint acknowledged it before its group ended the request. */
export function push(target: PushTarget, leased: LeasedMessage, group: RequestGroup): Promise<boolean> {
  const { headers, body } = pushRequest(target, leased);
  const { origin, path } = target;
  return new Promise((resolve) => {
    if (group.ended) return resolve(false);
    dispatcher.dispatch({ origin, path, method: 'POST', headers, body }, new PushAnswer(group, resolve));
  });
}

/** Reads the answer to one push: its status decides, its body is dropped unread. */
class PushAnswer implements Dispatcher.DispatchHandler {
  private controller?: Dispatcher.DispatchController;
  private acked = false;
  private done = false;
  private readonly end = () => this.controller?.abort(new Error('the push request was ended'));

  constructor(
    private readonly group: RequestGroup,
    private readonly resolve: (acked: boolean) => void,
  ) {}

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    this.group.add(this.end);
  }

  onResponseStart(controller: Dispatcher.DispatchController, statusCode: number): void {
    // A 102 (Processing) is an ack too, though no final answer follows it here.
    if (statusCode === 102) {
      this.finish(true);
      controller.abort(new Error('acknowledged by 102 Processing'));
    } else if (statusCode >= 200) this.acked = ACK_STATUSES.has(statusCode);
  }

  onResponseData(): void {}

  onResponseEnd(): void {
    this.finish(this.acked);
  }

  onResponseError(): void {
    this.finish(false);
  }

  private finish(acked: boolean): void {
    if (this.done) return;
    this.done = true;
    this.group.delete(this.end);
    this.resolve(acked);
  }
}
