import { PubSubError } from './errors.ts';
import type { Confirmation, StreamingPull } from './stream.ts';
import type { AckResponse } from './types.ts';

/** Ack IDs per frame (an ack ID is under 70 bytes; the broker accepts frames up to 1 MiB). */
export const MAX_IDS_PER_FRAME = 2500;
/** Acks and nacks made within this many milliseconds are sent together. */
const ACK_BATCH_MS = 5;
/**
 * Acks and nacks sent this recently before a stream dropped may not have reached the broker, so
 * they are sent again on the next stream (harmless: the broker ignores an ack ID already used).
 */
const RESEND_WINDOW_MS = 15_000;
/** Transient exactly-once failures (TEMPORARY_FAILURE, UNORDERED) are retried this many times. */
const MAX_TRANSIENT_RETRIES = 5;

/** A REST call on the subscription (`:acknowledge`, `:modifyAckDeadline`); throws PubSubError. */
export type SubscriptionCall = (verb: 'acknowledge' | 'modifyAckDeadline', body: object) => Promise<unknown>;

/** An ack or nack on its way to the broker, and the promise of its outcome. */
export interface Settlement {
  kind: 'ack' | 'nack';
  /** The ack ID to send: a redelivery of an acked message replaces it. */
  ackId: string;
  messageId?: string;
  promise: Promise<AckResponse>;
  resolve: (response: AckResponse) => void;
  result?: AckResponse;
  /** Waiting in ackQueue/nackQueue. */
  queued: boolean;
  retries: number;
  /** Sent on a stream that dropped before confirming it: the broker may have applied it. */
  maybeApplied: boolean;
  sentAt: number;
}

/** A frame of acks, nacks or lease extensions sent on the current stream. */
interface SentFrame {
  sentAt: number;
  /** Each ack ID sent, with the ack or nack it carries (none in a lease extension). */
  items: { ackId: string; settlement?: Settlement }[];
  /** A lease extension's: told the broker's verdict on each of its ack IDs. */
  confirmed?: (outcome: Map<string, AckResponse>) => void;
}

/** What Acks needs from its subscriber. */
export interface AcksContext {
  stream: Pick<StreamingPull, 'isOpen' | 'send'>;
  /** Whether the subscription has exactly-once delivery, so that the broker confirms what is sent. */
  exactlyOnce(): boolean;
  rest: SubscriptionCall;
  /** How long an acked message is remembered, so that a redelivery of it is acked again. */
  ackMemoryMs: number;
  error(error: Error): void;
}

type Timer = ReturnType<typeof setTimeout>;

/**
 * Acks, nacks and lease extensions on their way to the broker, so that each ack and nack is
 * delivered exactly once even across reconnects. Acks and nacks made within ACK_BATCH_MS go out
 * together on the stream, and wait while it is not open. On exactly-once subscriptions the
 * broker's confirmations give their outcome (transient failures are retried); elsewhere being
 * sent is success. After a stream drops, what it may have lost goes out again on the next one.
 * From close() on they go over REST.
 */
export class Acks {
  /** Settlements whose outcome is not known yet. */
  private readonly pending = new Set<Settlement>();
  /** Acked messages by ID, remembered a while so that a redelivery is acked again, not handled again. */
  private readonly acked = new Map<string, Settlement>();
  private ackQueue: Settlement[] = [];
  private nackQueue: Settlement[] = [];
  /** Sent on the current stream and, on exactly-once subscriptions, not confirmed yet; else kept for RESEND_WINDOW_MS. */
  private ackFrames: SentFrame[] = [];
  /** Nacks and lease extensions, in the order sent (the broker confirms them in this order). */
  private modFrames: SentFrame[] = [];
  /** 'held': closing, acks and nacks wait for the stream to close (see holdUntilStreamCloses). */
  private route: 'stream' | 'held' | 'rest' | 'closed' = 'stream';
  /** REST acks and nacks (while closing), one request at a time so that their order holds. */
  private restChain: Promise<void> = Promise.resolve();
  private flushTimer?: Timer;
  /** Exactly-once settlements waiting to be sent again after a transient failure. */
  private readonly retryTimers = new Map<Timer, Settlement>();

  constructor(private readonly ctx: AcksContext) {}

  /**
   * Acks or nacks a delivery, in the background; the settlement's promise gives the outcome.
   * `messageId`: the message whose redelivery an ack should cover (see ackAgain).
   */
  settle(kind: 'ack' | 'nack', ackId: string, messageId?: string): Settlement {
    let resolve!: (response: AckResponse) => void;
    const promise = new Promise<AckResponse>((done) => (resolve = done));
    const settlement: Settlement = {
      kind,
      ackId,
      messageId,
      promise,
      resolve,
      queued: false,
      retries: 0,
      maybeApplied: false,
      sentAt: Date.now(),
    };
    this.pending.add(settlement);
    if (this.route === 'closed') {
      this.resolve(settlement, 'OTHER');
      return settlement;
    }
    if (kind === 'ack' && messageId !== undefined && !this.ctx.exactlyOnce()) this.acked.set(messageId, settlement);
    this.enqueue(settlement);
    return settlement;
  }

  /** A redelivery of a message acked lately: the ack goes out again, with the new ack ID. */
  ackAgain(messageId: string, ackId: string): boolean {
    const settlement = this.acked.get(messageId);
    if (!settlement) return false;
    settlement.ackId = ackId;
    this.enqueue(settlement);
    return true;
  }

  /**
   * Asks the broker for new deadlines, `seconds[i]` from now for `ackIds[i]`, on the open stream
   * (false if there is none or the frame was not sent). On exactly-once subscriptions the broker
   * confirms the frame: `confirmed` gets its verdict.
   */
  extend(ackIds: string[], seconds: number[], confirmed: (outcome: Map<string, AckResponse>) => void): boolean {
    if (!this.ctx.stream.isOpen) return false;
    if (!this.ctx.stream.send({ modifyDeadlineAckIds: ackIds, modifyDeadlineSeconds: seconds })) return false;
    this.modFrames.push({ sentAt: Date.now(), items: ackIds.map((ackId) => ({ ackId })), confirmed });
    return true;
  }

  /** Sends what is queued now, not at the end of the batch interval. */
  flush(): void {
    if (this.flushTimer !== undefined) clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    if (this.route === 'held') return;
    if (this.route === 'rest') {
      const batch = [...this.ackQueue, ...this.nackQueue];
      this.ackQueue = [];
      this.nackQueue = [];
      if (batch.length > 0) this.restChain = this.restChain.then(() => this.restSettle(batch));
      return;
    }
    if (!this.ctx.stream.isOpen) return;
    this.sendQueued('ack');
    this.sendQueued('nack');
  }

  /**
   * The broker confirms each frame of acks (or of deadline changes) with one confirmation, in
   * the order sent. Frames before the one confirmed got none: sent before exactly-once was on.
   */
  confirmed(of: 'acknowledge' | 'modifyAckDeadline', confirmation: Confirmation): void {
    const frames = of === 'acknowledge' ? this.ackFrames : this.modFrames;
    const outcome = new Map<string, AckResponse>();
    for (const ackId of confirmation.ackIds ?? []) outcome.set(ackId, 'SUCCESS');
    for (const ackId of confirmation.invalidAckIds ?? []) outcome.set(ackId, 'INVALID');
    for (const ackId of confirmation.unorderedAckIds ?? []) outcome.set(ackId, 'UNORDERED');
    for (const ackId of confirmation.temporaryFailedAckIds ?? []) outcome.set(ackId, 'TEMPORARY_FAILURE');
    let frame: SentFrame | undefined;
    while ((frame = frames.shift())) {
      if (frame.items.some((item) => outcome.has(item.ackId))) break;
      this.settleUnconfirmed(frame);
    }
    if (!frame) return;
    if (frame.confirmed) {
      frame.confirmed(outcome);
      return;
    }
    for (const { ackId, settlement } of frame.items) {
      if (!settlement || settlement.ackId !== ackId || settlement.queued || settlement.result !== undefined) continue;
      const response = outcome.get(ackId) ?? 'OTHER';
      if (
        (response === 'TEMPORARY_FAILURE' || response === 'UNORDERED') &&
        settlement.retries < MAX_TRANSIENT_RETRIES
      ) {
        this.retryLater(settlement, 100 * 2 ** settlement.retries++);
      } else {
        this.resolve(settlement, response === 'INVALID' && settlement.maybeApplied ? 'OTHER' : response);
      }
    }
  }

  /** Exactly-once delivery was turned off: no confirmations come any more, so what was sent counts as done. */
  exactlyOnceEnded(): void {
    for (const frame of [...this.ackFrames, ...this.modFrames]) this.settleUnconfirmed(frame);
  }

  /**
   * After a stream drops: unconfirmed exactly-once acks/nacks, and others sent within
   * RESEND_WINDOW_MS (frames the broker had not read yet are lost with the stream), go out again.
   */
  streamEnded(): void {
    if (this.flushTimer !== undefined) clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    const now = Date.now();
    const again = { ack: [] as Settlement[], nack: [] as Settlement[] };
    for (const frame of [...this.ackFrames, ...this.modFrames]) {
      for (const { ackId, settlement } of frame.items) {
        if (!settlement || settlement.ackId !== ackId || settlement.queued) continue;
        if (settlement.result === undefined) settlement.maybeApplied = true;
        else if (now - frame.sentAt >= RESEND_WINDOW_MS) continue;
        settlement.queued = true;
        again[settlement.kind].push(settlement);
      }
    }
    this.ackQueue = again.ack.concat(this.ackQueue);
    this.nackQueue = again.nack.concat(this.nackQueue);
    this.ackFrames = [];
    this.modFrames = [];
  }

  /** Whether every ack and nack sent on the current stream has its outcome (so needs no confirmation). */
  allConfirmed(): boolean {
    return [...this.ackFrames, ...this.modFrames].every((frame) =>
      frame.items.every(
        ({ ackId, settlement }) =>
          !settlement || settlement.result !== undefined || settlement.ackId !== ackId || settlement.queued,
      ),
    );
  }

  /** Forgets acked messages that cannot come back any more, and sent frames past the resend window. */
  prune(now: number): void {
    for (const [messageId, settlement] of this.acked) {
      if (!settlement.queued && now - settlement.sentAt > this.ctx.ackMemoryMs) this.acked.delete(messageId);
    }
    for (const frames of [this.ackFrames, this.modFrames]) {
      let drop = 0;
      while (drop < frames.length && now - frames[drop].sentAt >= RESEND_WINDOW_MS) {
        if (frames[drop].items.some(({ settlement }) => settlement && settlement.result === undefined)) break;
        drop++;
      }
      frames.splice(0, drop);
    }
  }

  /**
   * From close() on, acks and nacks wait until the stream has closed, and then go over REST: the
   * broker frees a stream's flow-control room for an ack or a nack wherever it comes from, and
   * would hand out messages on the closing stream that may then be lost with the socket.
   */
  holdUntilStreamCloses(): void {
    this.route = 'held';
  }

  /** The stream has closed: what is queued, and every later ack and nack, goes over REST. */
  sendOverRest(): void {
    this.route = 'rest';
    this.flush();
  }

  /** Sends the transient failures waiting for their retry now, and waits for the REST calls. */
  async drain(): Promise<void> {
    for (const [timer, settlement] of this.retryTimers) {
      clearTimeout(timer);
      this.enqueue(settlement);
    }
    this.retryTimers.clear();
    this.flush();
    await this.restChain;
  }

  /** The subscriber has stopped: nothing more is sent, and what has no outcome yet gets OTHER. */
  close(): void {
    this.route = 'closed';
    for (const timer of [this.flushTimer, ...this.retryTimers.keys()]) if (timer !== undefined) clearTimeout(timer);
    this.retryTimers.clear();
    this.flushTimer = undefined;
    for (const settlement of [...this.pending]) this.resolve(settlement, 'OTHER');
  }

  private enqueue(settlement: Settlement): void {
    if (settlement.queued) return;
    settlement.queued = true;
    (settlement.kind === 'ack' ? this.ackQueue : this.nackQueue).push(settlement);
    if (this.flushTimer === undefined && this.route !== 'held' && (this.ctx.stream.isOpen || this.route === 'rest')) {
      this.flushTimer = setTimeout(() => this.flush(), ACK_BATCH_MS);
    }
  }

  private sendQueued(kind: 'ack' | 'nack'): void {
    const queue = kind === 'ack' ? this.ackQueue : this.nackQueue;
    while (queue.length > 0) {
      const batch = queue.slice(0, MAX_IDS_PER_FRAME);
      const ackIds = batch.map((settlement) => settlement.ackId);
      const frame =
        kind === 'ack' ? { ackIds } : { modifyDeadlineAckIds: ackIds, modifyDeadlineSeconds: ackIds.map(() => 0) };
      if (!this.ctx.stream.send(frame)) return; // still queued; streamEnded() takes over
      queue.splice(0, batch.length);
      const now = Date.now();
      const items = batch.map((settlement) => {
        settlement.queued = false;
        settlement.sentAt = now;
        return { ackId: settlement.ackId, settlement };
      });
      (kind === 'ack' ? this.ackFrames : this.modFrames).push({ sentAt: now, items });
      if (!this.ctx.exactlyOnce()) for (const settlement of batch) this.resolve(settlement, 'SUCCESS');
    }
  }

  private settleUnconfirmed(frame: SentFrame): void {
    for (const { ackId, settlement } of frame.items) {
      if (settlement && settlement.ackId === ackId && !settlement.queued) this.resolve(settlement, 'SUCCESS');
    }
  }

  private retryLater(settlement: Settlement, delayMs: number): void {
    const timer = setTimeout(() => {
      this.retryTimers.delete(timer);
      this.enqueue(settlement);
    }, delayMs);
    this.retryTimers.set(timer, settlement);
  }

  private resolve(settlement: Settlement, response: AckResponse): void {
    if (settlement.result !== undefined) return;
    settlement.result = response;
    this.pending.delete(settlement);
    // The user was told this ack failed: a redelivery is theirs to handle again.
    if (
      response !== 'SUCCESS' &&
      settlement.messageId !== undefined &&
      this.acked.get(settlement.messageId) === settlement
    ) {
      this.acked.delete(settlement.messageId);
    }
    settlement.resolve(response);
  }

  private async restSettle(settlements: Settlement[]): Promise<void> {
    for (const settlement of settlements) settlement.queued = false;
    for (const kind of ['ack', 'nack'] as const) {
      const group = settlements.filter((settlement) => settlement.kind === kind);
      for (let i = 0; i < group.length; i += MAX_IDS_PER_FRAME) {
        const chunk = group.slice(i, i + MAX_IDS_PER_FRAME);
        const ackIds = chunk.map((settlement) => settlement.ackId);
        try {
          if (kind === 'ack') await this.ctx.rest('acknowledge', { ackIds });
          else await this.ctx.rest('modifyAckDeadline', { ackIds, ackDeadlineSeconds: 0 });
          for (const settlement of chunk) this.resolve(settlement, 'SUCCESS');
        } catch (error) {
          const failures = ackFailures(error);
          if (!failures) this.ctx.error(error instanceof Error ? error : new Error(String(error)));
          for (const settlement of chunk) {
            const code = failures?.get(settlement.ackId);
            const response: AckResponse = !failures
              ? 'OTHER'
              : code === undefined
                ? 'SUCCESS'
                : code === 'PERMANENT_FAILURE_INVALID_ACK_ID'
                  ? settlement.maybeApplied
                    ? 'OTHER'
                    : 'INVALID'
                  : code === 'TRANSIENT_FAILURE_UNORDERED_ACK_ID'
                    ? 'UNORDERED'
                    : code.startsWith('TRANSIENT_')
                      ? 'TEMPORARY_FAILURE'
                      : 'OTHER';
            this.resolve(settlement, response);
          }
        }
      }
    }
  }
}

/** The per-ack-ID failures of an exactly-once REST ack (ErrorInfo metadata), if that is what failed. */
function ackFailures(error: unknown): Map<string, string> | undefined {
  if (!(error instanceof PubSubError) || !Array.isArray(error.details)) return undefined;
  for (const detail of error.details) {
    const info = detail as { reason?: string; metadata?: Record<string, string> };
    if (info?.reason === 'EXACTLY_ONCE_ACKID_FAILURE' && info.metadata) return new Map(Object.entries(info.metadata));
  }
  return undefined;
}
