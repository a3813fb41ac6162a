import { ApiError, invalidArgument } from '../errors.ts';
import type { BulkStrings } from '../redis/binary-command.ts';
import { SEQS_PER_BLOCK } from '../redis/keys.ts';
import { layoutMessage, type MessageLayout, packMessages } from './message-codec.ts';
import { type DeliverySchedule, takeExtensions } from './message-extensions.ts';

export const MAX_PUBLISH_MESSAGES = 1000;
// A publish's seqs lie in one block of sequence numbers (keys.ts): its messages must fit in it.
if (MAX_PUBLISH_MESSAGES > SEQS_PER_BLOCK) throw new Error('a publish must fit in one block of sequence numbers');
export const MAX_PUBLISH_BYTES = 10_000_000;
const MAX_ATTRIBUTES = 100;
const MAX_ATTRIBUTE_KEY_BYTES = 256;
const MAX_ATTRIBUTE_VALUE_BYTES = 1024;
const MAX_ORDERING_KEY_BYTES = 1024;
/** A UTF-16 surrogate not paired with another: a string UTF-8 cannot encode (Pub/Sub strings are UTF-8). */
const LONE_SURROGATE = /\p{Cs}/u;

/** A message to publish, as a front end decoded it. */
export interface PubsubMessage {
  data: Buffer;
  attributes?: Record<string, string>;
  orderingKey?: string;
  /** Stored once within the topic's deduplication window (message-extensions.ts). */
  idempotencyKey?: string;
  /** Delivered at that time (RFC 3339), or that long (a Duration) after its publish time. */
  deliveryTime?: string;
  deliveryDelay?: string;
}

/** A publish's bodies as they go to Redis: staged (as body block fields) or in the script call. */
export interface PackedPublish {
  bodies: BulkStrings;
  staged: boolean;
}

/**
 * A checked publish: its bodies, the messages as stored, and per message its idempotency key ('' for
 * none) and when it is to be delivered (undefined: at once).
 */
export interface CheckedPublish extends PackedPublish {
  messages: PubsubMessage[];
  idempotencyKeys: string[];
  deliveries: (DeliverySchedule | undefined)[];
}

/**
 * Validates a publish request (its limits are Pub/Sub's: https://cloud.google.com/pubsub/quotas)
 * and packs the message bodies for storage, to be staged when they reach `stageFromBytes`.
 */
export function checkPublishRequest(requested: PubsubMessage[], stageFromBytes: number): CheckedPublish {
  const idempotencyKeys: string[] = [];
  const deliveries: (DeliverySchedule | undefined)[] = [];
  const messages = requested.map((message, index) => {
    const taken = takeExtensions(message, index);
    const { idempotencyKey, delivery } = taken.extensions;
    deliveries.push(delivery);
    if (LONE_SURROGATE.test(idempotencyKey)) {
      throw invalidArgument(
        `Message ${index}: the idempotency key is not valid UTF-8 text (it holds a lone surrogate).`,
      );
    }
    idempotencyKeys.push(idempotencyKey);
    return taken.message;
  });
  if (messages.length === 0) throw invalidArgument('The publish request must contain at least one message.');
  if (messages.length > MAX_PUBLISH_MESSAGES) {
    throw invalidArgument(
      `The publish request has ${messages.length} messages; at most ${MAX_PUBLISH_MESSAGES} are allowed.`,
    );
  }
  const orderingKeys = new Set(messages.map((message) => message.orderingKey ?? ''));
  if (orderingKeys.size > 1) {
    throw new ApiError(
      'FAILED_PRECONDITION',
      'In a single publish request, all messages must have no ordering key or they must all have the same ordering key.',
    );
  }
  let totalBytes = 0;
  let storedBytes = 0;
  const layouts = messages.map((message, index) => {
    const attributes = message.attributes ?? {};
    const attributeNames = Object.keys(attributes);
    const orderingKey = message.orderingKey ?? '';
    const stored = layoutMessage(message.data, attributes, orderingKey);
    if (message.data.length === 0 && attributeNames.length === 0) {
      throw invalidArgument(
        'One or more messages in the publish request is empty. Each message must contain either non-empty data, or at least one attribute.',
      );
    }
    if (attributeNames.length > MAX_ATTRIBUTES) {
      throw invalidArgument(
        `Message ${index} has ${attributeNames.length} attributes; at most ${MAX_ATTRIBUTES} are allowed.`,
      );
    }
    totalBytes += message.data.length;
    for (const key of attributeNames) {
      const keyBytes = Buffer.byteLength(key);
      const valueBytes = Buffer.byteLength(attributes[key]);
      if (keyBytes === 0 || keyBytes > MAX_ATTRIBUTE_KEY_BYTES) {
        throw invalidArgument(`Message ${index}: attribute keys must be 1 to ${MAX_ATTRIBUTE_KEY_BYTES} bytes long.`);
      }
      if (valueBytes > MAX_ATTRIBUTE_VALUE_BYTES) {
        throw invalidArgument(
          `Message ${index}: the value of attribute "${key}" exceeds ${MAX_ATTRIBUTE_VALUE_BYTES} bytes.`,
        );
      }
      // Reserved in any case; the official clients' OpenTelemetry tracing sets googclient_traceparent.
      if (/^goog/i.test(key) && key !== 'googclient_traceparent') {
        throw invalidArgument(`Message ${index}: attribute key "${key}" uses the reserved prefix "goog".`);
      }
      if (LONE_SURROGATE.test(key) || LONE_SURROGATE.test(attributes[key])) {
        throw invalidArgument(
          `Message ${index}: attribute "${key}" is not valid UTF-8 text (it holds a lone surrogate).`,
        );
      }
      totalBytes += keyBytes + valueBytes;
    }
    if (Buffer.byteLength(orderingKey) > MAX_ORDERING_KEY_BYTES) {
      throw invalidArgument(`Message ${index}: the ordering key exceeds ${MAX_ORDERING_KEY_BYTES} bytes.`);
    }
    if (LONE_SURROGATE.test(orderingKey)) {
      throw invalidArgument(`Message ${index}: the ordering key is not valid UTF-8 text (it holds a lone surrogate).`);
    }
    totalBytes += Buffer.byteLength(orderingKey);
    storedBytes += stored.storedBytes;
    return stored;
  });
  if (totalBytes > MAX_PUBLISH_BYTES) {
    throw invalidArgument(`The publish request is ${totalBytes} bytes; the limit is ${MAX_PUBLISH_BYTES} bytes.`);
  }
  // Not a spread of packLayouts' answer: spreading it cost a publish of one message more than
  // everything else here.
  const { bodies, staged } = packLayouts(layouts, storedBytes, stageFromBytes);
  return { bodies, staged, messages, idempotencyKeys, deliveries };
}

/**
 * Packs messages that need no checks: a message forwarded from a dead-letter policy was checked
 * when it was published (its forwarding attributes may take it past 100 attributes).
 */
export function packChecked(messages: PubsubMessage[], stageFromBytes: number): PackedPublish {
  const layouts = messages.map((message) => layoutMessage(message.data, message.attributes, message.orderingKey));
  const storedBytes = layouts.reduce((sum, layout) => sum + layout.storedBytes, 0);
  return packLayouts(layouts, storedBytes, stageFromBytes);
}

function packLayouts(layouts: MessageLayout[], storedBytes: number, stageFromBytes: number): PackedPublish {
  const staged = storedBytes >= stageFromBytes;
  return { bodies: packMessages(layouts, { asBlockFields: staged }), staged };
}
