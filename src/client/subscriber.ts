import { describe, HandlerError, PubSubError } from './errors.ts';
import { Message, type WireMessage } from './message.ts';
import { type SubscriberSettings, subscriberSettings } from './options.ts';
import { type Confirmation, type ServerFrame, StreamingPull } from './stream.ts';
import type {
  AckResponse,
  SubscribeOptions,
  SubscriberState,
  SubscriptionProperties,
  WebSocketConstructor,
} from './types.ts';

/** Ack IDs per frame (an ack ID is under 70 bytes; the broker accepts frames up to 1 MiB). */
const MAX_IDS_PER_FRAME = 2500;
/** Acks and nacks made within this many milliseconds are sent together. */
const ACK_BATCH_MS = 5;
/**
 * Acks and nacks sent this recently before a stream dropped may not have reached the broker, so
 * they are sent again on the next stream (harmless: the broker ignores an ack ID already used).
 */
const RESEND_WINDOW_MS = 15_000;
/** Transient exactly-once failures (TEMPORARY_FAILURE, UNORDERED) are retried this many times. */
const MAX_TRANSIENT_RETRIES = 5;

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
  rest(verb: 'acknowledge' | 'modifyAckDeadline', body: object): Promise<unknown>;
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

/** An ack or nack on its way to the broker, and the promise of its outcome. */
interface Settlement {
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

/** A frame of acks, nacks or lease extensions sent on a stream. */
interface SentFrame {
  kind: 'ack' | 'nack' | 'extend';
  sentAt: number;
  items: { ackId: string; settlement?: Settlement; lease?: Lease }[];
}

type Timer = ReturnType<typeof setTimeout>;

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

  private readonly ctx: SubscriberContext;
  private readonly handler: MessageHandler;
  private readonly settings: SubscriberSettings;
  private readonly errorListeners = new Set<(error: Error) => void>();
  private readonly stateListeners = new Set<(state: SubscriberState) => void>();
  private resolveClosed!: (error: PubSubError | undefined) => void;

  private currentState: SubscriberState = 'connecting';
  private properties?: SubscriptionProperties;
  private readonly stream: StreamingPull;
  /** Sent on the current stream and, on exactly-once subscriptions, not confirmed yet; else kept for RESEND_WINDOW_MS. */
  private ackFrames: SentFrame[] = [];
  /** Nacks and lease extensions, in the order sent (the broker confirms them in this order). */
  private modFrames: SentFrame[] = [];
  private closing?: Promise<void>;

  /** Unsettled deliveries by message ID: their leases are renewed. */
  private readonly held = new Map<string, Lease>();
  /** Acked messages by ID, remembered a while so that a redelivery is acked again, not handled again. */
  private readonly acked = new Map<string, Settlement>();
  /** Settlements whose outcome is not known yet. */
  private readonly pending = new Set<Settlement>();
  private ackQueue: Settlement[] = [];
  private nackQueue: Settlement[] = [];

  /** Messages ready for the handler: unkeyed ones and the head of each ordering key. */
  private ready: Lease[] = [];
  /** Later messages of a key whose head is ready or running. */
  private readonly keyQueues = new Map<string, Lease[]>();
  private readonly busyKeys = new Set<string>();
  private running = 0;
  private outstandingMessages = 0;
  private outstandingBytes = 0;
  private dispatching = false;
  /** REST acks and nacks (while closing), one request at a time so that their order holds. */
  private restChain: Promise<void> = Promise.resolve();

  private flushTimer?: Timer;
  /** Exactly-once settlements waiting to be sent again after a transient failure. */
  private readonly retryTimers = new Map<Timer, Settlement>();
  private readonly leaseTimer: ReturnType<typeof setInterval>;

  /** @internal Use PubSubClient.subscribe(). */
  constructor(ctx: SubscriberContext, handler: MessageHandler, options: SubscribeOptions = {}) {
    this.ctx = ctx;
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
    if (frame.acknowledgeConfirmation) this.onConfirmation(this.ackFrames, frame.acknowledgeConfirmation);
    if (frame.modifyAckDeadlineConfirmation) this.onConfirmation(this.modFrames, frame.modifyAckDeadlineConfirmation);
    if (frame.receivedMessages?.length) this.onMessages(frame.receivedMessages);
  }

  private onOpen(): void {
    if (this.currentState === 'connecting' || this.currentState === 'reconnecting') this.setState('open');
    // Acks made while disconnected first, then fresh leases for what is held (they may be close to running out).
    this.flushNow();
    this.extendLeases();
  }

  private setProperties(properties: Partial<SubscriptionProperties>): void {
    const wasExactlyOnce = this.properties?.exactlyOnceDeliveryEnabled === true;
    this.properties = {
      exactlyOnceDeliveryEnabled: properties.exactlyOnceDeliveryEnabled === true,
      messageOrderingEnabled: properties.messageOrderingEnabled === true,
    };
    // No confirmations come any more: what was sent counts as done.
    if (wasExactlyOnce && !this.properties.exactlyOnceDeliveryEnabled) {
      for (const frame of [...this.ackFrames, ...this.modFrames]) this.settleUnconfirmed(frame);
    }
  }

  /** The stream ended: it reconnects by itself after a retryable error, unless closing. */
  private onStreamEnded(error: PubSubError): void {
    if (this.flushTimer !== undefined) clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    this.requeueUnconfirmed();
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
        this.enqueue(this.newSettlement('nack', ackId));
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
      const acked = exactlyOnce ? undefined : this.acked.get(wire.messageId);
      if (acked) {
        acked.ackId = ackId;
        this.enqueue(acked);
        continue;
      }
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
        this.enqueue(this.newSettlement('nack', ackId));
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
    const settlement = this.newSettlement(kind, lease.ackId, lease.message.messageId);
    lease.settlement = settlement;
    this.forget(lease);
    if (this.currentState === 'closed') {
      this.resolve(settlement, 'OTHER');
      return settlement.promise;
    }
    if (kind === 'ack' && !this.properties?.exactlyOnceDeliveryEnabled)
      this.acked.set(lease.message.messageId, settlement);
    this.enqueue(settlement);
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

  private newSettlement(kind: 'ack' | 'nack', ackId: string, messageId?: string): Settlement {
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
    return settlement;
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

  private enqueue(settlement: Settlement): void {
    if (settlement.queued) return;
    settlement.queued = true;
    (settlement.kind === 'ack' ? this.ackQueue : this.nackQueue).push(settlement);
    if (this.flushTimer === undefined && (this.stream.isOpen || this.currentState === 'closing')) {
      this.flushTimer = setTimeout(() => this.flushNow(), ACK_BATCH_MS);
    }
  }

  private flushNow(): void {
    if (this.flushTimer !== undefined) clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    // While closing nothing more goes on the stream (see shutdown): it would free flow-control
    // room, and the broker would hand out messages that may then be lost with the socket.
    if (this.currentState === 'closing') {
      const batch = [...this.ackQueue, ...this.nackQueue];
      this.ackQueue = [];
      this.nackQueue = [];
      if (batch.length > 0) this.restChain = this.restChain.then(() => this.restSettle(batch));
      return;
    }
    if (!this.stream.isOpen) return;
    this.sendSettlements('ack');
    this.sendSettlements('nack');
  }

  private sendSettlements(kind: 'ack' | 'nack'): void {
    const queue = kind === 'ack' ? this.ackQueue : this.nackQueue;
    while (queue.length > 0) {
      const batch = queue.slice(0, MAX_IDS_PER_FRAME);
      const ackIds = batch.map((settlement) => settlement.ackId);
      const frame =
        kind === 'ack' ? { ackIds } : { modifyDeadlineAckIds: ackIds, modifyDeadlineSeconds: ackIds.map(() => 0) };
      if (!this.stream.send(frame)) return; // still queued; the close handler takes over
      queue.splice(0, batch.length);
      const now = Date.now();
      const items = batch.map((settlement) => {
        settlement.queued = false;
        settlement.sentAt = now;
        return { ackId: settlement.ackId, settlement };
      });
      (kind === 'ack' ? this.ackFrames : this.modFrames).push({ kind, sentAt: now, items });
      if (!this.properties?.exactlyOnceDeliveryEnabled)
        for (const settlement of batch) this.resolve(settlement, 'SUCCESS');
    }
  }

  /**
   * The broker confirms each frame of acks (or of deadline changes) with one confirmation, in
   * the order sent. Frames before the one confirmed got none: sent before exactly-once was on.
   */
  private onConfirmation(frames: SentFrame[], confirmation: Confirmation): void {
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
    if (frame.kind === 'extend') {
      // A lease that could not be renewed is gone: the message will be delivered again.
      for (const { ackId, lease } of frame.items) {
        if (outcome.get(ackId) === 'INVALID' && lease && lease.ackId === ackId) this.forget(lease);
      }
      this.dispatch();
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

  /**
   * After a stream drops: unconfirmed exactly-once acks/nacks, and others sent within
   * RESEND_WINDOW_MS (frames the broker had not read yet are lost with the stream), go out again.
   */
  private requeueUnconfirmed(): void {
    const now = Date.now();
    const again = { ack: [] as Settlement[], nack: [] as Settlement[] };
    for (const frame of [...this.ackFrames, ...this.modFrames]) {
      if (frame.kind === 'extend') continue;
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

  /** Forgets sent frames that need no confirmation any more and are past the resend window. */
  private pruneSent(now: number): void {
    for (const frames of [this.ackFrames, this.modFrames]) {
      let drop = 0;
      while (drop < frames.length && now - frames[drop].sentAt >= RESEND_WINDOW_MS) {
        if (frames[drop].items.some(({ settlement }) => settlement && settlement.result === undefined)) break;
        drop++;
      }
      frames.splice(0, drop);
    }
  }

  // --- leases --------------------------------------------------------------------------------

  /** Every streamAckDeadlineSeconds/2, and when a stream opens: renews the lease of every held message. */
  private extendLeases(): void {
    const now = Date.now();
    // An acked message can only come back within a lease of its last ack attempt.
    const ackMemoryMs = this.settings.deadlineSeconds * 1000 + 60_000;
    for (const [messageId, settlement] of this.acked) {
      if (!settlement.queued && now - settlement.sentAt > ackMemoryMs) this.acked.delete(messageId);
    }
    const leases: Lease[] = [];
    for (const lease of this.held.values()) {
      if (now - lease.receivedAt >= this.settings.maxExtensionMs) this.forget(lease);
      else leases.push(lease);
    }
    this.dispatch();
    if (!this.stream.isOpen) return;
    this.pruneSent(now);
    for (let i = 0; i < leases.length; i += MAX_IDS_PER_FRAME) {
      const chunk = leases.slice(i, i + MAX_IDS_PER_FRAME);
      const frame = {
        modifyDeadlineAckIds: chunk.map((lease) => lease.ackId),
        modifyDeadlineSeconds: chunk.map((lease) =>
          Math.min(
            this.settings.deadlineSeconds,
            Math.ceil((lease.receivedAt + this.settings.maxExtensionMs - now) / 1000),
          ),
        ),
      };
      if (!this.stream.send(frame)) return;
      this.modFrames.push({
        kind: 'extend',
        sentAt: now,
        items: chunk.map((lease) => ({ ackId: lease.ackId, lease })),
      });
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
    this.flushNow(); // what is queued goes over REST from now on
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
      const confirmed = () =>
        [...this.ackFrames, ...this.modFrames].every((frame) =>
          frame.items.every(
            ({ ackId, settlement }) =>
              !settlement || settlement.result !== undefined || settlement.ackId !== ackId || settlement.queued,
          ),
        );
      await this.waitUntil(() => barrier.gone() || (barrier.answered() && confirmed()), deadline);
    }
    this.stream.close();
    for (const [timer, settlement] of this.retryTimers) {
      clearTimeout(timer);
      this.enqueue(settlement);
    }
    this.retryTimers.clear();
    this.flushNow();
    await this.restChain;
    this.finish(undefined);
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
          if (!failures) this.emitError(error instanceof Error ? error : new Error(String(error)));
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

  /** Ends the subscriber for good (close() or a fatal error). */
  private finish(error: PubSubError | undefined): void {
    if (this.currentState === 'closed') return;
    clearInterval(this.leaseTimer);
    this.stream.close();
    for (const timer of [this.flushTimer, ...this.retryTimers.keys()]) if (timer !== undefined) clearTimeout(timer);
    this.retryTimers.clear();
    this.flushTimer = undefined;
    for (const settlement of [...this.pending]) this.resolve(settlement, 'OTHER');
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

/** The per-ack-ID failures of an exactly-once REST ack (ErrorInfo metadata), if that is what failed. */
function ackFailures(error: unknown): Map<string, string> | undefined {
  if (!(error instanceof PubSubError) || !Array.isArray(error.details)) return undefined;
  for (const detail of error.details) {
    const info = detail as { reason?: string; metadata?: Record<string, string> };
    if (info?.reason === 'EXACTLY_ONCE_ACKID_FAILURE' && info.metadata) return new Map(Object.entries(info.metadata));
  }
  return undefined;
}
