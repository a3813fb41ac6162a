import {
  Agent as HttpAgent,
  type OutgoingHttpHeaders,
  request as httpRequest,
  validateHeaderName,
  validateHeaderValue,
} from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { LeasedMessage } from './pull.ts';
import type { PushConfig } from './push-config.ts';

/**
 * One push request (https://cloud.google.com/pubsub/docs/push): the POST of one message to the
 * subscription's endpoint, and what its answer means. Wrapped (the default), the body is
 * Pub/Sub's JSON envelope; with noWrapper it is the message's data bytes unchanged, and with
 * writeMetadata the attributes and the message's metadata go as headers.
 */

/** The answers that acknowledge a push; anything else, a connection error or a timeout is a nack. */
const ACK_STATUSES = new Set([102, 200, 201, 202, 204]);

// Keep-alive connections: a busy subscription reuses its sockets instead of opening one per message.
const agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

export interface PushTarget {
  subscription: string;
  config: PushConfig;
}

/** Headers a message's attributes may not set: they would change how the request is framed or routed. */
const FRAMING_HEADERS = new Set(['content-length', 'content-type', 'transfer-encoding', 'host', 'connection']);

export function pushRequest(target: PushTarget, leased: LeasedMessage): { headers: OutgoingHttpHeaders; body: Buffer } {
  const { message } = leased;
  const data = message.data ?? Buffer.alloc(0);
  if (target.config.noWrapper) {
    const headers: OutgoingHttpHeaders = {};
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
  return { headers: { 'content-type': 'application/json' }, body: Buffer.from(JSON.stringify(envelope)) };
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

/** POSTs the message; true when the endpoint acknowledged it before `signal` ended the request. */
export function push(target: PushTarget, leased: LeasedMessage, signal: AbortSignal): Promise<boolean> {
  const { headers, body } = pushRequest(target, leased);
  const url = new URL(target.config.pushEndpoint);
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  const agent = url.protocol === 'https:' ? agents.https : agents.http;
  return new Promise((resolve) => {
    if (signal.aborted) return resolve(false);
    const request = send(url, {
      method: 'POST',
      agent,
      signal,
      headers: { ...headers, 'content-length': body.length },
    });
    request.on('response', (response) => {
      const acked = ACK_STATUSES.has(response.statusCode ?? 0);
      // The answer's body means nothing; reading it to the end frees the socket for the next push.
      response.resume();
      response.on('end', () => resolve(acked));
      response.on('error', () => resolve(false));
      response.on('close', () => resolve(acked && response.complete));
    });
    // A 102 (Processing) is an ack too, though no final answer follows it here.
    request.on('information', (info) => {
      if (info.statusCode !== 102) return;
      resolve(true);
      request.destroy();
    });
    request.on('error', () => resolve(false));
    request.end(body);
  });
}
