import type { PubsubMessage } from '../broker/publish-request.ts';
import type { ReceivedMessage } from '../broker/pull.ts';
import type { StreamingPullResponse } from '../broker/streaming.ts';
import { invalidArgument } from '../errors.ts';
import { type ProtoTimestamp, timestampFromJson } from './convert.ts';

/** Messages between their protobuf forms and the broker's. */

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

/** A ReceivedMessage in the form protos.ts encodes. */
export function receivedMessageProto({ ackId, message }: ReceivedMessage) {
  return {
    ackId,
    message: {
      data: message.data,
      attributes: message.attributes,
      messageId: message.messageId,
      publishTime: timestampFromJson(message.publishTime),
      orderingKey: message.orderingKey,
    },
  };
}

/** A StreamingPullResponse in the form protos.ts encodes. */
export function streamingPullResponseProto({ receivedMessages, ...rest }: StreamingPullResponse) {
  return receivedMessages ? { receivedMessages: receivedMessages.map(receivedMessageProto), ...rest } : rest;
}
