import type { FastifyInstance, FastifyRequest } from 'fastify';
import { parseIamResource } from '../src/broker/authorization.ts';
import { parseBody } from '../src/schemas/common.ts';
import { getIamPolicyBodySchema, setIamPolicyBodySchema, testIamPermissionsBodySchema } from '../src/schemas/iam.ts';
import { parseUpdateMask } from '../src/schemas/update-mask.ts';
import { httpCaller } from './caller.ts';
import { PROJECT_PATH, type RouteOptions, SNAPSHOT_PATH, SUBSCRIPTION_PATH, TOPIC_PATH } from './options.ts';

type IamParams = Record<string, string>;

/**
 * The google.iam.v1.IAMPolicy methods on every resource with a policy: Pub/Sub's topics,
 * subscriptions and snapshots, and (the broker's admin API for project policies) projects.
 */
const RESOURCE_PATHS: [path: string, fullName: (params: IamParams) => string][] = [
  [PROJECT_PATH, (p) => `projects/${p.project}`],
  [TOPIC_PATH, (p) => `projects/${p.project}/topics/${p.topic}`],
  [SUBSCRIPTION_PATH, (p) => `projects/${p.project}/subscriptions/${p.subscription}`],
  [SNAPSHOT_PATH, (p) => `projects/${p.project}/snapshots/${p.snapshot}`],
];

export async function iamRoutes(app: FastifyInstance, { broker }: RouteOptions): Promise<void> {
  const caller = (request: FastifyRequest) => httpCaller(broker, 'rest', request);

  for (const [path, fullName] of RESOURCE_PATHS) {
    const resource = (request: FastifyRequest<{ Params: IamParams }>) => parseIamResource(fullName(request.params));
    // Pub/Sub binds GetIamPolicy to GET; the IAM mixin's own binding, which clients may use, is POST.
    app.get<{ Params: IamParams }>(`${path}::getIamPolicy`, (request) =>
      broker.iam.getPolicy(caller(request), resource(request)),
    );
    app.post<{ Params: IamParams }>(`${path}::getIamPolicy`, (request) => {
      parseBody(getIamPolicyBodySchema, request.body ?? {}, 'request');
      return broker.iam.getPolicy(caller(request), resource(request));
    });
    app.post<{ Params: IamParams }>(`${path}::setIamPolicy`, (request) => {
      const { policy, updateMask } = parseBody(setIamPolicyBodySchema, request.body, 'request');
      return broker.iam.setPolicy(caller(request), resource(request), {
        policy,
        updateMask: updateMask === undefined ? undefined : parseUpdateMask(updateMask),
      });
    });
    app.post<{ Params: IamParams }>(`${path}::testIamPermissions`, async (request) => {
      const { permissions = [] } = parseBody(testIamPermissionsBodySchema, request.body, 'request');
      const held = await broker.iam.testPermissions(caller(request), resource(request), permissions);
      return held.length > 0 ? { permissions: held } : {};
    });
  }
}
