import { checkProject, type Collection, parseResourceName, type ResourceName } from '../broker/names.ts';
import type { PageRequest } from '../broker/pagination.ts';
import type { Subscription } from '../broker/subscriptions.ts';
import type { Topic } from '../broker/topics.ts';
import type { TopicInput } from '../broker/topic-fields.ts';
import type { SubscriptionInput } from '../broker/subscription-fields.ts';
import { invalidArgument } from '../errors.ts';
import { parseBody } from '../schemas/common.ts';
import { subscriptionBodySchema } from '../schemas/subscriptions.ts';
import { topicBodySchema } from '../schemas/topics.ts';
import { parseUpdateMask } from '../schemas/update-mask.ts';
import {
  convertPaths,
  durationFromJson,
  durationToJson,
  fieldMaskToJson,
  type ProtoDuration,
  SUBSCRIPTION_DURATIONS,
  TOPIC_DURATIONS,
} from './convert.ts';

/**
 * Topics and subscriptions between their protobuf forms and the broker's: a resource a request
 * gives goes through the same schema as a REST body, so that both front ends check it alike.
 */

export const topicInput = (topic: object | undefined): TopicInput =>
  parseBody(topicBodySchema, convertPaths(topic ?? {}, TOPIC_DURATIONS, durationToJson), 'topic');

export const subscriptionInput = (subscription: object | undefined): SubscriptionInput =>
  parseBody(
    subscriptionBodySchema,
    convertPaths(subscription ?? {}, SUBSCRIPTION_DURATIONS, durationToJson),
    'subscription',
  );

export const topicProto = (topic: Topic) =>
  convertPaths<string, ProtoDuration>(topic, TOPIC_DURATIONS, durationFromJson);

export const subscriptionProto = (subscription: Subscription) =>
  convertPaths<string, ProtoDuration>(subscription, SUBSCRIPTION_DURATIONS, durationFromJson);

/** An update mask's paths as field names (lowerCamelCase), by the REST front end's rule. */
export const updateMaskPaths = (mask: { paths?: string[] } | undefined) => parseUpdateMask(fieldMaskToJson(mask));

/** A required resource name field of a request (`topic`, `subscription`, `name`). */
export function requestName(collection: Collection, value: string | undefined, field: string): ResourceName {
  if (!value) throw invalidArgument(`The request must set "${field}".`);
  return parseResourceName(collection, value);
}

/** The project of a list request: `projects/{project}`. */
export function requestProject(value: string | undefined): string {
  const match = /^projects\/([^/]+)$/.exec(value ?? '');
  if (!match) throw invalidArgument(`Invalid project: "${value ?? ''}" is not projects/{project}.`);
  return checkProject(match[1]);
}

/** The page of a list request (pageSize is an int32 over gRPC, a query string over REST). */
export function pageRequest(request: { pageSize?: number; pageToken?: string }): PageRequest {
  return {
    pageSize: request.pageSize === undefined ? undefined : String(request.pageSize),
    pageToken: request.pageToken,
  };
}
