import { invalidArgument } from '../errors.ts';

/** google.protobuf.Duration in JSON: decimal seconds with an `s` suffix ("600s", "3.5s"). */
const DURATION = /^(\d{1,12})(?:\.(\d{1,9}))?s$/;

export function parseDurationSeconds(value: string, field: string): number {
  const match = DURATION.exec(value);
  if (!match) throw invalidArgument(`Invalid value for ${field}: "${value}" is not a duration such as "600s".`);
  return Number(match[1]) + (match[2] ? Number(`0.${match[2]}`) : 0);
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
