import { z } from 'zod';
import { durationString, int32, labelsSchema } from './common.ts';

export const subscriptionBodySchema = z.strictObject({
  name: z.string().optional(),
  topic: z.string().optional(),
  pushConfig: z.record(z.string(), z.unknown()).optional(),
  ackDeadlineSeconds: int32.optional(),
  retainAckedMessages: z.boolean().optional(),
  messageRetentionDuration: durationString.optional(),
  labels: labelsSchema.optional(),
  enableMessageOrdering: z.boolean().optional(),
  expirationPolicy: z.strictObject({ ttl: durationString.optional() }).optional(),
  enableExactlyOnceDelivery: z.boolean().optional(),
  filter: z.string().optional(),
  deadLetterPolicy: z.unknown().optional(),
  retryPolicy: z.unknown().optional(),
  detached: z.boolean().optional(),
  bigqueryConfig: z.unknown().optional(),
  cloudStorageConfig: z.unknown().optional(),
  bigtableConfig: z.unknown().optional(),
  messageTransforms: z.unknown().optional(),
  tags: z.unknown().optional(),
  // Output-only fields: accepted (clients echo resources back) and ignored.
  state: z.string().optional(),
  topicMessageRetentionDuration: z.string().optional(),
  analyticsHubSubscriptionInfo: z.unknown().optional(),
});
export type SubscriptionBody = z.infer<typeof subscriptionBodySchema>;

export const updateSubscriptionBodySchema = z.strictObject({
  subscription: subscriptionBodySchema,
  updateMask: z.string().optional(),
});

export const pullBodySchema = z.strictObject({
  maxMessages: int32.refine((n) => n > 0, 'maxMessages must be a positive integer'),
  returnImmediately: z.boolean().optional(),
});

const ackIds = z.array(z.string(), 'ackIds must be a list of strings').min(1, 'at least one ack ID is required');

export const acknowledgeBodySchema = z.strictObject({ ackIds });

export const modifyAckDeadlineBodySchema = z.strictObject({
  ackIds,
  ackDeadlineSeconds: int32.refine((n) => n >= 0 && n <= 600, 'ackDeadlineSeconds must be between 0 and 600'),
});
