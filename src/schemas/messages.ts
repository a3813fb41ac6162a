import { z } from 'zod';
import type { PubsubMessage } from '../broker/publish-request.ts';
import { invalidArgument } from '../errors.ts';
import { decodeMessageData } from './message-data.ts';

export const pubsubMessageSchema = z.strictObject({
  data: z.string().optional(),
  attributes: z.record(z.string(), z.string(), 'attributes must map strings to strings').optional(),
  orderingKey: z.string().optional(),
  // The broker's extensions (src/broker/message-extensions.ts).
  idempotencyKey: z.string().optional(),
  deliveryTime: z.string().optional(),
  deliveryDelay: z.string().optional(),
  // Server-assigned; tolerated on input (clients re-publish received messages) and replaced.
  messageId: z.string().optional(),
  publishTime: z.string().optional(),
});

export const publishBodySchema = z.strictObject({
  messages: z.array(pubsubMessageSchema, 'messages must be a list'),
});

/** The messages of a publish body (publishBodySchema), their data decoded from base64. */
export function decodePublishMessages(messages: z.infer<typeof pubsubMessageSchema>[]): PubsubMessage[] {
  const data = decodeMessageData(messages.map((message) => message.data));
  if (!Array.isArray(data)) throw invalidArgument(`Message ${data.invalidData}: "data" is not valid base64.`);
  return messages.map(({ attributes, orderingKey, idempotencyKey, deliveryTime, deliveryDelay }, i) => ({
    data: data[i],
    attributes,
    orderingKey,
    idempotencyKey,
    deliveryTime,
    deliveryDelay,
  }));
}
