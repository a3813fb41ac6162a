/**
 * Between the protobuf forms of the gRPC front end (protos.ts) and the JSON forms that the broker
 * services take and give (proto3's JSON mapping, as the REST front end speaks it): the well-known
 * types (Duration, Timestamp, FieldMask) are the only fields whose forms differ.
 */

/** google.protobuf.Duration and Timestamp as protos.ts decodes them (int64 seconds as strings). */
export interface ProtoDuration {
  seconds?: string | number;
  nanos?: number;
}
export type ProtoTimestamp = ProtoDuration;

/** The Duration-valued fields of each resource, as dotted paths. */
export const TOPIC_DURATIONS = ['messageRetentionDuration'];
export const SUBSCRIPTION_DURATIONS = [
  'messageRetentionDuration',
  'topicMessageRetentionDuration',
  'expirationPolicy.ttl',
  'retryPolicy.minimumBackoff',
  'retryPolicy.maximumBackoff',
  'cloudStorageConfig.maxDuration',
];

/** A Duration in JSON ("600s", "3.5s"); a negative one comes out as "-5s", which the services refuse. */
export function durationToJson({ seconds = 0, nanos = 0 }: ProtoDuration): string {
  const whole = BigInt(seconds);
  if (nanos === 0) return `${whole}s`;
  const fraction = String(Math.abs(nanos)).padStart(9, '0').replace(/0+$/, '');
  const sign = whole === 0n && nanos < 0 ? '-' : '';
  return `${sign}${whole}.${fraction}s`;
}

/** A JSON Duration the services gave ("600s", "3.5s") as a proto Duration. */
export function durationFromJson(value: string): ProtoDuration {
  const match = /^(\d+)(?:\.(\d{1,9}))?s$/.exec(value);
  if (!match) throw new Error(`not a duration: ${value}`);
  return { seconds: match[1], nanos: match[2] ? Number(match[2].padEnd(9, '0')) : 0 };
}

let lastTimestamp = { json: '', proto: { seconds: 0, nanos: 0 } as ProtoTimestamp };

/**
 * An RFC 3339 timestamp in UTC as the broker writes them ("2026-12-02T10:00:00.123456Z"). The
 * messages of one publish share their publish time, so the last one converted is kept (callers
 * never change the object they get).
 */
export function timestampFromJson(value: string): ProtoTimestamp {
  if (value === lastTimestamp.json) return lastTimestamp.proto;
  const fraction = value.length > 20 ? value.slice(20, -1) : '';
  const seconds = Date.parse(`${value.slice(0, 19)}Z`) / 1000;
  lastTimestamp = { json: value, proto: { seconds, nanos: fraction ? Number(fraction.padEnd(9, '0')) : 0 } };
  return lastTimestamp.proto;
}

/** A FieldMask's paths (snake_case in protobuf) in the JSON form: one comma-separated string. */
export const fieldMaskToJson = (mask: { paths?: string[] } | undefined): string => (mask?.paths ?? []).join(',');

/** `value` with each path that holds a value replaced by `convert` of it; the input is not changed. */
export function convertPaths<From, To>(value: object, paths: string[], convert: (leaf: From) => To): object {
  let result = value as Record<string, unknown>;
  for (const path of paths) result = convertPath(result, path.split('.'), convert as (leaf: unknown) => unknown);
  return result;
}

function convertPath(
  value: Record<string, unknown>,
  [head, ...rest]: string[],
  convert: (leaf: unknown) => unknown,
): Record<string, unknown> {
  const child = value[head];
  if (child === undefined || child === null) return value;
  if (rest.length === 0) return { ...value, [head]: convert(child) };
  if (typeof child !== 'object') return value;
  return { ...value, [head]: convertPath(child as Record<string, unknown>, rest, convert) };
}
