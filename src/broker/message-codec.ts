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
  base64Data: string;
  /** JSON [attributes, orderingKey], when there are any. */
  meta: Buffer | undefined;
  dataBytes: number;
  storedBytes: number;
}

/**
 * Lays out the stored form of a message whose data arrives as base64 (proto3 JSON bytes:
 * standard or URL-safe alphabet, with or without padding). Returns undefined when the data's
 * length or padding cannot be base64; its characters are checked when packMessages decodes it.
 */
export function layoutMessage(
  base64Data: string,
  attributes?: Record<string, string>,
  orderingKey?: string,
): MessageLayout | undefined {
  const padding = base64Data.endsWith('==') ? 2 : base64Data.endsWith('=') ? 1 : 0;
  const length = base64Data.length - padding;
  if (length % 4 === 1 || (padding > 0 && base64Data.length % 4 !== 0)) return undefined;
  const dataBytes = Math.floor((length * 3) / 4);
  const hasMeta = (attributes && Object.keys(attributes).length > 0) || orderingKey;
  const meta = hasMeta ? Buffer.from(JSON.stringify([attributes ?? {}, orderingKey ?? ''])) : undefined;
  return { base64Data, meta, dataBytes, storedBytes: TIME_DIGITS + 4 + (meta?.length ?? 0) + dataBytes };
}

/**
 * Writes messages in their stored form, publish time still zeros, as the bulk strings that end
 * the publish's call to Redis (`asBlockFields`: preceded each by its field in a body block, `000`,
 * `001`, …, for an HSET; see keys.ts): each message's base64 is decoded straight into place.
 * Node's decoder reads both alphabets and skips anything else, so data is well-formed exactly
 * when it decodes to the length its size implies. Returns the index of the first message whose
 * data does not, or the packed messages.
 */
export function packMessages(
  layouts: MessageLayout[],
  { asBlockFields = false } = {},
): BulkStrings | { invalidData: number } {
  const packed = new BulkStrings(
    layouts.map((layout) => layout.storedBytes),
    { indexWidth: asBlockFields ? BLOCK_FIELD_DIGITS : undefined },
  );
  for (let i = 0; i < layouts.length; i++) {
    const { base64Data, meta, dataBytes } = layouts[i];
    const start = packed.starts[i];
    packed.bytes.fill(ZERO_DIGIT, start, start + TIME_DIGITS);
    packed.bytes.writeUInt32BE(meta?.length ?? 0, start + TIME_DIGITS);
    meta?.copy(packed.bytes, start + TIME_DIGITS + 4);
    const dataStart = start + TIME_DIGITS + 4 + (meta?.length ?? 0);
    if (packed.bytes.write(base64Data, dataStart, dataBytes, 'base64') !== dataBytes) return { invalidData: i };
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
