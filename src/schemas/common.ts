import { z } from 'zod';
import { type ApiError, invalidArgument } from '../errors.ts';
import type { FieldTable, WireOf } from '../broker/fields.ts';

/**
 * Shared pieces of the request schemas, and the one place where a zod failure becomes a
 * Pub/Sub-style INVALID_ARGUMENT with a readable message.
 */

/** Fields whose values are maps with user-chosen keys: their keys are never renamed. */
const MAP_FIELDS = new Set(['labels', 'attributes', 'tags']);

/**
 * Levels of JSON arrays and objects a request body or streaming frame may nest (the body itself
 * is level 1). JSON.parse takes any depth, but a walk over the parsed value by recursion would
 * overflow the stack some thousands of levels down; no Pub/Sub request comes near 10 levels.
 */
export const MAX_JSON_DEPTH = 100;

export const nestedTooDeep = () =>
  invalidArgument(`Invalid JSON payload received. The JSON nesting exceeds ${MAX_JSON_DEPTH} levels.`);

/**
 * proto3 JSON parsers accept snake_case field names too; normalise them to lowerCamelCase.
 * `spelled` records how the client wrote each renamed field, for error messages. This is the
 * one walk over a whole body (zod stops where its schemas stop, at `z.unknown()` and at the map
 * fields skipped here), so this is where a body nested deeper than MAX_JSON_DEPTH is refused.
 */
export function camelCaseFields(value: unknown, spelled = new Map<string, string>(), depth = 1): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (depth > MAX_JSON_DEPTH) throw nestedTooDeep();
  if (Array.isArray(value)) return value.map((item) => camelCaseFields(item, spelled, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [key, child] of Object.entries(value)) {
    const name = key.includes('_') ? key.replace(/_([a-z0-9])/g, (_, letter: string) => letter.toUpperCase()) : key;
    if (name !== key) spelled.set(name, key);
    out[name] = MAP_FIELDS.has(name) ? child : camelCaseFields(child, spelled, depth + 1);
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

/** The strict JSON schema of a resource whose fields a table declares: each field optional. */
export function resourceSchema<Table extends FieldTable<never>>(table: Table): z.ZodType<WireOf<Table>> {
  const shape = Object.fromEntries(Object.entries(table).map(([name, field]) => [name, field.wire.optional()]));
  return z.strictObject(shape) as unknown as z.ZodType<WireOf<Table>>;
}
