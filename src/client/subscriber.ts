import { Acks, MAX_IDS_PER_FRAME, type Settlement, type SubscriptionCall } from './acks.ts';
import { describe, HandlerError, PubSubError } from './errors.ts';
import { Message, type WireMessage } from './message.ts';
import { type SubscriberSettings, subscriberSettings } from './options.ts';
import { type ServerFrame, StreamingPull } from './stream.ts';
import type {
  AckResponse,
  SubscribeOptions,
  SubscriberState,
  SubscriptionProperties,
  WebSocketConstructor,
} from './types.ts';

/** A handler receives each message once per delivery; it may return a promise. */
export type MessageHandler = (message: Message) => void | Promise<void>;

/** What a Subscriber needs from its PubSubClient (internal). */
export interface SubscriberContext {
  /** Full subscription name, `projects/{p}/subscriptions/{s}`. */
  subscription: string;
  /** ws:// or wss:// URL of the streaming pull. */
  streamUrl: string;
  WebSocket: WebSocketConstructor;
  /** A REST call on the subscription (`:acknowledge`, `:modifyAckDeadline`); throws PubSubError. */
  rest: SubscriptionCall;
}

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

/**
 * A streaming pull subscription (made by PubSubClient.subscribe). It keeps one WebSocket stream
 * open, reconnecting with the same clientId after retryable failures; runs the handler for each
 * message, at most maxOutstandingMessages at a time and one at a time per ordering key on
 * ordered subscriptions; renews leases until messages are settled; and delivers every ack and
 * nack exactly once even across reconnects. Stop it with close().
 */
export class Subscriber {
  /** Full subscription name, `projects/{p}/subscriptions/{s}`. */
  readonly subscription: string;
  /** Sent on every stream of this subscriber, so the broker can tell it is the same client. */
  readonly clientId: string;
  /** Resolves once the subscriber has stopped: with the fatal error that stopped it, or undefined after close(). */
  readonly closed: Promise<PubSubError | undefined>;

  private readonly handler: MessageHandler;
  private readonly settings: SubscriberSettings;
  private readonly errorListeners = new Set<(error: Error) => void>();
  private readonly stateListeners = new Set<(state: SubscriberState) => void>();
  private resolveClosed!: (error: PubSubError | undefined) => void;

  private currentState: SubscriberState = 'connecting';
  private properties?: SubscriptionProperties;
  private readonly stream: StreamingPull;
  private readonly acks: Acks;
  private closing?: Promise<void>;

  /** Unsettled deliveries by message ID: their leases are renewed. */
  private readonly held = new Map<string, Lease>();

  /** Messages ready for the handler: unkeyed ones and the head of each ordering key. */
  private ready: Lease[] = [];
  /** Later messages of a key whose head is ready or running. */
  private readonly keyQueues = new Map<string, Lease[]>();
  private readonly busyKeys = new Set<string>();
  private running = 0;
  private outstandingMessages = 0;
  private outstandingBytes = 0;
  private dispatching = false;
  private readonly leaseTimer: ReturnType<typeof setInterval>;

  /** @internal Use PubSubClient.subscribe(). */
  constructor(ctx: SubscriberContext, handler: MessageHandler, options: SubscribeOptions = {}) {
    this.subscription = ctx.subscription;
    this.handler = handler;
    this.settings = subscriberSettings(options);
    this.clientId = this.settings.clientId;
    if (options.onError) this.errorListeners.add(options.onError);
    if (options.onStateChange) this.stateListeners.add(options.onStateChange);
    this.closed = new Promise((resolve) => (this.resolveClosed = resolve));
    const { deadlineSeconds, maxMessages, maxBytes } = this.settings;
    const first: Record<string, unknown> = {
      subscription: this.subscription,
      streamAckDeadlineSeconds: deadlineSeconds,
      clientId: this.clientId,
      maxOutstandingMessages: maxMessages,
    };
    if (maxBytes > 0) first.maxOutstandingBytes = maxBytes;
    this.stream = new StreamingPull(ctx.streamUrl, ctx.WebSocket, first, this.settings, {
      frame: (frame, opened) => this.onFrame(frame, opened),
      ended: (error) => this.onStreamEnded(error),
      error: (error) => this.emitError(error),
    });
    this.acks = new Acks({
      stream: this.stream,
      exactlyOnce: () => this.properties?.exactlyOnceDeliveryEnabled === true,
      rest: ctx.rest,
      // An acked message can only come back within a lease of its last ack attempt.
      ackMemoryMs: deadlineSeconds * 1000 + 60_000,
      error: (error) => this.emitError(error),
    });
    this.leaseTimer = setInterval(() => this.extendLeases(), deadlineSeconds * 500);
    this.stream.start();
  }

  /** The current state (see SubscriberState). */
  get state(): SubscriberState {
    return this.currentState;
  }

  /** What the broker last said about the subscription (undefined before the first stream opens). */
  get subscriptionProperties(): SubscriptionProperties | undefined {
    return this.properties && { ...this.properties };
  }

  /** Messages received and not yet acked or nacked. */
  get heldMessages(): number {
    return this.held.size;
  }

  /**
   * Listens to stream errors and handler failures ('error': PubSubError with `retryable`, or
   * HandlerError) or to state changes ('state'). Returns a function that removes the listener.
   * Without any error listener, fatal errors and handler failures are logged with console.error.
   */
  on(event: 'error', listener: (error: Error) => void): () => void;
  on(event: 'state', listener: (state: SubscriberState) => void): () => void;
  on(event: 'error' | 'state', listener: ((error: Error) => void) | ((state: SubscriberState) => void)): () => void {
    const set = (event === 'error' ? this.errorListeners : this.stateListeners) as Set<typeof listener>;
    set.add(listener);
    return () => set.delete(listener);
  }

  /**
   * Stops the subscriber: messages not handed to the handler yet are nacked, running handlers get
   * up to closeTimeoutMs to finish (their leases still renewed), messages still unsettled then
   * are nacked, the stream closes once the broker has read what was sent on it, and the acks and
   * nacks made since close() was called go over REST. Resolves when all that is done. Idempotent.
   */
  close(): Promise<void> {
    this.closing ??= this.shutdown();
    return this.closing;
  }

  // --- streams -------------------------------------------------------------------------------

  private onFrame(frame: ServerFrame, opened: boolean): void {
    if (frame.subscriptionProperties) this.setProperties(frame.subscriptionProperties);
    if (opened) this.onOpen();
    if (frame.acknowledgeConfirmation) this.acks.confirmed('acknowledge', frame.acknowledgeConfirmation);
    if (frame.modifyAckDeadlineConfirmation)
      this.acks.confirmed('modifyAckDeadline', frame.modifyAckDeadlineConfirmation);
    if (frame.receivedMessages?.length) this.onMessages(frame.receivedMessages);
  }

  private onOpen(): void {
    if (this.currentState === 'connecting' || this.currentState === 'reconnecting') this.setState('open');
    // Acks made while disconnected first, then fresh leases for what is held (they may be close to running out).
    this.acks.flush();
    this.extendLeases();
  }

  private setProperties(properties: Partial<SubscriptionProperties>): void {
    const wasExactlyOnce = this.properties?.exactlyOnceDeliveryEnabled === true;
    this.properties = {
      exactlyOnceDeliveryEnabled: properties.exactlyOnceDeliveryEnabled === true,
      messageOrderingEnabled: properties.messageOrderingEnabled === true,
    };
    if (wasExactlyOnce && !this.properties.exactlyOnceDeliveryEnabled) this.acks.exactlyOnceEnded();
  }

  /** The stream ended: it reconnects by itself after a retryable error, unless closing. */
  private onStreamEnded(error: PubSubError): void {
    this.acks.streamEnded();
    if (this.currentState === 'closing' || this.currentState === 'closed') return;
    if (!error.retryable) {
      this.fail(error);
      return;
    }
    this.emitError(error);
    if (this.closing) return; // an error listener called close()
    this.setState('reconnecting');
  }

  // --- messages and the handler ---------------------------------------------------------------

  private onMessages(received: { ackId: string; message: WireMessage }[]): void {
    const now = Date.now();
    for (const { ackId, message: wire } of received) {
      if (this.currentState === 'closing' || this.currentState === 'closed') {
        this.acks.settle('nack', ackId);
        continue;
      }
      // On exactly-once subscriptions an ack ID is one delivery: a redelivery is a new message
      // (settling the old one reports INVALID). Elsewhere a redelivery of a message this
      // subscriber holds or has acked (its lease ran out, say during a reconnect) takes the old
      // one's place, so the handler does not see it twice and the ack still takes effect.
      const exactlyOnce = this.properties?.exactlyOnceDeliveryEnabled === true;
      const held = this.held.get(wire.messageId);
      if (held && !exactlyOnce) {
        held.ackId = ackId;
        continue;
      }
      if (held) this.forget(held);
      if (!exactlyOnce && this.acks.ackAgain(wire.messageId, ackId)) continue;
      let lease!: Lease;
      let message: Message;
      try {
        message = new Message(wire, {
          ackId: () => lease.ackId,
          settle: (kind) => this.settle(lease, kind),
        });
      } catch (error) {
        this.emitError(
          new PubSubError('INTERNAL', `Message ${wire?.messageId} could not be decoded: ${describe(error)}`, {
            retryable: true,
          }),
        );
        this.acks.settle('nack', ackId);
        continue;
      }
      lease = { message, ackId, bytes: message.data.length, receivedAt: now, counted: false };
      this.held.set(wire.messageId, lease);
      this.admit(lease);
    }
    this.dispatch();
  }

  /** Queues a message for the handler, behind earlier messages of its ordering key. */
  private admit(lease: Lease): void {
    const key = this.properties?.messageOrderingEnabled ? lease.message.orderingKey : undefined;
    if (key) {
      lease.key = key;
      if (this.busyKeys.has(key)) {
        const queue = this.keyQueues.get(key);
        if (queue) queue.push(lease);
        else this.keyQueues.set(key, [lease]);
        return;
      }
      this.busyKeys.add(key);
    }
    this.ready.push(lease);
  }

  /** Hands the next key's message to the handler, or frees the key. */
  private releaseKey(lease: Lease): void {
    if (lease.key === undefined) return;
    const queue = this.keyQueues.get(lease.key);
    const next = queue?.shift();
    if (queue && queue.length === 0) this.keyQueues.delete(lease.key);
    if (next) this.ready.push(next);
    else this.busyKeys.delete(lease.key);
  }

  private dispatch(): void {
    if (this.dispatching) return; // the running loop below picks up the change
    this.dispatching = true;
    try {
      while (this.ready.length > 0 && this.hasRoom()) {
        const lease = this.ready.shift()!;
        if (lease.settlement) this.releaseKey(lease);
        else this.run(lease);
      }
    } finally {
      this.dispatching = false;
    }
  }

  private hasRoom(): boolean {
    if (this.currentState === 'closing' || this.currentState === 'closed') return false;
    if (this.settings.maxMessages > 0 && this.outstandingMessages >= this.settings.maxMessages) return false;
    return (
      this.settings.maxBytes === 0 || this.outstandingBytes < this.settings.maxBytes || this.outstandingMessages === 0
    );
  }

  private run(lease: Lease): void {
    lease.counted = true;
    this.outstandingMessages++;
    this.outstandingBytes += lease.bytes;
    this.running++;
    const finish = () => {
      this.running--;
      this.releaseKey(lease);
      this.dispatch();
    };
    const failed = (error: unknown) => {
      this.emitError(new HandlerError(lease.message.messageId, error));
      if (!lease.settlement) void this.settle(lease, 'nack');
      finish();
    };
    let result: unknown;
    try {
      result = this.handler(lease.message);
    } catch (error) {
      failed(error);
      return;
    }
    if (result && typeof (result as PromiseLike<void>).then === 'function')
      (result as PromiseLike<void>).then(finish, failed);
    else finish();
  }

  private uncount(lease: Lease): void {
    if (!lease.counted) return;
    lease.counted = false;
    this.outstandingMessages--;
    this.outstandingBytes -= lease.bytes;
  }

  /** Stops renewing a lease and frees its flow-control room. */
  private forget(lease: Lease): void {
    const id = lease.message.messageId;
    if (this.held.get(id) === lease) this.held.delete(id);
    this.uncount(lease);
  }

  // --- acks and nacks ------------------------------------------------------------------------

  private settle(lease: Lease, kind: 'ack' | 'nack'): Promise<AckResponse> {
    if (lease.settlement) {
      // Never settled twice: the same call gets the same outcome; the other one is refused.
      return lease.settlement.kind === kind ? lease.settlement.promise : Promise.resolve('INVALID');
    }
    const settlement = this.acks.settle(kind, lease.ackId, lease.message.messageId);
    lease.settlement = settlement;
    this.forget(lease);
    // The broker sends a nacked keyed message and the later ones of its key again, in order:
    // those waiting here are dropped (and nacked, which frees the broker's flow control at once).
    if (kind === 'nack' && lease.key !== undefined) this.dropQueuedFollowers(lease.key);
    this.dispatch();
    return settlement.promise;
  }

  private dropQueuedFollowers(key: string): void {
    const queue = this.keyQueues.get(key);
    if (!queue) return;
    this.keyQueues.delete(key);
    for (const lease of queue) void this.settle(lease, 'nack');
  }

  // --- leases --------------------------------------------------------------------------------

  /** Every streamAckDeadlineSeconds/2, and when a stream opens: renews the lease of every held message. */
  private extendLeases(): void {
    const now = Date.now();
    this.acks.prune(now);
    const leases: Lease[] = [];
    for (const lease of this.held.values()) {
      if (now - lease.receivedAt >= this.settings.maxExtensionMs) this.forget(lease);
      else leases.push(lease);
    }
    this.dispatch();
    for (let i = 0; i < leases.length; i += MAX_IDS_PER_FRAME) {
      const chunk = leases.slice(i, i + MAX_IDS_PER_FRAME);
      const ackIds = chunk.map((lease) => lease.ackId);
      const seconds = chunk.map((lease) =>
        Math.min(
          this.settings.deadlineSeconds,
          Math.ceil((lease.receivedAt + this.settings.maxExtensionMs - now) / 1000),
        ),
      );
      const sent = this.acks.extend(ackIds, seconds, (outcome) => {
        // A lease that could not be renewed is gone: the message will be delivered again.
        chunk.forEach((lease, j) => {
          if (outcome.get(ackIds[j]) === 'INVALID' && lease.ackId === ackIds[j]) this.forget(lease);
        });
        this.dispatch();
      });
      if (!sent) return;
    }
  }

  // --- closing -------------------------------------------------------------------------------

  /**
   * close(): from here on acks and nacks go over REST, never on the stream, so that the broker
   * gets no room to hand out more (messages that still arrive are nacked too). Leases are
   * renewed while running handlers finish; then the broker confirms it has read what was sent on
   * the stream before, and the stream closes.
   */
  private async shutdown(): Promise<void> {
    if (this.currentState === 'closed') return;
    const deadline = Date.now() + this.settings.closeTimeoutMs;
    this.setState('closing');
    this.stream.stop();
    this.acks.sendOverRest();
    // What the handler has not seen goes back.
    const waiting = [...this.ready, ...[...this.keyQueues.values()].flat()];
    this.ready = [];
    this.keyQueues.clear();
    for (const lease of waiting) void this.settle(lease, 'nack');
    await this.waitUntil(() => this.running === 0, deadline);
    for (const lease of [...this.held.values()]) void this.settle(lease, 'nack');

    const barrier = this.stream.barrier();
    if (barrier) {
      // Once the broker has read (and, with exactly-once, confirmed) everything sent before.
      await this.waitUntil(() => barrier.gone() || (barrier.answered() && this.acks.allConfirmed()), deadline);
    }
    this.stream.close();
    await this.acks.drain();
    this.finish(undefined);
  }

  /** Ends the subscriber for good (close() or a fatal error). */
  private finish(error: PubSubError | undefined): void {
    if (this.currentState === 'closed') return;
    clearInterval(this.leaseTimer);
    this.stream.close();
    this.acks.close();
    this.setState('closed');
    this.resolveClosed(error);
  }

  private fail(error: PubSubError): void {
    this.emitError(error);
    this.ready = [];
    this.keyQueues.clear();
    this.finish(error);
  }

  private waitUntil(condition: () => boolean, deadline: number): Promise<void> {
    return new Promise((resolve) => {
      const check = () => {
        if (condition() || Date.now() >= deadline) resolve();
        else setTimeout(check, 10);
      };
      check();
    });
  }

  private setState(state: SubscriberState): void {
    if (this.currentState === state) return;
    this.currentState = state;
    for (const listener of [...this.stateListeners]) {
      try {
        listener(state);
      } catch {
        // a listener's failure is its own
      }
    }
  }

  private emitError(error: Error): void {
    if (this.errorListeners.size === 0) {
      if (!(error instanceof PubSubError && error.retryable)) console.error(error);
      return;
    }
    for (const listener of [...this.errorListeners]) {
      try {
        listener(error);
      } catch {
        // a listener's failure is its own
      }
    }
  }
}
