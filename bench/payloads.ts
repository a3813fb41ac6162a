/**
 * Pre-built request payloads, so the client spends its (shared) CPU on HTTP rather than on
 * generating random data. A pool of distinct random 1 KB messages is cycled through; every
 * message still carries its own 1024 random bytes, base64-encoded as on the wire.
 */
import { randomBytes } from 'node:crypto';

/** `count` distinct messages of exactly `bytes` random bytes each, base64-encoded. */
export function randomPayloads(count: number, bytes: number): string[] {
  return Array.from({ length: count }, () => randomBytes(bytes).toString('base64'));
}

/**
 * `bodies` distinct publish request bodies of `batch` messages each, as ready-to-send Buffers
 * (`{"messages":[{"data":"..."}, ...]}`).
 */
export function publishBodies(bodies: number, batch: number, bytes: number): Buffer[] {
  return Array.from({ length: bodies }, () => {
    const messages = randomPayloads(batch, bytes).map((data) => `{"data":"${data}"}`);
    return Buffer.from(`{"messages":[${messages.join(',')}]}`);
  });
}
