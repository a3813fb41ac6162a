import type { ReceivedMessage } from '../broker/pull.ts';
import { timestampFromJson } from './convert.ts';

/**
 * The protobuf bytes of received messages, as field 1 (`received_messages`) of a PullResponse or
 * a StreamingPullResponse, written straight into one Buffer: what received-json.ts is to the
 * JSON front end. protobufjs's encoder builds a list of small operation objects for every field
 * of every message before it writes them (a dozen per message); in a stream of 1 KB messages
 * those were a large share of the broker's garbage collection. They decode to what protobufjs's
 * bytes decode to, and are the same bytes but for fields left out when empty, as proto3 allows
 * (test/unit/received-proto.test.ts). Other fields of the response are encoded by protobufjs and
 * appended: serialized protobuf messages concatenate.
 *
 *   ReceivedMessage  { 1: ack_id, 2: message, 3: delivery_attempt (int32, only when set) }
 *   PubsubMessage    { 1: data, 2: attributes (entries { 1: key, 2: value }), 3: message_id,
 *                      4: publish_time { 1: seconds, 2: nanos }, 5: ordering_key }
 */

/** Tag bytes: (field number << 3) | wire type 2 (length-delimited) or 0 (varint). */
const FIELD_1_BYTES = 0x0a;
const FIELD_2_BYTES = 0x12;
const FIELD_3_BYTES = 0x1a;
const FIELD_4_BYTES = 0x22;
const FIELD_5_BYTES = 0x2a;
const FIELD_1_VARINT = 0x08;
const FIELD_2_VARINT = 0x10;
const FIELD_3_VARINT = 0x18;

/** Bytes of a varint of a non-negative integer below 2^53. */
function varintLength(value: number): number {
  let length = 1;
  while (value >= 128) {
    value = Math.floor(value / 128);
    length++;
  }
  return length;
}

function writeVarint(buffer: Buffer, offset: number, value: number): number {
  while (value >= 128) {
    buffer[offset++] = (value % 128) | 128;
    value = Math.floor(value / 128);
  }
  buffer[offset++] = value;
  return offset;
}

/** A length-delimited field of `length` bytes: its tag, its length and itself. */
const delimited = (length: number) => 1 + varintLength(length) + length;

interface Layout {
  ackIdBytes: number;
  attributes: [Buffer, Buffer][];
  orderingKey?: Buffer;
  seconds: number;
  nanos: number;
  timestampBytes: number;
  pubsubMessageBytes: number;
  receivedMessageBytes: number;
}

function layOut({ ackId, message, deliveryAttempt }: ReceivedMessage): Layout {
  const attributes = Object.entries(message.attributes ?? {}).map(([key, value]): [Buffer, Buffer] => [
    Buffer.from(key),
    Buffer.from(value),
  ]);
  const orderingKey = message.orderingKey ? Buffer.from(message.orderingKey) : undefined;
  const { seconds, nanos } = timestampFromJson(message.publishTime) as { seconds: number; nanos: number };
  const timestampBytes = (seconds ? 1 + varintLength(seconds) : 0) + (nanos ? 1 + varintLength(nanos) : 0);
  let pubsubMessageBytes =
    (message.data?.length ? delimited(message.data.length) : 0) +
    (message.messageId ? delimited(message.messageId.length) : 0) +
    delimited(timestampBytes) +
    (orderingKey ? delimited(orderingKey.length) : 0);
  for (const [key, value] of attributes) pubsubMessageBytes += delimited(entryBytes(key, value));
  // Ack IDs and message IDs are ASCII: their length is their byte length.
  const ackIdBytes = ackId.length;
  const receivedMessageBytes =
    (ackIdBytes ? delimited(ackIdBytes) : 0) +
    delimited(pubsubMessageBytes) +
    (deliveryAttempt ? 1 + varintLength(deliveryAttempt) : 0);
  return {
    ackIdBytes,
    attributes,
    orderingKey,
    seconds,
    nanos,
    timestampBytes,
    pubsubMessageBytes,
    receivedMessageBytes,
  };
}

/** A map entry holds its key and its value even when empty, as protobufjs writes them. */
const entryBytes = (key: Buffer, value: Buffer) => delimited(key.length) + delimited(value.length);

function writeBytes(buffer: Buffer, offset: number, tag: number, bytes: Buffer): number {
  buffer[offset++] = tag;
  offset = writeVarint(buffer, offset, bytes.length);
  return offset + bytes.copy(buffer, offset);
}

function writeAscii(buffer: Buffer, offset: number, tag: number, text: string): number {
  buffer[offset++] = tag;
  offset = writeVarint(buffer, offset, text.length);
  return offset + buffer.write(text, offset, 'latin1');
}

/** The response bytes: the received messages, then `rest` (the response's other fields, encoded). */
export function receivedMessagesProto(received: ReceivedMessage[], rest?: Uint8Array): Buffer {
  const layouts = received.map(layOut);
  let length = rest?.length ?? 0;
  for (const layout of layouts) length += delimited(layout.receivedMessageBytes);
  const buffer = Buffer.allocUnsafe(length);
  let offset = 0;
  for (let i = 0; i < received.length; i++) {
    const { ackId, message, deliveryAttempt } = received[i];
    const layout = layouts[i];
    buffer[offset++] = FIELD_1_BYTES;
    offset = writeVarint(buffer, offset, layout.receivedMessageBytes);
    if (layout.ackIdBytes) offset = writeAscii(buffer, offset, FIELD_1_BYTES, ackId);
    buffer[offset++] = FIELD_2_BYTES;
    offset = writeVarint(buffer, offset, layout.pubsubMessageBytes);
    if (message.data?.length) offset = writeBytes(buffer, offset, FIELD_1_BYTES, message.data);
    for (const [key, value] of layout.attributes) {
      buffer[offset++] = FIELD_2_BYTES;
      offset = writeVarint(buffer, offset, entryBytes(key, value));
      offset = writeBytes(buffer, offset, FIELD_1_BYTES, key);
      offset = writeBytes(buffer, offset, FIELD_2_BYTES, value);
    }
    if (message.messageId) offset = writeAscii(buffer, offset, FIELD_3_BYTES, message.messageId);
    buffer[offset++] = FIELD_4_BYTES;
    offset = writeVarint(buffer, offset, layout.timestampBytes);
    if (layout.seconds) {
      buffer[offset++] = FIELD_1_VARINT;
      offset = writeVarint(buffer, offset, layout.seconds);
    }
    if (layout.nanos) {
      buffer[offset++] = FIELD_2_VARINT;
      offset = writeVarint(buffer, offset, layout.nanos);
    }
    if (layout.orderingKey) offset = writeBytes(buffer, offset, FIELD_5_BYTES, layout.orderingKey);
    if (deliveryAttempt) {
      buffer[offset++] = FIELD_3_VARINT;
      offset = writeVarint(buffer, offset, deliveryAttempt);
    }
  }
  if (rest) buffer.set(rest, offset);
  return buffer;
}
