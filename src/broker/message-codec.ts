/**
 * How a message is stored: once per topic, in one hash field, exactly as the broker packs it:
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

/**
 * Packs a message whose data arrives as base64 (proto3 JSON bytes: standard or URL-safe alphabet,
 * with or without padding), decoding it straight into the stored buffer. Node's decoder reads
 * both alphabets and skips anything else, so the data is well-formed exactly when it decodes to
 * the length its size implies. Returns undefined when it is not valid base64.
 */
export function packMessage(
  base64Data: string,
  attributes?: Record<string, string>,
  orderingKey?: string,
): { packed: Buffer; dataBytes: number } | undefined {
  const padding = base64Data.endsWith('==') ? 2 : base64Data.endsWith('=') ? 1 : 0;
  const length = base64Data.length - padding;
  if (length % 4 === 1 || (padding > 0 && base64Data.length % 4 !== 0)) return undefined;
  const dataBytes = Math.floor((length * 3) / 4);
  const hasMeta = (attributes && Object.keys(attributes).length > 0) || orderingKey;
  const meta = hasMeta ? Buffer.from(JSON.stringify([attributes ?? {}, orderingKey ?? ''])) : undefined;
  const dataStart = TIME_DIGITS + 4 + (meta?.length ?? 0);
  const packed = Buffer.allocUnsafe(dataStart + dataBytes);
  packed.writeUInt32BE(meta?.length ?? 0, TIME_DIGITS);
  meta?.copy(packed, TIME_DIGITS + 4);
  if (packed.write(base64Data, dataStart, 'base64') !== dataBytes) return undefined;
  return { packed, dataBytes };
}

/** Writes the publish time into packed messages (each from packMessage). */
export function stampMessages(packed: Buffer[], publishTimeUs: number): void {
  const digits = String(publishTimeUs).padStart(TIME_DIGITS, '0');
  if (digits.length !== TIME_DIGITS) throw new RangeError(`publish time ${publishTimeUs} does not fit ${TIME_DIGITS} digits`);
  for (const message of packed) message.write(digits, 0, 'latin1');
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
