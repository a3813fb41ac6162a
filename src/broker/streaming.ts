import { type AckFailureCode, ApiError, invalidArgument, unavailable } from '../errors.ts';
import type { Delivery } from './ack-id.ts';
import { checkAckDeadline, checkDeadlineChange } from './ack-deadline.ts';
import type { CallContext } from './call-context.ts';
import type { DeliveryService, Settled } from './delivery.ts';
import type { Leaser, LeaseConsumer } from './leaser.ts';
import type { LeasedMessage } from './pull.ts';
import type { SettleOutcome } from './settlement.ts';
import { parseResourceName, type ResourceName } from './names.ts';
import { OutstandingDeliveries } from './outstanding.ts';
import type { SubscriptionRecord } from './records.ts';
import type { SubscriptionService } from './subscriptions.ts';

/**
 * One streaming pull (StreamingPull in googleapis' google/pubsub/v1/pubsub.proto; README.md,
 * "Streaming pull over WebSocket") over any message transport (the route uses a WebSocket).
 * Messages are pushed as soon as they are published: the subscription's leaser in this process
 * (leaser.ts), shared by its streams and long polls, waits on the topic's wake-up channel, never
 * on a polling interval, and hands each stream messages as it has room. Flow control stops delivery at the client's
 * maxOutstandingMessages / maxOutstandingBytes and resumes as it acks. Acks and deadline changes
 * may come on the stream; on exactly-once subscriptions each is confirmed per ack ID.
 */
export interface StreamTransport {
  /** Sends one response frame; false when the transport is no longer open (the frame is lost). */
  send(response: StreamingPullResponse): boolean;
  /** Ends the stream with an error, which the transport tells the client as its wire allows. */
  close(error: ApiError): void;
  /**
   * While the transport's send buffer is full (the client reads slower than messages come), a
   * promise of when it drains: nothing more is leased until then. Undefined when it has room.
   */
  blocked?(): Promise<void> | undefined;
}

/** Per-ack-ID results of acks or deadline changes made on an exactly-once stream. */
export interface StreamConfirmation {
  ackIds: string[];
  invalidAckIds: string[];
  unorderedAckIds?: string[];
  temporaryFailedAckIds: string[];
}

/** A StreamingPullResponse (google/pubsub/v1/pubsub.proto); an empty one is a heartbeat. */
export interface StreamingPullResponse {
  receivedMessages?: LeasedMessage[];
  subscriptionProperties?: SubscriptionProperties;
  acknowledgeConfirmation?: StreamConfirmation;
  modifyAckDeadlineConfirmation?: StreamConfirmation;
}

/** A StreamingPullRequest (google/pubsub/v1/pubsub.proto), as a front end decodes one frame. */
export interface StreamingPullRequest {
  subscription?: string;
  ackIds?: string[];
  modifyDeadlineSeconds?: number[];
  modifyDeadlineAckIds?: string[];
  streamAckDeadlineSeconds?: number;
  clientId?: string;
  maxOutstandingMessages?: number;
  maxOutstandingBytes?: number;
  protocolVersion?: number;
}

export interface StreamingOptions {
  /** An idle stream gets an empty frame at least this often (Pub/Sub clients expect ~15 s). */
  heartbeatMs: number;
  /** Asked before the stream starts on its subscription; throws to refuse it (the stream limits: streams.ts). */
  admit?(record: SubscriptionRecord): void;
}

/**
 * Messages per server frame. Smaller frames keep each JSON string near 350 KB (a 1000-message
 * frame of 1 KB messages is ~1.4 MB, and several at once dominate the broker's memory peak);
 * a stream with more room simply gets several frames in a row.
 */
const MAX_MESSAGES_PER_FRAME = 250;
/** And at most this many message bytes per frame (at least one message always goes). */
const MAX_BYTES_PER_FRAME = 4 * 1024 * 1024;

export interface SubscriptionProperties {
  exactlyOnceDeliveryEnabled: boolean;
  messageOrderingEnabled: boolean;
}

export class StreamingSession {
  private record?: SubscriptionRecord;
  private ackDeadlineSeconds = 0;
  private maxMessages = 0;
  private maxBytes = 0;
  private readonly outstanding = new OutstandingDeliveries();
  private sentProperties?: SubscriptionProperties;
  private closed = false;
  /** Ended by a protocol error: later frames are not acted on. */
  private failed = false;
  private lastSentAt = Date.now();
  private heartbeat?: NodeJS.Timeout;
  /** A connection that never sends its first frame would hold a socket forever. */
  private firstFrameTimer?: NodeJS.Timeout;
  /** Frames are handled one at a time, in arrival order. */
  private queue: Promise<void> = Promise.resolve();
  /** The subscription's leaser, which leases for this stream (leaser.ts), once started. */
  private leaser?: Leaser;
  private readonly leaseConsumer = this.consumer();
  /** The leaser hears when the blocked transport drains, or when the earliest lease runs out. */
  private awaitingDrain = false;
  private expiryTimer?: NodeJS.Timeout;

  constructor(
    /** Who opened the stream: its frames are that caller's calls. */
    readonly caller: CallContext,
    /** The subscription, when the front end knows it (a WebSocket's URL); else the first frame names it (gRPC). */
    private name: ResourceName | undefined,
    private readonly transport: StreamTransport,
    private readonly delivery: DeliveryService,
    private readonly subscriptions: SubscriptionService,
    private readonly options: StreamingOptions,
  ) {
    this.firstFrameTimer = setTimeout(() => {
      const seconds = (2 * options.heartbeatMs) / 1000;
      this.fail(new ApiError('DEADLINE_EXCEEDED', `No first streaming pull request within ${seconds} s.`));
    }, 2 * options.heartbeatMs);
    this.firstFrameTimer.unref();
  }

  /**
   * Feeds one client frame. The front end decodes it with `decode` in arrival order, so that a
   * frame that does not decode ends the stream only after the frames before it were applied.
   */
  receive(decode: () => StreamingPullRequest): void {
    this.queue = this.queue.then(() => this.handle(decode)).catch((error) => this.failChecked(error));
  }

  /**
   * The transport went away: stop delivering. Frames that arrived before still count (acks sent
   * just before a close must take effect); leases of what is outstanding run out by themselves.
   */
  stop(): void {
    this.closed = true;
    clearTimeout(this.firstFrameTimer);
    clearInterval(this.heartbeat);
    clearTimeout(this.expiryTimer);
    // Whatever the leaser hands out from now on goes to other streams, or back.
    this.leaser?.remove(this.leaseConsumer);
    this.leaser?.leave();
    this.leaser = undefined;
  }

  /** Resolves when every frame received so far has been handled. */
  drained(): Promise<void> {
    return this.queue;
  }

  /** Ends the stream with an error (also used for shutdown: UNAVAILABLE makes clients reconnect). */
  fail(error: unknown): void {
    if (this.closed) return;
    this.failed = true;
    const apiError = error instanceof ApiError ? error : unavailable('The stream failed; reconnect.');
    this.stop();
    this.transport.close(apiError);
  }

  /**
   * fail, but a NOT_FOUND from the scripts while the subscription is being detached (its data
   * is gone before streams hear of it) ends the stream as the detach does: FAILED_PRECONDITION.
   */
  private async failChecked(error: unknown): Promise<void> {
    this.fail(this.name && this.record ? await this.delivery.failureOf(this.name, error) : error);
  }

  private async handle(decode: () => StreamingPullRequest): Promise<void> {
    // Frames that arrived before a plain close still count (acks sent just before closing must
    // take effect); after a protocol error, or before the stream started, nothing more is done.
    if (this.failed || (this.closed && !this.record)) return;
    const frame = decode();
    if (frame.streamAckDeadlineSeconds !== undefined) {
      this.ackDeadlineSeconds = checkAckDeadline(frame.streamAckDeadlineSeconds, 'streamAckDeadlineSeconds');
    }
    if (!this.record) await this.start(frame);
    else this.checkLaterFrame(frame);
    const isKeepAlive =
      !frame.ackIds?.length && !frame.modifyDeadlineAckIds?.length && frame.streamAckDeadlineSeconds === undefined;
    if (frame.ackIds?.length) await this.acknowledge(frame.ackIds);
    if (frame.modifyDeadlineAckIds?.length || frame.modifyDeadlineSeconds?.length) await this.modify(frame);
    if (isKeepAlive && this.sentProperties) this.send({});
  }

  private async start(frame: StreamingPullRequest): Promise<void> {
    if (!this.name) {
      if (!frame.subscription) throw invalidArgument('The first streaming pull request must name the subscription.');
      this.name = parseResourceName('subscriptions', frame.subscription);
    } else if (frame.subscription !== undefined && frame.subscription !== this.name.full) {
      throw invalidArgument(
        `The subscription in the first streaming pull request (${frame.subscription}) does not match the path (${this.name.full}).`,
      );
    }
    if (frame.streamAckDeadlineSeconds === undefined) {
      throw invalidArgument('The first streaming pull request must set streamAckDeadlineSeconds (10 to 600).');
    }
    clearTimeout(this.firstFrameTimer);
    this.maxMessages = Math.max(0, frame.maxOutstandingMessages ?? 0);
    this.maxBytes = Math.max(0, frame.maxOutstandingBytes ?? 0);
    await this.delivery.requireConsume(this.caller, this.name);
    const record = await this.delivery.readPullable(this.name);
    this.options.admit?.(record);
    this.record = record;
    await this.delivery.checkSubscribeRegion(this.record);
    this.sendProperties();
    this.heartbeat = setInterval(
      () => {
        // Also re-reads the subscription, so that an idle stream learns of a PATCH (new
        // subscriptionProperties), a delete (closed with NOT_FOUND) or a detach (closed with
        // FAILED_PRECONDITION) without a publish.
        this.queue = this.queue.then(() => this.refreshAndTouch()).catch((error) => this.fail(error));
        if (Date.now() - this.lastSentAt >= this.options.heartbeatMs) this.send({});
      },
      Math.max(10, Math.floor(this.options.heartbeatMs / 2)),
    );
    this.heartbeat.unref();
    const leaser = await this.delivery.leasers.join(this.record, this.name);
    if (this.closed) return leaser.leave();
    this.leaser = leaser;
    leaser.add(this.leaseConsumer);
  }

  private checkLaterFrame(frame: StreamingPullRequest): void {
    for (const field of [
      'subscription',
      'clientId',
      'maxOutstandingMessages',
      'maxOutstandingBytes',
      'protocolVersion',
    ] as const) {
      if (frame[field] !== undefined)
        throw invalidArgument(`"${field}" may only be set in the first streaming pull request.`);
    }
  }

  /**
   * A settlement of this subscription's deliveries, made on this stream or by any other call in
   * this process (DeliveryService.onSettled): acked, nacked and failed-for-good deliveries no
   * longer count against flow control, and extended ones run out later.
   */
  settled({ record, outcome, deadlineSeconds }: Settled): void {
    if (this.record?.uid !== record.uid) return;
    if (deadlineSeconds === undefined || deadlineSeconds === 0) {
      if (deadlineSeconds === 0 && record.enableMessageOrdering) this.releaseCascaded(outcome.applied);
      this.release(outcome, ['PERMANENT_FAILURE_INVALID_ACK_ID']);
      return;
    }
    const expiresAtMs = Date.now() + deadlineSeconds * 1000;
    for (const ackId of outcome.applied) this.outstanding.moveExpiry(ackId, expiresAtMs);
  }

  /** The subscription this stream delivers (once its first frame has named it). */
  get subscriptionUid(): string | undefined {
    return this.record?.uid;
  }

  /** The delivery behind an ack ID this stream handed out and still counts as outstanding. */
  issued(ackId: string): Delivery | undefined {
    return this.outstanding.get(ackId)?.delivery;
  }

  private async acknowledge(ackIds: string[]): Promise<void> {
    const outcome = await this.delivery.acknowledgeDeliveries(this.record!, ackIds);
    if (!this.record!.enableExactlyOnceDelivery) return;
    this.send({
      acknowledgeConfirmation: {
        ackIds: outcome.applied,
        invalidAckIds: failed(outcome, 'PERMANENT_FAILURE_INVALID_ACK_ID'),
        unorderedAckIds: failed(outcome, 'TRANSIENT_FAILURE_UNORDERED_ACK_ID'),
        temporaryFailedAckIds: failed(outcome, 'TRANSIENT_FAILURE_OTHER'),
      },
    });
  }

  private async modify(frame: StreamingPullRequest): Promise<void> {
    const ackIds = frame.modifyDeadlineAckIds ?? [];
    const seconds = frame.modifyDeadlineSeconds ?? [];
    if (ackIds.length !== seconds.length) {
      throw invalidArgument('modifyDeadlineAckIds and modifyDeadlineSeconds must have the same length.');
    }
    const bySeconds = new Map<number, string[]>();
    ackIds.forEach((ackId, i) => {
      checkDeadlineChange(seconds[i], 'modifyDeadlineSeconds');
      bySeconds.set(seconds[i], [...(bySeconds.get(seconds[i]) ?? []), ackId]);
    });
    const confirmation = {
      ackIds: [] as string[],
      invalidAckIds: [] as string[],
      temporaryFailedAckIds: [] as string[],
    };
    for (const [deadline, group] of bySeconds) {
      const outcome = await this.delivery.modifyDeliveries(this.record!, group, deadline);
      confirmation.ackIds.push(...outcome.applied);
      confirmation.invalidAckIds.push(...failed(outcome, 'PERMANENT_FAILURE_INVALID_ACK_ID'));
      confirmation.temporaryFailedAckIds.push(...failed(outcome, 'TRANSIENT_FAILURE_OTHER'));
    }
    if (this.record!.enableExactlyOnceDelivery) this.send({ modifyAckDeadlineConfirmation: confirmation });
  }

  /** Forgets, for flow control, deliveries that are done: applied, or failed for good. */
  private release(outcome: SettleOutcome, finalFailures: AckFailureCode[]): void {
    let released = false;
    for (const ackId of outcome.applied) released = this.outstanding.delete(ackId) || released;
    for (const [ackId, code] of outcome.failures) {
      if (finalFailures.includes(code)) released = this.outstanding.delete(ackId) || released;
    }
    if (released) this.leaser?.roomFreed();
  }

  /**
   * A nacked keyed message sends the later outstanding messages of its key back to the broker
   * (the ordering cascade): they no longer count against this stream's flow-control limits.
   */
  private releaseCascaded(nackedAckIds: string[]): void {
    const firstNacked = new Map<string, number>();
    for (const ackId of nackedAckIds) {
      const entry = this.outstanding.get(ackId);
      if (!entry?.orderingKey) continue;
      const earliest = firstNacked.get(entry.orderingKey);
      if (earliest === undefined || entry.seq < earliest) firstNacked.set(entry.orderingKey, entry.seq);
    }
    if (firstNacked.size === 0) return;
    this.outstanding.forEach((entry, ackId) => {
      const from = entry.orderingKey === undefined ? undefined : firstNacked.get(entry.orderingKey);
      if (from !== undefined && entry.seq > from) this.outstanding.delete(ackId);
    });
    this.leaser?.roomFreed();
  }

  /**
   * The stream as its subscription's leaser sees it (leaser.ts): its room, its deadline, and how
   * it takes what the leaser leased for it.
   */
  private consumer(): LeaseConsumer {
    const session = this;
    return {
      get deadlineSeconds() {
        return session.ackDeadlineSeconds;
      },
      room: () => ({ messages: this.room(), bytes: MAX_BYTES_PER_FRAME }),
      take: (messages) => this.take(messages),
      end: (error) => void this.failChecked(error ?? unavailable('The server is shutting down; reconnect.')),
      changed: (record) => {
        this.record = record;
        const properties = this.properties();
        if (!sameProperties(properties, this.sentProperties)) this.sendProperties();
      },
    };
  }

  /**
   * Sends what the leaser handed over, in frames, and returns the messages that were not handed
   * to the client (over the byte budget, or the stream closed meanwhile): the leaser gives them
   * to another stream or back. A pull cannot know sizes in advance, so the byte budget is applied
   * here: one message may cross it.
   */
  private take(messages: LeasedMessage[]): LeasedMessage[] {
    const { fits, over } = this.withinByteBudget(messages);
    for (let start = 0; start < fits.length; ) {
      let end = start;
      let bytes = 0;
      while (
        end < fits.length &&
        end - start < MAX_MESSAGES_PER_FRAME &&
        (end === start || bytes < MAX_BYTES_PER_FRAME)
      ) {
        bytes += messageBytes(fits[end++]);
      }
      if (!this.deliver(fits.slice(start, end))) return [...fits.slice(start), ...over];
      start = end;
    }
    return over;
  }

  /** Sends one frame of messages and counts them as outstanding; false when it was not sent. */
  private deliver(messages: LeasedMessage[]): boolean {
    if (this.closed) return false;
    const properties = this.properties();
    const changed = sameProperties(properties, this.sentProperties) ? {} : { subscriptionProperties: properties };
    if (!this.send({ receivedMessages: messages, ...changed })) return false;
    this.sentProperties = properties;
    const expiresAtMs = Date.now() + this.ackDeadlineSeconds * 1000;
    for (const message of messages) {
      const { region, seq } = message.delivery;
      const orderingKey =
        message.message.orderingKey === undefined ? undefined : `${region}/${message.message.orderingKey}`;
      this.outstanding.add(message.ackId, {
        bytes: messageBytes(message),
        expiresAtMs,
        orderingKey,
        seq: Number(seq),
        delivery: message.delivery,
      });
    }
    return true;
  }

  private withinByteBudget(received: LeasedMessage[]): { fits: LeasedMessage[]; over: LeasedMessage[] } {
    if (this.maxBytes === 0) return { fits: received, over: [] };
    let bytes = this.outstanding.bytes;
    let count = 0;
    while (count < received.length && bytes < this.maxBytes) bytes += messageBytes(received[count++]);
    return { fits: received.slice(0, count), over: received.slice(count) };
  }

  /**
   * How many messages may be sent now (0 = at a flow-control limit, or the client reads slowly).
   * At 0, the leaser hears again when the transport drains or the earliest lease runs out.
   */
  private room(): number {
    if (this.closed) return 0;
    const blocked = this.transport.blocked?.();
    if (blocked) {
      if (!this.awaitingDrain) {
        this.awaitingDrain = true;
        void blocked.then(() => {
          this.awaitingDrain = false;
          this.leaser?.roomFreed();
        });
      }
      return 0;
    }
    this.outstanding.forgetExpired(Date.now());
    const room =
      this.maxBytes > 0 && this.outstanding.bytes >= this.maxBytes
        ? 0
        : this.maxMessages === 0
          ? MAX_MESSAGES_PER_FRAME
          : Math.max(0, Math.min(MAX_MESSAGES_PER_FRAME, this.maxMessages - this.outstanding.size));
    if (room === 0 && this.expiryTimer === undefined) {
      const nextExpiryMs = this.outstanding.nextExpiryMs();
      if (nextExpiryMs !== Infinity) {
        this.expiryTimer = setTimeout(
          () => {
            this.expiryTimer = undefined;
            this.leaser?.roomFreed();
          },
          Math.max(1, nextExpiryMs - Date.now()),
        );
        this.expiryTimer.unref();
      }
    }
    return room;
  }

  /**
   * Heartbeat tick: an open stream keeps its subscription in use, even when idle. Its record comes
   * from this process's copy, read at most one tick (half a heartbeat) ago: the streams share one
   * check of it per tick, not one read each (an announced change is read at once: lookOnce).
   */
  private async refreshAndTouch(): Promise<void> {
    await this.refreshRecord(this.options.heartbeatMs / 2);
    await this.subscriptions.touch(this.record!);
  }

  /**
   * Picks up changes to the subscription (exactly-once switched, deleted, detached) between pulls;
   * with `recentWithinMs`, from the process's copy as read at most that long ago.
   */
  private async refreshRecord(recentWithinMs?: number): Promise<void> {
    // Deleted, detached or switched to push: the stream ends, as a new one would be refused.
    this.record = await this.delivery.readPullable(this.name!, recentWithinMs);
    const properties = this.properties();
    if (!sameProperties(properties, this.sentProperties)) this.sendProperties();
  }

  private properties(): SubscriptionProperties {
    return {
      exactlyOnceDeliveryEnabled: this.record!.enableExactlyOnceDelivery === true,
      messageOrderingEnabled: this.record!.enableMessageOrdering === true,
    };
  }

  private sendProperties(): void {
    this.sentProperties = this.properties();
    this.send({ subscriptionProperties: this.sentProperties });
  }

  private send(response: StreamingPullResponse): boolean {
    if (this.closed) return false;
    this.lastSentAt = Date.now();
    return this.transport.send(response);
  }
}

/** Flow-control size of a message: its data bytes. */
const messageBytes = (message: LeasedMessage) => message.message.data?.length ?? 0;

function failed(outcome: SettleOutcome, code: AckFailureCode): string[] {
  return [...outcome.failures].filter(([, failure]) => failure === code).map(([ackId]) => ackId);
}

const sameProperties = (a: SubscriptionProperties, b: SubscriptionProperties | undefined) =>
  b !== undefined &&
  a.exactlyOnceDeliveryEnabled === b.exactlyOnceDeliveryEnabled &&
  a.messageOrderingEnabled === b.messageOrderingEnabled;
