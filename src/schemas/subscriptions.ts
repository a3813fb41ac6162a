import { z } from 'zod';
import { pushConfigSchema } from '../broker/push-config.ts';
import { SUBSCRIPTION_FIELDS } from '../broker/subscription-fields.ts';
import { resourceSchema } from './common.ts';
import { pubsubMessageSchema } from './messages.ts';
import { int32 } from './wire-types.ts';

/** Subscription as a request body (CreateSubscription, and inside UpdateSubscription): from SUBSCRIPTION_FIELDS. */
export const subscriptionBodySchema = resourceSchema(SUBSCRIPTION_FIELDS);

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

/** The broker's acknowledgeAndPublish: ack IDs, and messages to publish to topics (full names). */
export const acknowledgeAndPublishBodySchema = z.strictObject({
  ackIds,
  publish: z
    .array(
      z.strictObject({ topic: z.string(), messages: z.array(pubsubMessageSchema, 'messages must be a list') }),
      'publish must be a list',
    )
    .optional(),
});

export const modifyAckDeadlineBodySchema = z.strictObject({
  ackIds,
  // Its range is the broker's rule (ack-deadline.ts), checked by the service.
  ackDeadlineSeconds: int32,
});

/** DetachSubscription takes no body (its one field is the path): `{}` or nothing. */
export const detachBodySchema = z.strictObject({});

/** A SeekRequest: `time` (RFC 3339) or `snapshot` (its full name); the broker checks that exactly one is given. */
export const seekBodySchema = z.strictObject({ time: z.string().optional(), snapshot: z.string().optional() });

export const modifyPushConfigBodySchema = z.strictObject({ pushConfig: pushConfigSchema.optional() });
