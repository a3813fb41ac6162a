import { invalidArgument } from '../errors.ts';

/**
 * The ack deadline rule, for every way a deadline is set: a lease lasts 10 to 600 seconds
 * (a subscription's ackDeadlineSeconds, a stream's streamAckDeadlineSeconds), and a deadline
 * change may also be 0, which gives the message back at once (a nack).
 */
export const MIN_ACK_DEADLINE_SECONDS = 10;
export const MAX_ACK_DEADLINE_SECONDS = 600;

/** A lease length: `field` names the field in the error. */
export function checkAckDeadline(seconds: number, field: string): number {
  if (seconds < MIN_ACK_DEADLINE_SECONDS || seconds > MAX_ACK_DEADLINE_SECONDS) {
    throw invalidArgument(
      `Invalid ${field}: ${seconds}. It must be between ${MIN_ACK_DEADLINE_SECONDS} and ${MAX_ACK_DEADLINE_SECONDS} seconds.`,
    );
  }
  return seconds;
}

/** A deadline change (0 = nack): `field` names the field in the error. */
export function checkDeadlineChange(seconds: number, field: string): number {
  if (seconds < 0 || seconds > MAX_ACK_DEADLINE_SECONDS) {
    throw invalidArgument(`Invalid value at '${field}': ${field} must be between 0 and ${MAX_ACK_DEADLINE_SECONDS}`);
  }
  return seconds;
}
