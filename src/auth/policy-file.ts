import { checkPolicy, type Binding, type PolicyInput } from '../broker/iam-policy.ts';
import { checkProject } from '../broker/names.ts';

/**
 * The IAM policy file (IAM_POLICY_FILE): the project-level bindings an operator grants from the
 * configuration, which hold whatever the stored policies say (so that an admin can never be locked
 * out through the API). A JSON object from project ID, or `*` for every project, to a policy:
 *
 *   { "*": { "bindings": [{ "role": "roles/pubsub.admin", "members": ["user:ops@example.com"] }] },
 *     "orders": { "bindings": [{ "role": "roles/pubsub.publisher", "members": ["serviceAccount:shop@example.com"] }] } }
 */
export type ConfiguredBindings = ReadonlyMap<string, readonly Binding[]>;

/**
 * Without a policy file, every authenticated principal is an admin of every project: a broker
 * that only authenticates (AUTH_TOKENS_FILE alone) lets its known callers do everything, and
 * grants on topics and subscriptions add to nothing.
 */
export const AUTHENTICATED_ARE_ADMINS: ConfiguredBindings = new Map([
  ['*', [{ role: 'roles/pubsub.admin', members: ['allAuthenticatedUsers'] }]],
]);

export class PolicyFileError extends Error {}

/** Project → bindings, from the file's text; throws PolicyFileError naming the first bad entry. */
export function parsePolicyFile(text: string): ConfiguredBindings {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    throw new PolicyFileError(`not JSON: ${(error as Error).message}`);
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new PolicyFileError('expected a JSON object from project ID (or "*") to {"bindings": [...]}');
  }
  const bindings = new Map<string, readonly Binding[]>();
  for (const [project, policy] of Object.entries(parsed)) {
    try {
      if (project !== '*') checkProject(project);
      if (policy === null || typeof policy !== 'object' || !Array.isArray((policy as PolicyInput).bindings)) {
        throw new Error('expected {"bindings": [{"role": ..., "members": [...]}]}');
      }
      bindings.set(project, checkPolicy(policy as PolicyInput).bindings);
    } catch (error) {
      throw new PolicyFileError(`"${project}": ${(error as Error).message}`);
    }
  }
  return bindings;
}
