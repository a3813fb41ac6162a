import { invalidArgument } from '../errors.ts';

/**
 * Pub/Sub resource names (https://cloud.google.com/pubsub/docs/admin#resource_names): IDs start
 * with a letter, hold letters, digits and `-_.~+%`, are 3–255 characters long, and do not start
 * with `goog`.
 */
const RESOURCE_ID = /^(?!goog)[A-Za-z][A-Za-z0-9\-_.~+%]{2,254}$/;
// Project IDs and numbers: lenient (any real project ID passes), but never a path separator.
const PROJECT_ID = /^[A-Za-z0-9][A-Za-z0-9\-_.:]{0,99}$/;

export const DELETED_TOPIC = '_deleted-topic_';

export type Collection = 'topics' | 'subscriptions' | 'snapshots';

export interface ResourceName {
  project: string;
  id: string;
  /** `projects/{project}/{collection}/{id}` */
  full: string;
}

const SINGULAR: Record<Collection, string> = { topics: 'topic', subscriptions: 'subscription', snapshots: 'snapshot' };

export function checkProject(project: string): string {
  if (!PROJECT_ID.test(project)) throw invalidArgument(`Invalid project name: "${project}".`);
  return project;
}

export function resourceName(collection: Collection, project: string, id: string): ResourceName {
  checkProject(project);
  if (!RESOURCE_ID.test(id)) {
    throw invalidArgument(
      `Invalid [${collection}] name: (name=projects/${project}/${collection}/${id}). A ${SINGULAR[collection]} ID must ` +
        'start with a letter, hold only letters, numbers, dashes, underscores, periods, tildes, plus or percent signs, ' +
        'be 3 to 255 characters long, and not start with "goog".',
    );
  }
  return { project, id, full: `projects/${project}/${collection}/${id}` };
}

/** Parses a full name such as the `topic` field of a subscription. */
export function parseResourceName(collection: Collection, full: string): ResourceName {
  const match = /^projects\/([^/]+)\/([^/]+)\/([^/]+)$/.exec(full);
  if (!match || match[2] !== collection) {
    throw invalidArgument(`Invalid [${collection}] name: (name=${full}).`);
  }
  return resourceName(collection, match[1], match[3]);
}

/** The ID of a full resource name: its last segment. */
export const resourceId = (fullName: string) => fullName.slice(fullName.lastIndexOf('/') + 1);
