import { unavailable } from '../errors.ts';
import type { CallContext } from './call-context.ts';
import type { DeliveryService, Settled } from './delivery.ts';
import { resourceExhausted } from './limits.ts';
import type { ResourceName } from './names.ts';
import type { SubscriptionRecord } from './records.ts';
import type { SettleOutcome } from './settlement.ts';
import { StreamingSession, type StreamTransport } from './streaming.ts';
import type { SubscriptionService } from './subscriptions.ts';

const shuttingDown = () => unavailable('The server is shutting down; reconnect.');

/** How many streams a node keeps open, in all and per subscription (MAX_STREAMS, MAX_STREAMS_PER_SUBSCRIPTION). */
export interface StreamLimits {
  streams: number;
  perSubscription: number;
}

/**
 * The streaming sessions of this node, so that shutdown can end them (clients then reconnect),
 * and so that acks of what they delivered, on a stream or by a unary call, are recognised
 * without decoding their ack IDs.
 * A closed session stays here until the frames it had received are applied: acks a client sent
 * just before closing still take effect, and shutdown waits for them before Redis goes away.
 */
export class StreamRegistry {
  private readonly sessions = new Set<StreamingSession>();
  /** The sessions whose transport is open: what the limits count. */
  private readonly live = new Set<StreamingSession>();
  private closing = false;

  constructor(
    private readonly delivery: DeliveryService,
    private readonly subscriptions: SubscriptionService,
    readonly heartbeatMs: number,
    private readonly limits: StreamLimits,
  ) {
    delivery.onSettled((settled) => this.announce(settled));
    delivery.recognizeIssued((record) => {
      const holderOf = this.holders(record.uid);
      return (ackId) => holderOf(ackId)?.issued(ackId);
    });
  }

  /**
   * Tells the streams that delivered a settlement's ack IDs (only they track them) of their part
   * of it: with many streams on one subscription, a settlement costs per ack ID, not per stream.
   */
  private announce(settled: Settled): void {
    const holderOf = this.holders(settled.record.uid);
    const parts = new Map<StreamingSession, SettleOutcome>();
    const partOf = (ackId: string) => {
      const holder = holderOf(ackId);
      if (!holder) return undefined;
      let part = parts.get(holder);
      if (!part) parts.set(holder, (part = { applied: [], failures: new Map() }));
      return part;
    };
    for (const ackId of settled.outcome.applied) partOf(ackId)?.applied.push(ackId);
    for (const [ackId, code] of settled.outcome.failures) partOf(ackId)?.failures.set(ackId, code);
    for (const [session, outcome] of parts) session.settled({ ...settled, outcome });
  }

  /**
   * Finds the stream of the subscription that has an ack ID outstanding. Acks come in the order
   * messages were delivered, so mostly many in a row of one stream: the stream that held the last
   * one is asked first.
   */
  private holders(subscriptionUid: string): (ackId: string) => StreamingSession | undefined {
    const streams = [...this.sessions].filter((session) => session.subscriptionUid === subscriptionUid);
    let last = 0;
    return (ackId) => {
      for (let i = 0; i < streams.length; i++) {
        const at = (last + i) % streams.length;
        if (streams[at].issued(ackId)) {
          last = at;
          return streams[at];
        }
      }
      return undefined;
    };
  }

  /**
   * `name` undefined: the stream's first frame names its subscription. RESOURCE_EXHAUSTED when the
   * node holds MAX_STREAMS open streams (the official clients reopen a stream refused so, with
   * backoff); the front end then ends the stream with it.
   */
  open(caller: CallContext, name: ResourceName | undefined, transport: StreamTransport): StreamingSession {
    if (this.live.size >= this.limits.streams) {
      throw resourceExhausted(
        `This server already holds ${this.limits.streams} open streaming pulls (MAX_STREAMS): reconnect later.`,
      );
    }
    const session = new StreamingSession(caller, name, transport, this.delivery, this.subscriptions, {
      heartbeatMs: this.heartbeatMs,
      admit: (record) => this.admit(record),
    });
    this.sessions.add(session);
    this.live.add(session);
    // A stream opened while the broker shuts down is ended at once, as the open ones were (after
    // the front end has wired it up).
    if (this.closing) queueMicrotask(() => session.fail(shuttingDown()));
    return session;
  }

  /** A stream about to start on `record`: refused past MAX_STREAMS_PER_SUBSCRIPTION (on this node). */
  private admit(record: SubscriptionRecord): void {
    let streams = 0;
    for (const session of this.live) if (session.subscriptionUid === record.uid) streams++;
    if (streams >= this.limits.perSubscription) {
      throw resourceExhausted(
        `The subscription ${record.name} already has ${this.limits.perSubscription} open streaming pulls on this ` +
          'server (MAX_STREAMS_PER_SUBSCRIPTION): close some, or reconnect later.',
      );
    }
  }

  closed(session: StreamingSession): void {
    this.live.delete(session);
    session.stop();
    void session.drained().then(() => this.sessions.delete(session));
  }

  /** Resolves once every closed session has applied the frames it received. */
  async settled(): Promise<void> {
    await Promise.all([...this.sessions].map((session) => session.drained()));
  }

  /** Ends every open stream with UNAVAILABLE, which official clients treat as "reconnect". */
  async closeAll(): Promise<void> {
    for (const session of this.sessions) session.fail(shuttingDown());
    await this.settled();
    this.sessions.clear();
    this.live.clear();
  }

  /** Shutdown: ends every stream, and from now on every stream that opens. */
  close(): Promise<void> {
    this.closing = true;
    return this.closeAll();
  }
}
