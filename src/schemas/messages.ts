import { z } from 'zod';

export const pubsubMessageSchema = z.strictObject({
  data: z.string().optional(),
  attributes: z.record(z.string(), z.string(), 'attributes must map strings to strings').optional(),
  orderingKey: z.string().optional(),
  // Server-assigned; tolerated on input (clients re-publish received messages) and replaced.
  messageId: z.string().optional(),
  publishTime: z.string().optional(),
});
export type PubsubMessageBody = z.infer<typeof pubsubMessageSchema>;

export const publishBodySchema = z.strictObject({
  messages: z.array(pubsubMessageSchema, 'messages must be a list'),
});
