import { invalidArgument } from '../errors.ts';

/**
 * The broker's extensions of a published message, beyond Pub/Sub v1 (README, "Queue features").
 * Each has a field of the REST message and an attribute form, for clients that can only set
 * attributes (the official client libraries): attribute keys under EXTENSION_PREFIX are the
 * broker's, so they never collide with an application's own. The broker takes them out of the
 * message; subscribers never see them.
 */
export const EXTENSION_PREFIX = 'pubsub-broker/';

export const IDEMPOTENCY_KEY_ATTRIBUTE = `${EXTENSION_PREFIX}idempotency-key`;

const MAX_IDEMPOTENCY_KEY_BYTES = 256;

/** The parts of a published message (publish-request.ts) that can carry extensions. */
interface ExtensibleMessage {
  attributes?: Record<string, string>;
  idempotencyKey?: string;
}

/** What a published message asks of the broker besides being stored. */
export interface MessageExtensions {
  /** '' for none. */
  idempotencyKey: string;
}

/**
 * Splits a published message into the message to store (its extension attributes taken out)
 * and its extensions, checked (INVALID_ARGUMENT for a bad or unknown one).
 */
export function takeExtensions<Message extends ExtensibleMessage>(
  message: Message,
  index: number,
): { message: Message; extensions: MessageExtensions } {
  const attributes = message.attributes ?? {};
  let extended: Record<string, string> | undefined;
  for (const name of Object.keys(attributes)) {
    if (!name.startsWith(EXTENSION_PREFIX)) continue;
    if (name !== IDEMPOTENCY_KEY_ATTRIBUTE) {
      throw invalidArgument(
        `Message ${index}: attribute key "${name}" uses the broker's prefix "${EXTENSION_PREFIX}" but names no extension it knows (${IDEMPOTENCY_KEY_ATTRIBUTE}).`,
      );
    }
    extended ??= {};
    extended[name] = attributes[name];
  }
  if (!extended && message.idempotencyKey === undefined) {
    return { message, extensions: { idempotencyKey: '' } };
  }
  const idempotencyKey = oneOf(message.idempotencyKey, extended?.[IDEMPOTENCY_KEY_ATTRIBUTE], index);
  checkIdempotencyKey(idempotencyKey, index);
  const kept = Object.fromEntries(Object.entries(attributes).filter(([name]) => !name.startsWith(EXTENSION_PREFIX)));
  const { idempotencyKey: _taken, ...stored } = message;
  return { message: { ...stored, attributes: kept } as Message, extensions: { idempotencyKey } };
}

/** The extension's value from the field or the attribute; both may be given only alike. */
function oneOf(field: string | undefined, attribute: string | undefined, index: number): string {
  if (field !== undefined && attribute !== undefined && field !== attribute) {
    throw invalidArgument(
      `Message ${index}: "idempotencyKey" and the attribute "${IDEMPOTENCY_KEY_ATTRIBUTE}" differ; give one of them.`,
    );
  }
  return field ?? attribute ?? '';
}

function checkIdempotencyKey(key: string, index: number): void {
  const bytes = Buffer.byteLength(key);
  if (bytes === 0 || bytes > MAX_IDEMPOTENCY_KEY_BYTES) {
    throw invalidArgument(`Message ${index}: an idempotency key must be 1 to ${MAX_IDEMPOTENCY_KEY_BYTES} bytes long.`);
  }
}
