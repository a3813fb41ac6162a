import { invalidArgument } from '../errors.ts';

/** google.protobuf.Duration in JSON: decimal seconds with an `s` suffix ("600s", "3.5s"). */
const DURATION = /^(\d{1,12})(?:\.(\d{1,9}))?s$/;

export function parseDurationSeconds(value: string, field: string): number {
  const match = DURATION.exec(value);
  if (!match) throw invalidArgument(`Invalid value for ${field}: "${value}" is not a duration such as "600s".`);
  return Number(match[1]) + (match[2] ? Number(`0.${match[2]}`) : 0);
}

export function durationMicroseconds(value: string, field: string): number {
  return Math.round(parseDurationSeconds(value, field) * 1_000_000);
}

export function formatDuration(seconds: number): string {
  return `${Number(seconds.toFixed(9))}s`;
}

/** Checks a duration field against an inclusive range and returns it normalised. */
export function checkDuration(value: string, field: string, minSeconds: number, maxSeconds: number): string {
  const seconds = parseDurationSeconds(value, field);
  if (seconds < minSeconds || seconds > maxSeconds) {
    throw invalidArgument(
      `Invalid ${field}: ${value} is outside the allowed range ${formatDuration(minSeconds)} to ${formatDuration(maxSeconds)}.`,
    );
  }
  return formatDuration(seconds);
}

/** RFC 3339 timestamp with microseconds, always in UTC (`Z`). */
export function formatTimestampUs(microseconds: number): string {
  const millis = Math.floor(microseconds / 1000);
  const micros = String(Math.floor(microseconds % 1000)).padStart(3, '0');
  return `${new Date(millis).toISOString().slice(0, -1)}${micros}Z`;
}

/** RFC 3339 (google.protobuf.Timestamp in JSON): "2026-12-02T10:00:00.123456Z", or with an offset. */
const TIMESTAMP = /^(\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]\d{2}:\d{2})$/;

/** A timestamp in microseconds since the epoch (digits past the microsecond are dropped). */
export function parseTimestampUs(value: string, field: string): number {
  const match = TIMESTAMP.exec(value);
  const secondsMs = match ? Date.parse(`${match[1].toUpperCase()}${match[3].toUpperCase()}`) : Number.NaN;
  if (!match || Number.isNaN(secondsMs)) {
    throw invalidArgument(
      `Invalid value for ${field}: "${value}" is not an RFC 3339 timestamp such as "2026-12-02T10:00:00Z".`,
    );
  }
  const micros = match[2] ? Number(match[2].padEnd(6, '0').slice(0, 6)) : 0;
  return secondsMs * 1000 + micros;
}
