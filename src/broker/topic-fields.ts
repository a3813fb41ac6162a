import { z } from 'zod';
import { invalidArgument } from '../errors.ts';
import { durationString, labelsSchema } from '../schemas/wire-types.ts';
import { checkDuration, durationMicroseconds } from './durations.ts';
import { type FieldDefinition, type FieldTable, outputField, unimplementedField, type WireOf } from './fields.ts';

/** Every field of a Pub/Sub Topic, declared once (see fields.ts). */

export interface MessageStoragePolicy {
  allowedPersistenceRegions?: string[];
  enforceInTransit?: boolean;
}

/** The settings a topic record stores (records.ts), as the table below settles them. */
export interface TopicSettings {
  labels?: Record<string, string>;
  messageRetentionDuration?: string;
  messageStoragePolicy?: MessageStoragePolicy;
  deduplicationWindow?: string;
}

const DEDUPLICATION_WINDOW_DEFAULT_SECONDS = 600;
const DEDUPLICATION_WINDOW_MAX_SECONDS = 24 * 3600;
const RETENTION_MIN_SECONDS = 600;
const RETENTION_MAX_SECONDS = 31 * 24 * 3600;

const field = <Value>(definition: FieldDefinition<TopicSettings, Value>) => definition;

export const TOPIC_FIELDS = {
  name: field({ wire: z.string(), access: 'fixed' }),
  labels: field({
    wire: labelsSchema,
    access: 'mutable',
    settle: (labels) => (labels && Object.keys(labels).length > 0 ? labels : undefined),
  }),
  messageRetentionDuration: field({
    wire: durationString,
    access: 'mutable',
    settle: (value) =>
      value
        ? checkDuration(value, 'messageRetentionDuration', RETENTION_MIN_SECONDS, RETENTION_MAX_SECONDS)
        : undefined,
  }),
  messageStoragePolicy: field({
    wire: z.strictObject({
      allowedPersistenceRegions: z.array(z.string().min(1)).optional(),
      enforceInTransit: z.boolean().optional(),
    }),
    access: 'mutable',
    // Which regions exist is the topic service's to check (it knows the deployment).
    settle: (policy) => {
      if (!policy) return undefined;
      if (!policy.allowedPersistenceRegions?.length) {
        throw invalidArgument('Invalid messageStoragePolicy: allowedPersistenceRegions must list at least one region.');
      }
      return policy;
    },
  }),
  // The broker's own: how long a published message's idempotency key is remembered
  // (message-extensions.ts); unset means the default, 10 minutes.
  deduplicationWindow: field({
    wire: durationString,
    access: 'mutable',
    settle: (value) =>
      value ? checkDuration(value, 'deduplicationWindow', 1, DEDUPLICATION_WINDOW_MAX_SECONDS) : undefined,
  }),
  kmsKeyName: unimplementedField(z.string()),
  schemaSettings: unimplementedField(),
  ingestionDataSourceSettings: unimplementedField(),
  messageTransforms: unimplementedField(),
  tags: unimplementedField(),
  state: outputField(z.string()),
  satisfiesPzs: outputField(z.boolean()),
} satisfies FieldTable<TopicSettings>;

/** A Topic as a request gives it (every field optional). */
export type TopicInput = WireOf<typeof TOPIC_FIELDS>;

/** How long the topic keeps its messages (µs), whatever its subscriptions did; undefined: not set. */
export function topicRetentionUs(topic: TopicSettings): number | undefined {
  const retention = topic.messageRetentionDuration;
  return retention ? durationMicroseconds(retention, 'messageRetentionDuration') : undefined;
}

/** How long the topic remembers a published message's idempotency key (µs). */
export function deduplicationWindowUs(topic: TopicSettings): number {
  const window = topic.deduplicationWindow;
  return window
    ? durationMicroseconds(window, 'deduplicationWindow')
    : DEDUPLICATION_WINDOW_DEFAULT_SECONDS * 1_000_000;
}
