import { z } from 'zod';
import { ApiError, invalidArgument } from '../errors.ts';

/**
 * How the fields of a Pub/Sub resource (topic, subscription) are declared: each one once, in
 * topic-fields.ts or subscription-fields.ts, with its wire type, whether an update may change
 * it, whether the broker implements it, and (for a stored setting) how a request's value is
 * checked and defaulted and what the delivery scripts read of it. Validation, update masks,
 * rendering and the Redis projection all read those tables; docs/architecture.md says how to
 * add a field.
 */

/**
 * - `mutable`: set at create, changed by an update that names it in its mask;
 * - `immutable`: set at create; an update mask naming it is refused as "not mutable";
 * - `fixed`: set at create (the resource's identity); not an update-mask path at all;
 * - `output`: set by the broker; tolerated in requests (clients echo resources back), ignored.
 */
export type FieldAccess = 'mutable' | 'immutable' | 'fixed' | 'output';

export interface FieldDefinition<Settings = unknown, Value = unknown> {
  /** The JSON form of the field, which front ends decode requests into. */
  wire: z.ZodType<Value>;
  access: FieldAccess;
  /** Known to Pub/Sub but not built here: a request that gives it a value is refused (UNIMPLEMENTED). */
  unimplemented?: true;
  /**
   * A stored setting: the value to store for what the request gave (undefined: not given),
   * checked (INVALID_ARGUMENT) and defaulted; undefined stores nothing. `settled` holds the
   * settings decided before this one (table order) for the same request.
   */
  settle?(value: Value | undefined, settled: Partial<Settings>): unknown;
  /** The delivery scripts' view of a stored setting (its stored value): config hash fields and their values. */
  deliveryConfig?(stored: never): [string, string][];
}

export type FieldTable<Settings> = Record<string, FieldDefinition<Settings, unknown>>;

/** A resource as a request gives it: every field of the table optional, in its wire type. */
export type WireOf<Table extends FieldTable<never>> = { [Name in keyof Table]?: z.output<Table[Name]['wire']> };

/** A field Pub/Sub has and the broker does not build yet (mutable in Pub/Sub unless said). */
export const unimplementedField = (wire: z.ZodType = z.unknown(), access: FieldAccess = 'mutable') =>
  ({ wire, access, unimplemented: true }) as const;

/** A field the broker sets, tolerated in requests. */
export const outputField = (wire: z.ZodType = z.unknown()) => ({ wire, access: 'output' }) as const;

/** A field the broker knows but does not implement yet: refused, never silently ignored. */
export function notImplemented(field: string): ApiError {
  return new ApiError('UNIMPLEMENTED', `The field "${field}" is not supported by this broker yet.`);
}

/** A value that asks for nothing: absent, empty, false, or an empty object. */
function isEmpty(value: unknown): boolean {
  return (
    value === undefined ||
    value === '' ||
    value === false ||
    (typeof value === 'object' && value !== null && Object.keys(value).length === 0)
  );
}

/** Refuses a request that gives a value to a field the broker does not implement. */
export function refuseUnimplemented(table: FieldTable<unknown>, request: Record<string, unknown>): void {
  for (const [name, field] of Object.entries(table)) {
    if (field.unimplemented && !isEmpty(request[name])) throw notImplemented(name);
  }
}

/** The settings a create stores: every stored field settled from the request, in table order. */
export function settleAll<Settings>(table: FieldTable<Settings>, request: Record<string, unknown>): Partial<Settings> {
  const settled: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(table)) {
    if (!field.settle) continue;
    const value = field.settle(request[name] as never, settled as Partial<Settings>);
    if (value !== undefined) settled[name] = value;
  }
  return settled as Partial<Settings>;
}

/**
 * Checks an update mask's paths (lowerCamelCase, already split) against the table: each must
 * name a mutable field the broker implements. `request` names the request in errors
 * ("UpdateTopicRequest").
 */
export function checkUpdateMask(table: FieldTable<unknown>, paths: string[], request: string): void {
  if (paths.length === 0) throw invalidArgument(`The ${request} must have a non-empty update_mask.`);
  const resource = request.replace(/^Update|Request$/g, '');
  for (const path of paths) {
    const field = Object.hasOwn(table, path) ? table[path] : undefined;
    if (field?.access === 'immutable') {
      throw invalidArgument(
        `Invalid update_mask provided in the ${request}: the '${path}' field in the ${resource} is not mutable.`,
      );
    }
    if (field?.unimplemented) throw notImplemented(path);
    if (field?.access !== 'mutable') {
      throw invalidArgument(`Invalid update_mask provided in the ${request}: unknown field name "${path}".`);
    }
  }
}

/**
 * A record with the masked settings settled again from the request, in table order (those the
 * mask leaves out keep their stored value): a setting that settles to nothing is removed.
 */
export function settleMasked<Settings extends object, Stored extends Settings>(
  table: FieldTable<Settings>,
  record: Stored,
  paths: string[],
  request: Record<string, unknown>,
): Stored {
  const next: Record<string, unknown> = { ...(record as Record<string, unknown>) };
  for (const [name, field] of Object.entries(table)) {
    if (!field.settle || !paths.includes(name)) continue;
    const value = field.settle(request[name] as never, next as Partial<Settings>);
    if (value === undefined) delete next[name];
    else next[name] = value;
  }
  return next as Stored;
}

/** A record's stored settings, in table order, for rendering the resource. */
export function storedSettings<Settings extends object>(
  table: FieldTable<Settings>,
  record: Settings,
): Partial<Settings> {
  const stored = record as Record<string, unknown>;
  const settings: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(table)) {
    if (field.settle && stored[name] !== undefined) settings[name] = stored[name];
  }
  return settings as Partial<Settings>;
}

/** The delivery scripts' config hash fields of a record's settings, as field/value pairs. */
export function deliveryConfigOf<Settings extends object>(table: FieldTable<Settings>, record: Settings): string[] {
  const stored = record as Record<string, unknown>;
  return Object.entries(table).flatMap(([name, field]) =>
    field.deliveryConfig ? field.deliveryConfig(stored[name] as never).flat() : [],
  );
}
