/**
 * How a message is stored: once per topic, in one hash field. The publish script puts the
 * publish time (16 ASCII digits, microseconds) in front of what the broker packs:
 *
 *   [u32 big-endian length of M][M: JSON [attributes, orderingKey] or empty][raw data bytes]
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

export function packMessage(data: Buffer, attributes?: Record<string, string>, orderingKey?: string): Buffer {
  const hasMeta = (attributes && Object.keys(attributes).length > 0) || orderingKey;
  const meta = hasMeta ? Buffer.from(JSON.stringify([attributes ?? {}, orderingKey ?? ''])) : Buffer.alloc(0);
  const header = Buffer.allocUnsafe(4);
  header.writeUInt32BE(meta.length, 0);
  return Buffer.concat([header, meta, data]);
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
