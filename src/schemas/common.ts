import { z } from 'zod';
import { ApiError, invalidArgument } from '../errors.ts';

/**
 * Shared pieces of the request schemas, and the one place where a zod failure becomes a
 * Pub/Sub-style INVALID_ARGUMENT with a readable message.
 */

/** Fields whose values are maps with user-chosen keys: their keys are never renamed. */
const MAP_FIELDS = new Set(['labels', 'attributes', 'tags']);

/**
 * proto3 JSON parsers accept snake_case field names too; normalise them to lowerCamelCase.
 * `spelled` records how the client wrote each renamed field, for error messages.
 */
export function camelCaseFields(value: unknown, spelled = new Map<string, string>()): unknown {
  if (Array.isArray(value)) return value.map((item) => camelCaseFields(item, spelled));
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value)) {
    const name = key.includes('_') ? key.replace(/_([a-z0-9])/g, (_, letter: string) => letter.toUpperCase()) : key;
    if (name !== key) spelled.set(name, key);
    out[name] = MAP_FIELDS.has(name) ? child : camelCaseFields(child, spelled);
  }
  return out;
}

export function parseBody<T>(schema: z.ZodType<T>, body: unknown, what: string): T {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw invalidArgument(`Invalid JSON payload received. The ${what} must be a JSON object.`);
  }
  const spelled = new Map<string, string>();
  const parsed = schema.safeParse(camelCaseFields(body, spelled));
  if (parsed.success) return parsed.data;
  throw describeIssues(parsed.error, spelled);
}

function describeIssues(error: z.ZodError, spelled: Map<string, string>): ApiError {
  const issue = error.issues[0];
  const path = issue.path.join('.');
  if (issue.code === 'unrecognized_keys') {
    const where = path ? ` at '${path}'` : '';
    const name = spelled.get(issue.keys[0]) ?? issue.keys[0];
    return invalidArgument(`Invalid JSON payload received. Unknown name "${name}"${where}: Cannot find field.`);
  }
  return invalidArgument(`Invalid value at '${path || 'body'}': ${issue.message}`);
}

/** Labels: at most 64, lowercase keys (Pub/Sub's label rules). */
export const labelsSchema = z
  .record(
    z
      .string()
      .regex(
        /^[a-z][a-z0-9_-]{0,62}$/,
        'label keys start with a lowercase letter and hold at most 63 lowercase letters, digits, "_" or "-"',
      ),
    z.string().regex(/^[a-z0-9_-]{0,63}$/, 'label values hold at most 63 lowercase letters, digits, "_" or "-"'),
  )
  .refine((labels) => Object.keys(labels).length <= 64, 'at most 64 labels are allowed');

export const durationString = z.string().regex(/^\d{1,12}(\.\d{1,9})?s$/, 'expected a duration such as "600s"');

/** int64 fields arrive as JSON strings or numbers; int32 as numbers (strings tolerated). */
export const int32 = z.preprocess(
  (value) => (typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value),
  z.number().int('expected an integer'),
);

/** A field the broker knows but does not implement yet: refused, never silently ignored. */
export function notImplemented(field: string): ApiError {
  return new ApiError('UNIMPLEMENTED', `The field "${field}" is not supported by this broker yet.`);
}
