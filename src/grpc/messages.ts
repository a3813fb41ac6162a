import type { PubsubMessage } from '../broker/publish-request.ts';
import { invalidArgument } from '../errors.ts';
import type { ProtoTimestamp } from './convert.ts';

/** Published messages from their protobuf form (received ones are written by received-proto.ts). */

/** A google.pubsub.v1.PubsubMessage as protos.ts decodes a published one. */
export interface ProtoPubsubMessage {
  data?: Buffer;
  attributes?: Record<string, string>;
  orderingKey?: string;
  messageId?: string;
  publishTime?: ProtoTimestamp;
}

const NO_DATA = Buffer.alloc(0);

/** The messages of a PublishRequest; messageId and publishTime are the broker's to set. */
export function decodePublishMessages(messages: ProtoPubsubMessage[] | undefined): PubsubMessage[] {
  if (!Array.isArray(messages)) throw invalidArgument('The publish request must contain at least one message.');
  return messages.map(({ data, attributes, orderingKey }) => ({ data: data ?? NO_DATA, attributes, orderingKey }));
}
