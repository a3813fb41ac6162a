import { randomBytes } from 'node:crypto';
import { invalidArgument } from '../errors.ts';

/**
 * Pub/Sub's IAM model, as the broker applies it: permissions, the roles that grant them, and
 * policies (bindings of roles to members) kept per project and per topic, subscription and
 * snapshot. authorization.ts decides calls with them.
 */

/** Pub/Sub's permissions on each kind of resource (schemas aside: the broker has none). */
const RESOURCE_PERMISSIONS = {
  topics: [
    'pubsub.topics.attachSubscription',
    'pubsub.topics.create',
    'pubsub.topics.delete',
    'pubsub.topics.detachSubscription',
    'pubsub.topics.get',
    'pubsub.topics.getIamPolicy',
    'pubsub.topics.list',
    'pubsub.topics.publish',
    'pubsub.topics.setIamPolicy',
    'pubsub.topics.update',
  ],
  subscriptions: [
    'pubsub.subscriptions.consume',
    'pubsub.subscriptions.create',
    'pubsub.subscriptions.delete',
    'pubsub.subscriptions.get',
    'pubsub.subscriptions.getIamPolicy',
    'pubsub.subscriptions.list',
    'pubsub.subscriptions.setIamPolicy',
    'pubsub.subscriptions.update',
  ],
  snapshots: [
    'pubsub.snapshots.create',
    'pubsub.snapshots.delete',
    'pubsub.snapshots.get',
    'pubsub.snapshots.getIamPolicy',
    'pubsub.snapshots.list',
    'pubsub.snapshots.seek',
    'pubsub.snapshots.setIamPolicy',
    'pubsub.snapshots.update',
  ],
  /**
   * A project's own policy. There is no Resource Manager here: the broker's admin API for
   * project policies (the IAM methods on `projects/{project}`) asks for these two, which only
   * roles/pubsub.admin grants.
   */
  projects: ['resourcemanager.projects.getIamPolicy', 'resourcemanager.projects.setIamPolicy'],
} as const;

export type ResourceKind = keyof typeof RESOURCE_PERMISSIONS;
export type Permission = (typeof RESOURCE_PERMISSIONS)[ResourceKind][number];

const ALL_PERMISSIONS: readonly Permission[] = Object.values(RESOURCE_PERMISSIONS).flat();
const IAM_PERMISSION = /\.(get|set)IamPolicy$/;
const PUBSUB_PERMISSIONS = ALL_PERMISSIONS.filter((permission) => permission.startsWith('pubsub.'));

/** Pub/Sub's predefined roles and the permissions each grants. */
export const ROLES: ReadonlyMap<string, ReadonlySet<Permission>> = new Map([
  ['roles/pubsub.admin', new Set(ALL_PERMISSIONS)],
  ['roles/pubsub.editor', new Set(PUBSUB_PERMISSIONS.filter((permission) => !IAM_PERMISSION.test(permission)))],
  ['roles/pubsub.publisher', new Set<Permission>(['pubsub.topics.publish'])],
  [
    'roles/pubsub.subscriber',
    new Set<Permission>(['pubsub.snapshots.seek', 'pubsub.subscriptions.consume', 'pubsub.topics.attachSubscription']),
  ],
  [
    'roles/pubsub.viewer',
    new Set<Permission>([
      'pubsub.snapshots.get',
      'pubsub.snapshots.list',
      'pubsub.subscriptions.get',
      'pubsub.subscriptions.list',
      'pubsub.topics.get',
      'pubsub.topics.list',
    ]),
  ],
]);

export interface Binding {
  role: string;
  members: string[];
}

/** A policy as the broker keeps it, beside the resource's record (or as a project's). */
export interface StoredPolicy {
  bindings: Binding[];
  /** Changes with every write: a setIamPolicy naming another one is refused (ABORTED). */
  etag: string;
}

/** A google.iam.v1.Policy as the REST front end writes it (the gRPC one encodes the etag's bytes). */
export interface Policy {
  version: number;
  bindings?: Binding[];
  etag: string;
}

/** A policy as a setIamPolicy request gives it (front ends check only its shape). */
export interface PolicyInput {
  version?: number;
  bindings?: { role?: string; members?: string[]; condition?: unknown }[];
  etag?: string;
}

/** The etag of a resource that never had a policy set (Pub/Sub's, too). */
export const EMPTY_POLICY_ETAG = 'ACAB';

/**
 * Whether two etags are the same bytes. An etag is bytes, written in base64; clients may send it
 * back in the URL-safe alphabet and without padding (gcloud does), so the bytes are compared.
 */
export const sameEtag = (a: string, b: string): boolean => Buffer.from(a, 'base64').equals(Buffer.from(b, 'base64'));

/**
 * The members a policy may name: one principal as authentication names it (`user:`,
 * `serviceAccount:`), or everyone. Callers belong to no groups or domains here, so bindings to
 * those are refused rather than kept to match nobody.
 */
const MEMBER = /^(?:(?:user|serviceAccount):[^\s:]+|allUsers|allAuthenticatedUsers)$/;

export function renderPolicy(stored: StoredPolicy | undefined): Policy {
  if (!stored || stored.bindings.length === 0) return { version: 1, etag: stored?.etag ?? EMPTY_POLICY_ETAG };
  return { version: 1, bindings: stored.bindings, etag: stored.etag };
}

/**
 * The policy a setIamPolicy request asks for, checked (INVALID_ARGUMENT for an unknown role, a
 * malformed member or a condition): bindings of one role merged, members in order without
 * repeats, bindings without members dropped. A new etag.
 */
export function checkPolicy(input: PolicyInput): StoredPolicy {
  if (input.version !== undefined && ![0, 1, 3].includes(input.version)) {
    throw invalidArgument(`Invalid policy version ${input.version}: it must be 1 or 3.`);
  }
  const members = new Map<string, Set<string>>();
  for (const binding of input.bindings ?? []) {
    if (binding.condition !== undefined && binding.condition !== null) {
      throw invalidArgument('Conditional role bindings are not supported by this broker.');
    }
    const role = binding.role ?? '';
    if (!ROLES.has(role)) {
      throw invalidArgument(`Role ${role || '(none)'} is not supported: use one of ${[...ROLES.keys()].join(', ')}.`);
    }
    for (const member of binding.members ?? []) {
      if (!MEMBER.test(member)) {
        throw invalidArgument(
          `Invalid member "${member}": use user:<email>, serviceAccount:<email>, allUsers or allAuthenticatedUsers (groups and domains are not supported).`,
        );
      }
      let roleMembers = members.get(role);
      if (!roleMembers) members.set(role, (roleMembers = new Set()));
      roleMembers.add(member);
    }
  }
  const bindings = [...members]
    .filter(([, roleMembers]) => roleMembers.size > 0)
    .map(([role, roleMembers]) => ({ role, members: [...roleMembers] }));
  return { bindings, etag: randomBytes(8).toString('base64') };
}

/** The permissions a testIamPermissions request may ask about on a kind of resource (INVALID_ARGUMENT for others). */
export function checkTestedPermissions(kind: ResourceKind, permissions: string[]): Permission[] {
  // On a project every permission may be tested: the project's grants reach all of its resources.
  const valid: readonly string[] = kind === 'projects' ? ALL_PERMISSIONS : RESOURCE_PERMISSIONS[kind];
  for (const permission of permissions) {
    if (!valid.includes(permission)) {
      throw invalidArgument(`Permission ${permission} is not valid for ${kind}: use one of ${valid.join(', ')}.`);
    }
  }
  return permissions as Permission[];
}

/** Whether a binding's members include the caller (`undefined`: a call nobody authenticated). */
export function bindsMember(binding: Binding, principal: string | undefined): boolean {
  for (const member of binding.members) {
    if (member === 'allUsers') return true;
    if (principal !== undefined && (member === principal || member === 'allAuthenticatedUsers')) return true;
  }
  return false;
}

/** Whether any of the bindings grants the permission to the caller. */
export function grants(bindings: readonly Binding[], principal: string | undefined, permission: Permission): boolean {
  return bindings.some(
    (binding) => ROLES.get(binding.role)?.has(permission) === true && bindsMember(binding, principal),
  );
}
