import { z } from 'zod';
import { TOPIC_FIELDS } from '../broker/topic-fields.ts';
import { resourceSchema } from './common.ts';

/** Topic as a request body (CreateTopic, and inside UpdateTopic); its fields come from TOPIC_FIELDS. */
export const topicBodySchema = resourceSchema(TOPIC_FIELDS);

export const updateTopicBodySchema = z.strictObject({
  topic: topicBodySchema,
  updateMask: z.string().optional(),
});
