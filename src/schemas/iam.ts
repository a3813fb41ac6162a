import { z } from 'zod';

/**
 * The bodies of the IAM methods (google.iam.v1) as REST sends them. A Policy's int32 `version`
 * may come as a JSON number or string (proto3 JSON); its `etag` is base64.
 */
const int32 = z.union([
  z.number().int(),
  z
    .string()
    .regex(/^-?\d+$/)
    .transform(Number),
]);

const bindingSchema = z.strictObject({
  role: z.string().optional(),
  members: z.array(z.string()).optional(),
  condition: z.unknown().optional(),
});

const policySchema = z.strictObject({
  version: int32.optional(),
  bindings: z.array(bindingSchema).optional(),
  etag: z.string().optional(),
  auditConfigs: z.array(z.unknown()).max(0, 'audit configs are not supported').optional(),
});

export const setIamPolicyBodySchema = z.strictObject({
  policy: policySchema.optional(),
  updateMask: z.string().optional(),
});

/** GetIamPolicy by POST: the options name a policy version, and every version reads the same here. */
export const getIamPolicyBodySchema = z.strictObject({
  options: z.strictObject({ requestedPolicyVersion: int32.optional() }).optional(),
});

export const testIamPermissionsBodySchema = z.strictObject({
  permissions: z.array(z.string()).optional(),
});
