import type { SettleOutcome } from '../broker/settlement.ts';
import { type AckFailureCode, exactlyOnceAckFailure } from '../errors.ts';

/**
 * How a partly failed exactly-once ack or nack is answered over gRPC. The answer is one error
 * whose ErrorInfo names the failed ack IDs; the Node client counts every ack ID it does not name
 * as failed too (AckError OTHER), although the broker applied it. So the applied ones are named
 * as TRANSIENT_FAILURE_UNORDERED_ACK_ID, which every official client retries, and they are
 * remembered for the clients' retry horizon: a retry of one answers success without touching the
 * broker (where the lease is gone, and a second ack would fail). Clients that count unnamed IDs
 * as applied (Java, .NET) retry them the same way and get the same success.
 *
 * The memory is this process's: a client keeps one HTTP/2 connection, so its retries come back
 * here. A retry that reaches another broker process fails as an expired ack ID would.
 */
const RETRY_HORIZON_MS = 10 * 60_000;
/** Ack IDs remembered at most; the oldest are forgotten first (about 150 bytes each). */
const MAX_REMEMBERED = 100_000;

/**
 * What a batch did, remembered apart so that a retry is answered only for what was applied.
 * Deadline extensions are not remembered: applied again they do the same, and the client extends
 * the same ack IDs again and again.
 */
export type Settling = 'ack' | 'nack';

export class SettledInFailedBatch {
  /** `${kind} ${ackId}` → when it is forgotten. */
  private readonly remembered = new Map<string, number>();

  constructor(private readonly now: () => number = Date.now) {}

  /** The ack IDs of a request that still need the broker (those not applied by an earlier, failed batch). */
  unsettled(kind: Settling, ackIds: string[]): string[] {
    if (this.remembered.size === 0) return ackIds;
    const now = this.now();
    return ackIds.filter((ackId) => {
      const until = this.remembered.get(`${kind} ${ackId}`);
      return until === undefined || until <= now;
    });
  }

  /** Throws the gRPC answer of an outcome with failures, remembering its applied ack IDs as `kind`. */
  throwFailures(outcome: SettleOutcome, kind?: Settling): void {
    if (outcome.failures.size === 0) return;
    const until = this.now() + RETRY_HORIZON_MS;
    const failures = new Map<string, AckFailureCode>(outcome.failures);
    for (const ackId of outcome.applied) {
      if (kind) this.remember(`${kind} ${ackId}`, until);
      failures.set(ackId, 'TRANSIENT_FAILURE_UNORDERED_ACK_ID');
    }
    throw exactlyOnceAckFailure(failures);
  }

  private remember(key: string, until: number): void {
    this.remembered.delete(key);
    this.remembered.set(key, until);
    const now = this.now();
    for (const [oldest, expiresAt] of this.remembered) {
      if (this.remembered.size <= MAX_REMEMBERED && expiresAt > now) break;
      this.remembered.delete(oldest);
    }
  }
}
