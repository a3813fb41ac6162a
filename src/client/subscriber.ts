import { Acks, type SubscriptionCall } from './acks.ts';
import { PubSubError } from './errors.ts';
import { Leases, type MessageHandler } from './leases.ts';
import { type SubscriberSettings, subscriberSettings } from './options.ts';
import { type ServerFrame, StreamingPull } from './stream.ts';
import type { SubscribeOptions, SubscriberState, SubscriptionProperties, WebSocketLike } from './types.ts';

/** What a Subscriber needs from its PubSubClient (internal). */
export interface SubscriberContext {
  /** Full subscription name, `projects/{p}/subscriptions/{s}`. */
  subscription: string;
  /** ws:// or wss:// URL of the streaming pull. */
  streamUrl: string;
  /** Opens the WebSocket of a stream to `url`. */
  openSocket: (url: string) => WebSocketLike;
  /** A REST call on the subscription (`:acknowledge`, `:modifyAckDeadline`); throws PubSubError. */
  rest: SubscriptionCall;
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

  private readonly settings: SubscriberSettings;
  private readonly errorListeners = new Set<(error: Error) => void>();
  private readonly stateListeners = new Set<(state: SubscriberState) => void>();
  private resolveClosed!: (error: PubSubError | undefined) => void;

  private currentState: SubscriberState = 'connecting';
  private properties?: SubscriptionProperties;
  private readonly stream: StreamingPull;
  private readonly acks: Acks;
  private readonly leases: Leases;
  private closing?: Promise<void>;
  private readonly leaseTimer: ReturnType<typeof setInterval>;

  /** @internal Use PubSubClient.subscribe(). */
  constructor(ctx: SubscriberContext, handler: MessageHandler, options: SubscribeOptions = {}) {
    this.subscription = ctx.subscription;
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
    this.stream = new StreamingPull(ctx.streamUrl, ctx.openSocket, first, this.settings, {
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
    this.leases = new Leases({
      handler,
      settings: this.settings,
      acks: this.acks,
      properties: () => this.properties,
      error: (error) => this.emitError(error),
    });
    this.leaseTimer = setInterval(() => this.renewLeases(), deadlineSeconds * 500);
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
    return this.leases.size;
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
    if (frame.receivedMessages?.length) this.leases.receive(frame.receivedMessages);
  }

  private onOpen(): void {
    if (this.currentState === 'connecting' || this.currentState === 'reconnecting') this.setState('open');
    // Acks made while disconnected first, then fresh leases for what is held (they may be close to running out).
    this.acks.flush();
    this.renewLeases();
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
      this.emitError(error);
      this.finish(error);
      return;
    }
    this.emitError(error);
    if (this.closing) return; // an error listener called close()
    this.setState('reconnecting');
  }

  /** Every streamAckDeadlineSeconds/2, and when a stream opens. */
  private renewLeases(): void {
    const now = Date.now();
    this.acks.prune(now);
    this.leases.renew(now);
  }

  // --- closing -------------------------------------------------------------------------------

  /**
   * close(): from here on acks and nacks wait, and go over REST once the stream has closed, so
   * that the broker gets no room to hand out more on it (messages that still arrive are nacked
   * too). Leases are renewed while running handlers finish; then the broker confirms it has read
   * what was sent on the stream before, the stream closes, and the acks and nacks are sent.
   */
  private async shutdown(): Promise<void> {
    if (this.currentState === 'closed') return;
    const deadline = Date.now() + this.settings.closeTimeoutMs;
    // Nothing more for the handler and no new stream, already while the state listeners run.
    this.leases.stop();
    this.stream.stop();
    this.setState('closing');
    this.acks.holdUntilStreamCloses();
    this.leases.nackWaiting(); // what the handler has not seen goes back
    await this.waitUntil(() => this.leases.running === 0, deadline);
    this.leases.nackHeld();

    const barrier = this.stream.barrier();
    if (barrier) {
      // Once the broker has read (and, with exactly-once, confirmed) everything sent before.
      await this.waitUntil(() => barrier.gone() || (barrier.answered() && this.acks.allConfirmed()), deadline);
    }
    this.stream.close();
    this.acks.sendOverRest();
    await this.acks.drain();
    this.finish(undefined);
  }

  /** Ends the subscriber for good (close() or a fatal error). */
  private finish(error: PubSubError | undefined): void {
    if (this.currentState === 'closed') return;
    clearInterval(this.leaseTimer);
    this.leases.close();
    this.stream.close();
    this.acks.close();
    this.setState('closed');
    this.resolveClosed(error);
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
