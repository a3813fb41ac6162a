import { invalidArgument } from '../errors.ts';
import { durationMicroseconds, parseTimestampUs } from './durations.ts';

/**
 * The broker's extensions of a published message, beyond Pub/Sub v1 (README, "Queue features").
 * Each has a field of the REST message and an attribute form, for clients that can only set
 * attributes (the official client libraries): attribute keys under EXTENSION_PREFIX are the
 * broker's, so they never collide with an application's own. The broker takes them out of the
 * message; subscribers never see them.
 */
export const EXTENSION_PREFIX = 'pubsub-broker/';

export const IDEMPOTENCY_KEY_ATTRIBUTE = `${EXTENSION_PREFIX}idempotency-key`;
export const DELIVERY_TIME_ATTRIBUTE = `${EXTENSION_PREFIX}delivery-time`;
export const DELIVERY_DELAY_ATTRIBUTE = `${EXTENSION_PREFIX}delivery-delay`;

const MAX_IDEMPOTENCY_KEY_BYTES = 256;

/** The message fields that carry extensions, each with its attribute form. */
const EXTENSION_FIELDS = {
  idempotencyKey: IDEMPOTENCY_KEY_ATTRIBUTE,
  deliveryTime: DELIVERY_TIME_ATTRIBUTE,
  deliveryDelay: DELIVERY_DELAY_ATTRIBUTE,
} as const;
type ExtensionField = keyof typeof EXTENSION_FIELDS;
const EXTENSION_FIELD_NAMES = Object.keys(EXTENSION_FIELDS) as ExtensionField[];
const EXTENSION_ATTRIBUTES = new Set<string>(Object.values(EXTENSION_FIELDS));

/** The parts of a published message (publish-request.ts) that can carry extensions. */
type ExtensibleMessage = { attributes?: Record<string, string> } & { [field in ExtensionField]?: string };

/** When a message is delivered: at a time, or a delay after its publish time (µs). */
export type DeliverySchedule = { atUs: number } | { delayUs: number };

/** What a published message asks of the broker besides being stored. */
export interface MessageExtensions {
  /** '' for none. */
  idempotencyKey: string;
  /** Absent: deliver at once. */
  delivery?: DeliverySchedule;
}

/**
 * Splits a published message into the message to store (its extension fields and attributes
 * taken out) and its extensions, checked (INVALID_ARGUMENT for a bad or unknown one).
 */
export function takeExtensions<Message extends ExtensibleMessage>(
  message: Message,
  index: number,
): { message: Message; extensions: MessageExtensions } {
  const attributes = message.attributes ?? {};
  let extended = false;
  for (const name of Object.keys(attributes)) {
    if (!name.startsWith(EXTENSION_PREFIX)) continue;
    if (!EXTENSION_ATTRIBUTES.has(name)) {
      throw invalidArgument(
        `Message ${index}: attribute key "${name}" uses the broker's prefix "${EXTENSION_PREFIX}" but names no extension it knows (${[...EXTENSION_ATTRIBUTES].join(', ')}).`,
      );
    }
    extended = true;
  }
  // Every published message passes here: a plain one costs a look at its attribute names.
  if (!extended && EXTENSION_FIELD_NAMES.every((field) => message[field] === undefined)) {
    return { message, extensions: { idempotencyKey: '' } };
  }
  const value = (field: ExtensionField) => oneOf(field, message[field], attributes[EXTENSION_FIELDS[field]], index);
  const givenKey = value('idempotencyKey');
  if (givenKey !== undefined) checkIdempotencyKey(givenKey, index);
  const idempotencyKey = givenKey ?? '';
  const delivery = deliverySchedule(value('deliveryTime'), value('deliveryDelay'), index);
  const kept = Object.fromEntries(Object.entries(attributes).filter(([name]) => !name.startsWith(EXTENSION_PREFIX)));
  const stored: Record<string, unknown> = { ...message, attributes: kept };
  // A message left without attributes is stored as one that never had any.
  if (Object.keys(kept).length === 0) delete stored.attributes;
  for (const field of EXTENSION_FIELD_NAMES) delete stored[field];
  return { message: stored as Message, extensions: { idempotencyKey, ...(delivery ? { delivery } : {}) } };
}

/** The extension's value from the field or the attribute; both may be given only alike. */
function oneOf(
  field: ExtensionField,
  fieldValue: string | undefined,
  attribute: string | undefined,
  index: number,
): string | undefined {
  if (fieldValue !== undefined && attribute !== undefined && fieldValue !== attribute) {
    throw invalidArgument(
      `Message ${index}: "${field}" and the attribute "${EXTENSION_FIELDS[field]}" differ; give one of them.`,
    );
  }
  return fieldValue ?? attribute;
}

function checkIdempotencyKey(key: string, index: number): void {
  const bytes = Buffer.byteLength(key);
  if (bytes === 0 || bytes > MAX_IDEMPOTENCY_KEY_BYTES) {
    throw invalidArgument(`Message ${index}: an idempotency key must be 1 to ${MAX_IDEMPOTENCY_KEY_BYTES} bytes long.`);
  }
}

/**
 * How far ahead of its publish time a message may be scheduled at the most: the longest retention
 * anything can have (a topic's messageRetentionDuration, 31 days). Each subscription that takes
 * the message holds it to its own retention too (publish.lua).
 */
export const MAX_DELIVERY_AHEAD_US = 31 * 24 * 3600 * 1_000_000;

/** A delivery time (RFC 3339) or delay (a Duration such as "90s"), at most one of them. */
function deliverySchedule(time: string | undefined, delay: string | undefined, index: number) {
  if (time !== undefined && delay !== undefined) {
    throw invalidArgument(`Message ${index}: give a delivery time or a delivery delay, not both.`);
  }
  if (time !== undefined) return { atUs: timestampUs(time, index) };
  if (delay === undefined) return undefined;
  const delayUs = durationMicroseconds(delay, `message ${index}'s delivery delay`);
  if (delayUs > MAX_DELIVERY_AHEAD_US) throw tooDistant(index);
  return { delayUs };
}

/**
 * A delivery time in microseconds. The messages of a publish often share one time: the last one
 * parsed is remembered.
 */
let lastTimestamp = { text: '', us: 0 };
function timestampUs(text: string, index: number): number {
  if (text !== lastTimestamp.text) {
    lastTimestamp = { text, us: parseTimestampUs(text, `message ${index}'s delivery time`) };
  }
  return lastTimestamp.us;
}

/** When a message scheduled so is due, for a publish stamped at publishTimeUs; 0 for at once. */
export function deliveryDueUs(schedule: DeliverySchedule | undefined, publishTimeUs: number, index: number): number {
  if (!schedule) return 0;
  const dueUs = 'atUs' in schedule ? schedule.atUs : publishTimeUs + schedule.delayUs;
  if (dueUs - publishTimeUs > MAX_DELIVERY_AHEAD_US) throw tooDistant(index);
  return dueUs <= publishTimeUs ? 0 : dueUs;
}

function tooDistant(index: number) {
  return invalidArgument(
    `Message ${index}: the delivery time is more than 31 days after the publish time; no retention keeps a message that long.`,
  );
}
