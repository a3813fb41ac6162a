import { ApiError, invalidArgument, notFound } from '../errors.ts';
import type { CallContext } from './call-context.ts';
import type { ControlPlane } from './control-plane.ts';
import {
  type Binding,
  checkPolicy,
  checkTestedPermissions,
  EMPTY_POLICY_ETAG,
  grants,
  type Permission,
  type Policy,
  type PolicyInput,
  type ResourceKind,
  renderPolicy,
  sameEtag,
  type StoredPolicy,
} from './iam-policy.ts';
import { type Collection, checkProject, type ResourceName, resourceName } from './names.ts';
import {
  findRecord,
  type ProjectPolicyRecord,
  type SnapshotRecord,
  type SubscriptionRecord,
  type TopicRecord,
} from './records.ts';
import type { Regions } from './regions.ts';

/**
 * Who may do what (Pub/Sub's IAM model, iam-policy.ts). A call is allowed when a binding grants
 * its permission to the caller's principal: one from the configuration (IAM_POLICY_FILE, for
 * one project or for all), the project's stored policy, or the policy of the resource the call
 * names. Every service checks its calls here, before it changes or reveals anything, so every
 * front end is checked alike.
 *
 * A broker that authenticates nobody has no principals to tell apart: then every call is allowed
 * (as the Pub/Sub emulator does), and policies are only kept and shown.
 */
export interface AuthorizationSettings {
  /** Whether calls are checked: the broker authenticates its callers. */
  enforce: boolean;
  /**
   * Bindings from the configuration, by project ID ('*': every project), as they are now (the
   * file may be reloaded). They apply beside the stored policies, and the IAM methods neither
   * show nor change them.
   */
  configured(): ReadonlyMap<string, readonly Binding[]>;
}

/** A resource with an IAM policy: a project, or a topic, subscription or snapshot. */
export type IamResource =
  | { kind: 'projects'; project: string /** `projects/<id>` */; full: string }
  | ({ kind: Collection } & ResourceName);

/** The control-plane kind of each collection's records. */
const RECORD_KIND = { topics: 'topic', subscriptions: 'subscription', snapshots: 'snapshot' } as const;

/** A SetIamPolicyRequest; `updateMask` holds field names (default: bindings and etag). */
export interface SetIamPolicyRequest {
  policy?: PolicyInput;
  updateMask?: string[];
}

/**
 * How long a process reuses a project's stored policy it read: a change made through another
 * broker process applies there within this time (through this process, at once).
 */
const PROJECT_POLICY_REMEMBERED_MS = 1000;
/** Project policies a process remembers; past this, the longest kept is dropped. */
const MAX_REMEMBERED_PROJECTS = 10_000;

const SET_MASK_FIELDS = new Set(['bindings', 'etag', 'version']);

/** Parses the resource of an IAM method: `projects/<id>` or a topic, subscription or snapshot name. */
export function parseIamResource(full: string): IamResource {
  const project = /^projects\/([^/]+)$/.exec(full);
  if (project) return { kind: 'projects', project: checkProject(project[1]), full };
  const match = /^projects\/([^/]+)\/(topics|subscriptions|snapshots)\/([^/]+)$/.exec(full);
  if (!match) {
    throw invalidArgument(
      `Invalid resource "${full}": name a project, topic, subscription or snapshot (projects/{project}[/{collection}/{id}]).`,
    );
  }
  const kind = match[2] as Collection;
  return { kind, ...resourceName(kind, match[1], match[3]) };
}

/** The permission of an IAM method on a kind of resource. */
const iamPermission = (kind: ResourceKind, method: 'getIamPolicy' | 'setIamPolicy') =>
  `${kind === 'projects' ? 'resourcemanager' : 'pubsub'}.${kind}.${method}` as Permission;

const permissionDenied = (permission: Permission, target: string) =>
  new ApiError('PERMISSION_DENIED', `Permission '${permission}' denied on resource '${target}' (or it may not exist).`);

export class Authorizer {
  private readonly projectPolicies = new Map<string, { record: ProjectPolicyRecord | undefined; until: number }>();

  constructor(
    private readonly regions: Regions,
    private readonly controlPlane: ControlPlane,
    private readonly settings: AuthorizationSettings,
  ) {}

  /** Throws PERMISSION_DENIED unless the caller holds `permission` on `target` (a full name, as IamResource's). */
  async require(caller: CallContext, permission: Permission, target: string): Promise<void> {
    if (!(await this.allows(caller, permission, target))) throw permissionDenied(permission, target);
  }

  /**
   * Whether the caller holds `permission` on `target`: by configuration, the project's policy or
   * the resource's (read only when the others do not grant it, unless the caller has it already).
   */
  async allows(
    caller: CallContext,
    permission: Permission,
    target: string,
    resourcePolicy: () => Promise<StoredPolicy | undefined> = () => this.readResourcePolicy(target),
  ): Promise<boolean> {
    if (!this.settings.enforce) return true;
    const { principal } = caller;
    const project = target.split('/', 2)[1] ?? '';
    const configured = this.settings.configured();
    if (grants(configured.get('*') ?? [], principal, permission)) return true;
    if (grants(configured.get(project) ?? [], principal, permission)) return true;
    if (grants((await this.projectPolicy(project))?.bindings ?? [], principal, permission)) return true;
    const resource = await resourcePolicy();
    return resource !== undefined && grants(resource.bindings, principal, permission);
  }

  /** GetIamPolicy: the resource's policy (NOT_FOUND for a resource that does not exist). */
  async getPolicy(caller: CallContext, resource: IamResource): Promise<Policy> {
    await this.require(caller, iamPermission(resource.kind, 'getIamPolicy'), resource.full);
    if (resource.kind === 'projects') return renderPolicy(await this.readProjectPolicy(resource.project));
    const record = await this.readRecord(resource);
    if (!record) throw notFound(resource.id);
    return renderPolicy(record.iamPolicy);
  }

  /**
   * SetIamPolicy: replaces the resource's policy, unless the request names an etag that is not
   * the current one (ABORTED: another change came first; read it again and retry).
   */
  async setPolicy(caller: CallContext, resource: IamResource, request: SetIamPolicyRequest): Promise<Policy> {
    if (!request.policy) throw invalidArgument('The SetIamPolicyRequest must set policy.');
    const mask = request.updateMask ?? ['bindings', 'etag'];
    const unknown = mask.find((path) => !SET_MASK_FIELDS.has(path));
    if (unknown !== undefined)
      throw invalidArgument(`Invalid update_mask path "${unknown}": a policy's fields are bindings, etag and version.`);
    const asked = checkPolicy(request.policy);
    await this.require(caller, iamPermission(resource.kind, 'setIamPolicy'), resource.full);
    const decide = (current: StoredPolicy | undefined): StoredPolicy => {
      // An empty etag is none (proto3: bytes not set).
      const expected = request.policy?.etag || undefined;
      if (expected !== undefined && mask.includes('etag') && !sameEtag(expected, current?.etag ?? EMPTY_POLICY_ETAG)) {
        throw new ApiError(
          'ABORTED',
          'There were concurrent policy changes. Please retry the whole read-modify-write with exponential backoff.',
        );
      }
      return mask.includes('bindings') ? asked : { bindings: current?.bindings ?? [], etag: asked.etag };
    };
    if (resource.kind === 'projects') {
      const record = await this.controlPlane.upsert('project', resource.full, (current, version) => ({
        name: resource.full,
        version,
        ...decide(current),
      }));
      this.projectPolicies.delete(resource.project);
      return renderPolicy(record);
    }
    this.regions.requireLocal();
    const updated = await this.controlPlane.replace(
      RECORD_KIND[resource.kind],
      resource,
      (record: TopicRecord | SubscriptionRecord | SnapshotRecord, version) => ({
        ...record,
        version,
        iamPolicy: decide(record.iamPolicy),
      }),
    );
    return renderPolicy(updated.iamPolicy);
  }

  /**
   * TestIamPermissions: those of `permissions` the caller holds on the resource; none for a
   * resource that does not exist (Pub/Sub answers so rather than NOT_FOUND).
   */
  async testPermissions(caller: CallContext, resource: IamResource, permissions: string[]): Promise<Permission[]> {
    const tested = checkTestedPermissions(resource.kind, permissions);
    // The resource's record is read once for all the permissions.
    const record = resource.kind === 'projects' ? undefined : await this.readRecord(resource);
    if (resource.kind !== 'projects' && !record) return [];
    const policy = async () => record?.iamPolicy;
    const held = await Promise.all(tested.map((permission) => this.allows(caller, permission, resource.full, policy)));
    return tested.filter((_, i) => held[i]);
  }

  /** A project's stored policy, reused for a while (PROJECT_POLICY_REMEMBERED_MS). */
  private async projectPolicy(project: string): Promise<ProjectPolicyRecord | undefined> {
    const remembered = this.projectPolicies.get(project);
    if (remembered && remembered.until > performance.now()) return remembered.record;
    const record = await this.readProjectPolicy(project);
    if (this.projectPolicies.size >= MAX_REMEMBERED_PROJECTS && !remembered) {
      this.projectPolicies.delete(this.projectPolicies.keys().next().value!);
    }
    this.projectPolicies.set(project, { record, until: performance.now() + PROJECT_POLICY_REMEMBERED_MS });
    return record;
  }

  private readProjectPolicy(project: string): Promise<ProjectPolicyRecord | undefined> {
    return findRecord(this.regions, 'projectPolicies', `projects/${project}`);
  }

  /** The policy of a topic, subscription or snapshot (none for a project: see projectPolicy). */
  private async readResourcePolicy(full: string): Promise<StoredPolicy | undefined> {
    const resource = parseIamResource(full);
    return resource.kind === 'projects' ? undefined : (await this.readRecord(resource))?.iamPolicy;
  }

  /** The live record of a topic, subscription or snapshot. */
  private readRecord(resource: { kind: Collection; full: string }) {
    return findRecord(this.regions, resource.kind, resource.full);
  }
}
