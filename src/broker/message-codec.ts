import { BulkStrings } from '../redis/binary-command.ts';
import { BLOCK_FIELD_DIGITS } from '../redis/keys.ts';

/**
 * How a message is stored: once per topic, in one hash field (of its body block, see keys.ts),
 * exactly as the broker packs it:
 *
 *   [publish time: 16 ASCII digits, µs][u32 big-endian length of M]
 *   [M: JSON [attributes, orderingKey] or empty][raw data bytes]
 *
 * The publish time is written last, by stampMessages, just before the publish script is called
 * (that script checks it against the one clock; see PublishClock in clock.ts).
 *
 * Raw bytes (not base64) keep Redis memory per 1 KB message near 1 KB.
 */
export interface StoredMessage {
  data: Buffer;
  attributes?: Record<string, string>;
  orderingKey?: string;
  publishTimeUs: number;
}

const TIME_DIGITS = 16;
const ZERO_DIGIT = 0x30;

/** A message checked for storage, and what packMessages needs to write it. */
export interface MessageLayout {
  data: Buffer;
  /** JSON [attributes, orderingKey], when there are any. */
  meta: Buffer | undefined;
  storedBytes: number;
}

/** Lays out the stored form of a message. */
export function layoutMessage(data: Buffer, attributes?: Record<string, string>, orderingKey?: string): MessageLayout {
  const hasMeta = (attributes && Object.keys(attributes).length > 0) || orderingKey;
  const meta = hasMeta ? Buffer.from(JSON.stringify([attributes ?? {}, orderingKey ?? ''])) : undefined;
  return { data, meta, storedBytes: TIME_DIGITS + 4 + (meta?.length ?? 0) + data.length };
}

/**
 * Writes messages in their stored form, publish time still zeros, as the bulk strings that end
 * the publish's call to Redis (`asBlockFields`: preceded each by its field in a body block, `000`,
 * `001`, …, for an HSET; see keys.ts).
 */
export function packMessages(layouts: MessageLayout[], { asBlockFields = false } = {}): BulkStrings {
  const packed = new BulkStrings(
    layouts.map((layout) => layout.storedBytes),
    { indexWidth: asBlockFields ? BLOCK_FIELD_DIGITS : undefined },
  );
  for (let i = 0; i < layouts.length; i++) {
    const { data, meta } = layouts[i];
    const start = packed.starts[i];
    packed.bytes.fill(ZERO_DIGIT, start, start + TIME_DIGITS);
    packed.bytes.writeUInt32BE(meta?.length ?? 0, start + TIME_DIGITS);
    meta?.copy(packed.bytes, start + TIME_DIGITS + 4);
    data.copy(packed.bytes, start + TIME_DIGITS + 4 + (meta?.length ?? 0));
  }
  return packed;
}

/** Writes the publish time into packed messages. */
export function stampMessages(packed: BulkStrings, publishTimeUs: number): void {
  const digits = String(publishTimeUs).padStart(TIME_DIGITS, '0');
  if (digits.length !== TIME_DIGITS)
    throw new RangeError(`publish time ${publishTimeUs} does not fit ${TIME_DIGITS} digits`);
  for (const start of packed.starts) packed.bytes.write(digits, start, 'latin1');
}

export function unpackMessage(stored: Buffer): StoredMessage {
  const publishTimeUs = Number(stored.toString('latin1', 0, TIME_DIGITS));
  const metaLength = stored.readUInt32BE(TIME_DIGITS);
  const dataStart = TIME_DIGITS + 4 + metaLength;
  const message: StoredMessage = { data: stored.subarray(dataStart), publishTimeUs };
  if (metaLength > 0) {
    const [attributes, orderingKey] = JSON.parse(stored.toString('utf8', TIME_DIGITS + 4, dataStart)) as [
      Record<string, string>,
      string,
    ];
    if (Object.keys(attributes).length > 0) message.attributes = attributes;
    if (orderingKey) message.orderingKey = orderingKey;
  }
  return message;
}
