import type { UntypedServiceImplementation } from '@grpc/grpc-js';
import { parseIamResource } from '../broker/authorization.ts';
import type { Policy, PolicyInput } from '../broker/iam-policy.ts';
import { invalidArgument } from '../errors.ts';
import { type GrpcServices, unary } from './calls.ts';
import { updateMaskPaths } from './resources.ts';

/** A google.iam.v1.Policy as proto-loader decodes it: the etag is bytes. */
interface ProtoPolicy {
  version?: number;
  bindings?: { role?: string; members?: string[]; condition?: object }[];
  etag?: Buffer;
  auditConfigs?: object[];
}

interface ResourceRequest {
  resource?: string;
}

const iamResource = (request: ResourceRequest) => {
  if (!request.resource) throw invalidArgument('The request must set "resource".');
  return parseIamResource(request.resource);
};

/** The broker's policy input from protobuf: an etag's bytes as the base64 REST uses; no etag when empty. */
function policyInput(policy: ProtoPolicy | undefined): PolicyInput | undefined {
  if (!policy) return undefined;
  if (policy.auditConfigs?.length) throw invalidArgument('Audit configs are not supported by this broker.');
  return {
    version: policy.version,
    bindings: policy.bindings,
    etag: policy.etag?.length ? policy.etag.toString('base64') : undefined,
  };
}

const policyProto = (policy: Policy) => ({ ...policy, etag: Buffer.from(policy.etag, 'base64') });

/**
 * google.iam.v1.IAMPolicy, which the official clients call on the same endpoint as Pub/Sub
 * (`topic.iam.getPolicy()` and the like): the resource is a topic, subscription or snapshot
 * name, or (the broker's admin API) `projects/{project}`.
 */
export function iamPolicyService(services: GrpcServices): UntypedServiceImplementation {
  const { broker } = services;
  return {
    GetIamPolicy: unary(services, async (request: ResourceRequest, caller) =>
      policyProto(await broker.iam.getPolicy(caller, iamResource(request))),
    ),
    SetIamPolicy: unary(
      services,
      async (request: ResourceRequest & { policy?: ProtoPolicy; updateMask?: { paths?: string[] } }, caller) => {
        const updateMask = request.updateMask?.paths?.length ? updateMaskPaths(request.updateMask) : undefined;
        const policy = policyInput(request.policy);
        return policyProto(await broker.iam.setPolicy(caller, iamResource(request), { policy, updateMask }));
      },
    ),
    TestIamPermissions: unary(services, async (request: ResourceRequest & { permissions?: string[] }, caller) => ({
      permissions: await broker.iam.testPermissions(caller, iamResource(request), request.permissions ?? []),
    })),
  };
}
