import { type Acks, MAX_IDS_PER_FRAME, type Settlement } from './acks.ts';
import { describe, HandlerError, PubSubError } from './errors.ts';
import { HandlerQueue } from './handler-queue.ts';
import { Message, type ReceivedFrame } from './message.ts';
import type { SubscriberSettings } from './options.ts';
import type { AckResponse, SubscriptionProperties } from './types.ts';

/** A handler receives each message once per delivery; it may return a promise. */
export type MessageHandler = (message: Message) => void | Promise<void>;

/** One delivery this subscriber holds: received and not yet acked or nacked. */
interface Lease {
  message: Message;
  /** The latest ack ID: a redelivery of a message still held replaces it. */
  ackId: string;
  bytes: number;
  receivedAt: number;
  /** The ordering key that serializes its handler (only on subscriptions with message ordering). */
  key?: string;
  /** Counts toward maxOutstandingMessages/Bytes (from dispatch until settled or given up). */
  counted: boolean;
  settlement?: Settlement;
}

/** What Leases needs from its subscriber. */
export interface LeasesContext {
  handler: MessageHandler;
  settings: Pick<SubscriberSettings, 'deadlineSeconds' | 'maxMessages' | 'maxBytes' | 'maxExtensionMs'>;
  acks: Acks;
  /** What the broker last said about the subscription. */
  properties(): SubscriptionProperties | undefined;
  error(error: Error): void;
}

/**
 * The deliveries a subscriber holds, from their arrival until they are acked or nacked: runs the
 * handler for each, at most maxOutstandingMessages (and maxOutstandingBytes) at a time and one at
 * a time per ordering key on ordered subscriptions, and renews their leases meanwhile, for at
 * most maxExtensionSeconds.
 */
export class Leases {
  /** Unsettled deliveries by message ID: their leases are renewed. */
  private readonly held = new Map<string, Lease>();
  private readonly queue = new HandlerQueue<Lease>();
  private handlersRunning = 0;
  private outstandingMessages = 0;
  private outstandingBytes = 0;
  private dispatching = false;
  private stopped = false;

  constructor(private readonly ctx: LeasesContext) {}

  /** Messages received and not yet acked or nacked. */
  get size(): number {
    return this.held.size;
  }

  /** Handlers that have not returned (or whose promise has not settled) yet. */
  get running(): number {
    return this.handlersRunning;
  }

  /** Messages from the broker: each new one is held and queued for the handler. */
  receive(received: ReceivedFrame[]): void {
    const now = Date.now();
    const { acks } = this.ctx;
    for (const { ackId, message: wire, deliveryAttempt } of received) {
      if (this.stopped) {
        acks.settle('nack', ackId);
        continue;
      }
      // On exactly-once subscriptions an ack ID is one delivery: a redelivery is a new message
      // (settling the old one reports INVALID). Elsewhere a redelivery of a message this
      // subscriber holds or has acked (its lease ran out, say during a reconnect) takes the old
      // one's place, so the handler does not see it twice and the ack still takes effect.
      const exactlyOnce = this.ctx.properties()?.exactlyOnceDeliveryEnabled === true;
      const held = this.held.get(wire.messageId);
      if (held && !exactlyOnce) {
        held.ackId = ackId;
        continue;
      }
      if (held) this.forget(held);
      if (!exactlyOnce && acks.ackAgain(wire.messageId, ackId)) continue;
      let lease!: Lease;
      let message: Message;
      try {
        message = new Message(
          wire,
          {
            ackId: () => lease.ackId,
            settle: (kind) => this.settle(lease, kind),
          },
          deliveryAttempt,
        );
      } catch (error) {
        this.ctx.error(
          new PubSubError('INTERNAL', `Message ${wire?.messageId} could not be decoded: ${describe(error)}`, {
            retryable: true,
          }),
        );
        acks.settle('nack', ackId);
        continue;
      }
      lease = { message, ackId, bytes: message.data.length, receivedAt: now, counted: false };
      if (this.ctx.properties()?.messageOrderingEnabled && message.orderingKey) lease.key = message.orderingKey;
      this.held.set(wire.messageId, lease);
      this.queue.push(lease);
    }
    this.dispatch();
  }

  /** Renews the lease of every held message, and gives up those held for maxExtensionSeconds. */
  renew(now: number): void {
    const { deadlineSeconds, maxExtensionMs } = this.ctx.settings;
    const leases: Lease[] = [];
    for (const lease of this.held.values()) {
      if (now - lease.receivedAt >= maxExtensionMs) this.forget(lease);
      else leases.push(lease);
    }
    this.dispatch();
    for (let i = 0; i < leases.length; i += MAX_IDS_PER_FRAME) {
      const chunk = leases.slice(i, i + MAX_IDS_PER_FRAME);
      const ackIds = chunk.map((lease) => lease.ackId);
      const seconds = chunk.map((lease) =>
        Math.min(deadlineSeconds, Math.ceil((lease.receivedAt + maxExtensionMs - now) / 1000)),
      );
      const sent = this.ctx.acks.extend(ackIds, seconds, (outcome) => {
        // A lease that could not be renewed is gone: the message will be delivered again.
        chunk.forEach((lease, j) => {
          if (outcome.get(ackIds[j]) === 'INVALID' && lease.ackId === ackIds[j]) this.forget(lease);
        });
        this.dispatch();
      });
      if (!sent) return;
    }
  }

  /** Hands nothing more to the handler; messages that still arrive are nacked. */
  stop(): void {
    this.stopped = true;
  }

  /** The subscriber has stopped for good: hands nothing more out, and forgets what waits for the handler. */
  close(): void {
    this.stopped = true;
    this.queue.drain();
  }

  /** Nacks the messages not handed to the handler yet. */
  nackWaiting(): void {
    for (const lease of this.queue.drain()) void this.settle(lease, 'nack');
  }

  /** Nacks every message still held. */
  nackHeld(): void {
    for (const lease of [...this.held.values()]) void this.settle(lease, 'nack');
  }

  private settle(lease: Lease, kind: 'ack' | 'nack'): Promise<AckResponse> {
    if (lease.settlement) {
      // Never settled twice: the same call gets the same outcome; the other one is refused.
      return lease.settlement.kind === kind ? lease.settlement.promise : Promise.resolve('INVALID');
    }
    const settlement = this.ctx.acks.settle(kind, lease.ackId, lease.message.messageId);
    lease.settlement = settlement;
    this.forget(lease);
    // The broker sends a nacked keyed message and the later ones of its key again, in order:
    // those waiting here are dropped (and nacked, which frees the broker's flow control at once).
    if (kind === 'nack' && lease.key !== undefined) {
      for (const follower of this.queue.dropBehind(lease.key)) void this.settle(follower, 'nack');
    }
    this.dispatch();
    return settlement.promise;
  }

  private dispatch(): void {
    if (this.dispatching) return; // the running loop below picks up the change
    this.dispatching = true;
    try {
      while (this.hasRoom()) {
        const lease = this.queue.next();
        if (!lease) break;
        if (lease.settlement) this.queue.release(lease);
        else this.run(lease);
      }
    } finally {
      this.dispatching = false;
    }
  }

  private hasRoom(): boolean {
    if (this.stopped) return false;
    const { maxMessages, maxBytes } = this.ctx.settings;
    if (maxMessages > 0 && this.outstandingMessages >= maxMessages) return false;
    return maxBytes === 0 || this.outstandingBytes < maxBytes || this.outstandingMessages === 0;
  }

  private run(lease: Lease): void {
    lease.counted = true;
    this.outstandingMessages++;
    this.outstandingBytes += lease.bytes;
    this.handlersRunning++;
    const finish = () => {
      this.handlersRunning--;
      this.queue.release(lease);
      this.dispatch();
    };
    const failed = (error: unknown) => {
      this.ctx.error(new HandlerError(lease.message.messageId, error));
      if (!lease.settlement) void this.settle(lease, 'nack');
      finish();
    };
    let result: unknown;
    try {
      result = this.ctx.handler(lease.message);
    } catch (error) {
      failed(error);
      return;
    }
    if (result && typeof (result as PromiseLike<void>).then === 'function')
      (result as PromiseLike<void>).then(finish, failed);
    else finish();
  }

  /** Stops renewing a lease and frees its flow-control room. */
  private forget(lease: Lease): void {
    const id = lease.message.messageId;
    if (this.held.get(id) === lease) this.held.delete(id);
    if (!lease.counted) return;
    lease.counted = false;
    this.outstandingMessages--;
    this.outstandingBytes -= lease.bytes;
  }
}
