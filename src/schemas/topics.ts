import { z } from 'zod';
import { durationString, labelsSchema } from './common.ts';

export const messageStoragePolicySchema = z.strictObject({
  allowedPersistenceRegions: z.array(z.string().min(1)).optional(),
  enforceInTransit: z.boolean().optional(),
});

/** Topic as a request body (CreateTopic, and inside UpdateTopic). Output-only fields are tolerated. */
export const topicBodySchema = z.strictObject({
  name: z.string().optional(),
  labels: labelsSchema.optional(),
  messageRetentionDuration: durationString.optional(),
  messageStoragePolicy: messageStoragePolicySchema.optional(),
  kmsKeyName: z.string().optional(),
  schemaSettings: z.unknown().optional(),
  ingestionDataSourceSettings: z.unknown().optional(),
  messageTransforms: z.unknown().optional(),
  tags: z.unknown().optional(),
  state: z.string().optional(),
  satisfiesPzs: z.boolean().optional(),
});
export type TopicBody = z.infer<typeof topicBodySchema>;

/** Fields that exist in Pub/Sub but that this broker refuses instead of storing. */
export const UNSUPPORTED_TOPIC_FIELDS = [
  'kmsKeyName',
  'schemaSettings',
  'ingestionDataSourceSettings',
  'messageTransforms',
  'tags',
] as const;

export const updateTopicBodySchema = z.strictObject({
  topic: topicBodySchema,
  updateMask: z.string().optional(),
});
