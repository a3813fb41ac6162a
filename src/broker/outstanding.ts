import type { Delivery } from './ack-id.ts';

/** One message a stream delivered and has not seen settled. */
export interface OutstandingDelivery {
  bytes: number;
  /** When the lease runs out by this node's clock: only for flow-control accounting. */
  expiresAtMs: number;
  /** Region and ordering key: the unit of the ordering cascade (a key keeps its order per region). */
  orderingKey?: string;
  seq: number;
  /** What the ack ID names, so that settling it needs no decoding (settlement.ts). */
  delivery: Delivery;
}

/**
 * A stream's outstanding deliveries by ack ID, with what flow control asks of them at every turn
 * of the delivery loop kept current instead of counted again: their bytes, and a time before
 * which none runs out (the earliest lease seen since the last look: a later extension leaves it
 * early, and looking early costs one pass).
 */
export class OutstandingDeliveries {
  private readonly byAckId = new Map<string, OutstandingDelivery>();
  private totalBytes = 0;
  private noneExpiresBeforeMs = Infinity;

  get size(): number {
    return this.byAckId.size;
  }

  /** Message bytes of what is outstanding. */
  get bytes(): number {
    return this.totalBytes;
  }

  get(ackId: string): OutstandingDelivery | undefined {
    return this.byAckId.get(ackId);
  }

  add(ackId: string, entry: OutstandingDelivery): void {
    this.delete(ackId);
    this.byAckId.set(ackId, entry);
    this.totalBytes += entry.bytes;
    this.noneExpiresBeforeMs = Math.min(this.noneExpiresBeforeMs, entry.expiresAtMs);
  }

  /** A deadline change: the delivery's lease now runs out at `expiresAtMs` (sooner or later). */
  moveExpiry(ackId: string, expiresAtMs: number): void {
    const entry = this.byAckId.get(ackId);
    if (!entry) return;
    entry.expiresAtMs = expiresAtMs;
    this.noneExpiresBeforeMs = Math.min(this.noneExpiresBeforeMs, expiresAtMs);
  }

  /** Returns whether the ack ID was outstanding. */
  delete(ackId: string): boolean {
    const entry = this.byAckId.get(ackId);
    if (!entry) return false;
    this.byAckId.delete(ackId);
    this.totalBytes -= entry.bytes;
    return true;
  }

  /** Calls `fn` for each outstanding delivery; `fn` may delete the one it is given. */
  forEach(fn: (entry: OutstandingDelivery, ackId: string) => void): void {
    this.byAckId.forEach(fn);
  }

  /** Forgets the deliveries whose lease ran out by `nowMs`; a pass only when one may have. */
  forgetExpired(nowMs: number): void {
    if (nowMs < this.noneExpiresBeforeMs) return;
    let earliest = Infinity;
    this.byAckId.forEach((entry, ackId) => {
      if (entry.expiresAtMs <= nowMs) this.delete(ackId);
      else earliest = Math.min(earliest, entry.expiresAtMs);
    });
    this.noneExpiresBeforeMs = earliest;
  }

  /** A time by which the next lease may run out (Infinity: nothing is outstanding). */
  nextExpiryMs(): number {
    return this.byAckId.size === 0 ? Infinity : this.noneExpiresBeforeMs;
  }
}
