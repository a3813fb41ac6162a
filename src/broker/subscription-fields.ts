import { z } from 'zod';
import { durationString, int32, labelsSchema } from '../schemas/wire-types.ts';
import { invalidArgument } from '../errors.ts';
import { checkAckDeadline } from './ack-deadline.ts';
import { checkDuration, durationMicroseconds, parseDurationSeconds } from './durations.ts';
import { parseFilter } from './filter.ts';
import { parseResourceName } from './names.ts';
import { type PushConfig, pushConfigSchema, settlePushConfig } from './push-config.ts';
import { type FieldDefinition, type FieldTable, outputField, unimplementedField, type WireOf } from './fields.ts';

/**
 * Every field of a Pub/Sub Subscription, declared once (see fields.ts). The stored settings are
 * settled in this order: a setting may depend on one above it (the default ack deadline on
 * exactly-once delivery).
 */

/** The settings a subscription record stores (records.ts), as the table below settles them. */
export interface SubscriptionSettings {
  /** Push delivery (push.ts); absent on a pull subscription. */
  pushConfig?: PushConfig;
  enableExactlyOnceDelivery?: boolean;
  ackDeadlineSeconds: number;
  messageRetentionDuration: string;
  expirationPolicy: { ttl?: string };
  retainAckedMessages?: boolean;
  labels?: Record<string, string>;
  enableMessageOrdering?: boolean;
  filter?: string;
  deadLetterPolicy?: DeadLetterPolicy;
  retryPolicy?: RetryPolicy;
}

/** Where messages go once delivering them failed maxDeliveryAttempts times. */
export interface DeadLetterPolicy {
  /** A full topic name; the topic existed when the policy was set. */
  deadLetterTopic: string;
  maxDeliveryAttempts: number;
}

/** How long redeliveries wait after a nack or an expired lease (Durations, "10s"). */
export interface RetryPolicy {
  minimumBackoff: string;
  maximumBackoff: string;
}

const DEFAULT_ACK_DEADLINE_SECONDS = 10;
const DEFAULT_EXACTLY_ONCE_ACK_DEADLINE_SECONDS = 60;
const DEFAULT_RETENTION = '604800s';
const DEFAULT_EXPIRATION_TTL = '2678400s';
const RETENTION_MIN_SECONDS = 600;
const RETENTION_MAX_SECONDS = 31 * 24 * 3600;
const EXPIRATION_MIN_SECONDS = 24 * 3600;
const EXPIRATION_MAX_SECONDS = 365 * 24 * 3600;
const DEFAULT_MINIMUM_BACKOFF = '10s';
const DEFAULT_MAXIMUM_BACKOFF = '600s';
const BACKOFF_MAX_SECONDS = 600;
const DEFAULT_MAX_DELIVERY_ATTEMPTS = 5;
const MAX_DELIVERY_ATTEMPTS = 100;

/**
 * A dead-letter policy as stored: a topic name (whether the topic exists is the service's
 * check), attempts 5 to 100 (0 or unset: 5). Without a topic there is no policy.
 */
export function settleDeadLetterPolicy(
  policy: { deadLetterTopic?: string; maxDeliveryAttempts?: number } | undefined,
): DeadLetterPolicy | undefined {
  if (!policy?.deadLetterTopic) {
    if (policy?.maxDeliveryAttempts) {
      throw invalidArgument('Invalid deadLetterPolicy: maxDeliveryAttempts needs a deadLetterTopic.');
    }
    return undefined;
  }
  const deadLetterTopic = parseResourceName('topics', policy.deadLetterTopic).full;
  const maxDeliveryAttempts = policy.maxDeliveryAttempts || DEFAULT_MAX_DELIVERY_ATTEMPTS;
  if (maxDeliveryAttempts < DEFAULT_MAX_DELIVERY_ATTEMPTS || maxDeliveryAttempts > MAX_DELIVERY_ATTEMPTS) {
    throw invalidArgument(
      `Invalid deadLetterPolicy.maxDeliveryAttempts: ${maxDeliveryAttempts}. It must be between ${DEFAULT_MAX_DELIVERY_ATTEMPTS} and ${MAX_DELIVERY_ATTEMPTS}.`,
    );
  }
  return { deadLetterTopic, maxDeliveryAttempts };
}

const field = <Value>(definition: FieldDefinition<SubscriptionSettings, Value>) => definition;
/** A flag is stored only when set. */
const flag = (value: boolean | undefined): true | undefined => (value ? true : undefined);
const configFlag = (value: boolean | undefined) => (value ? '1' : '0');
const microseconds = (duration: string, field: string) => String(durationMicroseconds(duration, field));

/** A retry policy as stored: each backoff 0 to 600 s, defaulted, the maximum not below the minimum. */
function settleRetryPolicy(policy: { minimumBackoff?: string; maximumBackoff?: string }): RetryPolicy {
  const backoff = (value: string | undefined, fallback: string, name: string) =>
    checkDuration(value || fallback, `retryPolicy.${name}`, 0, BACKOFF_MAX_SECONDS);
  const minimumBackoff = backoff(policy.minimumBackoff, DEFAULT_MINIMUM_BACKOFF, 'minimumBackoff');
  const maximumBackoff = backoff(policy.maximumBackoff, DEFAULT_MAXIMUM_BACKOFF, 'maximumBackoff');
  if (parseDurationSeconds(maximumBackoff, 'maximumBackoff') < parseDurationSeconds(minimumBackoff, 'minimumBackoff')) {
    throw invalidArgument(
      `Invalid retryPolicy: maximumBackoff (${maximumBackoff}) must not be less than minimumBackoff (${minimumBackoff}).`,
    );
  }
  return { minimumBackoff, maximumBackoff };
}

export const SUBSCRIPTION_FIELDS = {
  name: field({ wire: z.string(), access: 'immutable' }),
  topic: field({ wire: z.string(), access: 'immutable' }),
  pushConfig: field({ wire: pushConfigSchema, access: 'mutable', settle: settlePushConfig }),
  enableExactlyOnceDelivery: field({
    wire: z.boolean(),
    access: 'mutable',
    settle: flag,
    deliveryConfig: (value: true | undefined) => [['exactlyOnce', configFlag(value)]],
  }),
  ackDeadlineSeconds: field({
    wire: int32,
    access: 'mutable',
    settle: (seconds, settled) => {
      if (seconds === undefined || seconds === 0) {
        return settled.enableExactlyOnceDelivery
          ? DEFAULT_EXACTLY_ONCE_ACK_DEADLINE_SECONDS
          : DEFAULT_ACK_DEADLINE_SECONDS;
      }
      return checkAckDeadline(seconds, 'ackDeadlineSeconds');
    },
    deliveryConfig: (seconds: number) => [['ackDeadlineUs', String(seconds * 1_000_000)]],
  }),
  retainAckedMessages: field({
    wire: z.boolean(),
    access: 'mutable',
    settle: flag,
    // The topic's log keeps its acknowledged messages for its retention (attach-subscription.lua).
    deliveryConfig: (value: true | undefined) => [['retainAcked', configFlag(value)]],
  }),
  messageRetentionDuration: field({
    wire: durationString,
    access: 'mutable',
    settle: (value) =>
      value
        ? checkDuration(value, 'messageRetentionDuration', RETENTION_MIN_SECONDS, RETENTION_MAX_SECONDS)
        : DEFAULT_RETENTION,
    deliveryConfig: (retention: string) => [['retentionUs', microseconds(retention, 'messageRetentionDuration')]],
  }),
  labels: field({
    wire: labelsSchema,
    access: 'mutable',
    settle: (labels) => (labels && Object.keys(labels).length > 0 ? labels : undefined),
  }),
  enableMessageOrdering: field({
    wire: z.boolean(),
    access: 'immutable',
    settle: flag,
    deliveryConfig: (value: true | undefined) => [['ordered', configFlag(value)]],
  }),
  expirationPolicy: field({
    wire: z.strictObject({ ttl: durationString.optional() }),
    access: 'mutable',
    settle: (policy) => {
      if (!policy) return { ttl: DEFAULT_EXPIRATION_TTL };
      if (!policy.ttl) return {};
      return {
        ttl: checkDuration(policy.ttl, 'expirationPolicy.ttl', EXPIRATION_MIN_SECONDS, EXPIRATION_MAX_SECONDS),
      };
    },
  }),
  filter: field({
    wire: z.string(),
    access: 'immutable',
    // Checked here, evaluated by publish against each message's attributes (publish.ts).
    settle: (text) => (parseFilter(text ?? '') ? text : undefined),
  }),
  deadLetterPolicy: field({
    wire: z.strictObject({ deadLetterTopic: z.string().optional(), maxDeliveryAttempts: int32.optional() }),
    access: 'mutable',
    settle: settleDeadLetterPolicy,
    // '' for none: attaching writes every field, so a removed policy clears it.
    deliveryConfig: (policy: DeadLetterPolicy | undefined) => [
      ['maxDeliveryAttempts', policy ? String(policy.maxDeliveryAttempts) : ''],
    ],
  }),
  retryPolicy: field({
    wire: z.strictObject({ minimumBackoff: durationString.optional(), maximumBackoff: durationString.optional() }),
    access: 'mutable',
    // Absent: redeliveries are immediate; {} is the default backoffs.
    settle: (policy) => (policy ? settleRetryPolicy(policy) : undefined),
    // '' for none: attaching writes every field, so a removed policy clears them.
    deliveryConfig: (policy: RetryPolicy | undefined) => [
      ['minBackoffUs', policy ? microseconds(policy.minimumBackoff, 'minimumBackoff') : ''],
      ['maxBackoffUs', policy ? microseconds(policy.maximumBackoff, 'maximumBackoff') : ''],
    ],
  }),
  // Set only by DetachSubscription (subscriptions.ts); Pub/Sub creates a subscription attached
  // whatever a request says, so a request's value is ignored like any output field's.
  detached: outputField(z.boolean()),
  bigqueryConfig: unimplementedField(),
  cloudStorageConfig: unimplementedField(),
  bigtableConfig: unimplementedField(),
  messageTransforms: unimplementedField(),
  tags: unimplementedField(),
  state: outputField(z.string()),
  topicMessageRetentionDuration: outputField(z.string()),
  analyticsHubSubscriptionInfo: outputField(),
} satisfies FieldTable<SubscriptionSettings>;

/**
 * The checks across settings, run on what a create or an update would store (after every
 * field settled), so that no order of fields or update mask can get around them.
 */
export function checkSubscriptionSettings(settings: Partial<SubscriptionSettings>): void {
  if (settings.pushConfig && settings.enableExactlyOnceDelivery) {
    throw invalidArgument('Exactly once delivery is not supported for push subscriptions.');
  }
}

/** A Subscription as a request gives it (every field optional; bytes and names still unchecked). */
export type SubscriptionInput = WireOf<typeof SUBSCRIPTION_FIELDS>;
