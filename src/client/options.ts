import { randomId } from './encoding.ts';
import type { SubscribeOptions } from './types.ts';

/** SubscribeOptions, checked, with the defaults filled in. */
export interface SubscriberSettings {
  deadlineSeconds: number;
  /** 0: no limit. */
  maxMessages: number;
  /** 0: no limit. */
  maxBytes: number;
  maxExtensionMs: number;
  initialDelayMs: number;
  maxDelayMs: number;
  closeTimeoutMs: number;
  clientId: string;
}

/** Throws a RangeError for an option out of range (subscribe() lets it through). */
export function subscriberSettings(options: SubscribeOptions): SubscriberSettings {
  // One after the other, in this order, so that the error names the first bad option.
  const deadlineSeconds = integerOption('streamAckDeadlineSeconds', options.streamAckDeadlineSeconds ?? 60, 10, 600);
  const maxMessages = integerOption('maxOutstandingMessages', options.maxOutstandingMessages ?? 1000, 0);
  const maxBytes = integerOption('maxOutstandingBytes', options.maxOutstandingBytes ?? 0, 0);
  const maxExtensionMs = 1000 * numberOption('maxExtensionSeconds', options.maxExtensionSeconds ?? 3600, 0);
  const initialDelayMs = numberOption('reconnect.initialDelayMs', options.reconnect?.initialDelayMs ?? 100, 1);
  const maxDelayMs = numberOption('reconnect.maxDelayMs', options.reconnect?.maxDelayMs ?? 10_000, initialDelayMs);
  const closeTimeoutMs = numberOption('closeTimeoutMs', options.closeTimeoutMs ?? 30_000, 0);
  return {
    deadlineSeconds,
    maxMessages,
    maxBytes,
    maxExtensionMs,
    initialDelayMs,
    maxDelayMs,
    closeTimeoutMs,
    clientId: options.clientId ?? randomId(),
  };
}

function integerOption(name: string, value: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(
      `${name} must be an integer from ${min}${max < Number.MAX_SAFE_INTEGER ? ` to ${max}` : ''}, not ${value}.`,
    );
  }
  return value;
}

function numberOption(name: string, value: number, min: number): number {
  if (typeof value !== 'number' || Number.isNaN(value) || value < min)
    throw new RangeError(`${name} must be a number >= ${min}, not ${value}.`);
  return value;
}
