import { fromBase64, utf8Decode } from './encoding.ts';
import type { AckResponse } from './types.ts';

/** A PubsubMessage as it travels in JSON (`data` base64-encoded). */
export interface WireMessage {
  data?: string;
  attributes?: Record<string, string>;
  messageId: string;
  publishTime: string;
  orderingKey?: string;
}

/** A ReceivedMessage as a streaming frame carries it. */
export interface ReceivedFrame {
  ackId: string;
  message: WireMessage;
  deliveryAttempt?: number;
}

/** How a Message reaches its subscriber (internal). */
export interface MessageHandle {
  ackId(): string;
  settle(kind: 'ack' | 'nack'): Promise<AckResponse>;
}

/**
 * A received message. Settle it once with ack() or nack() (or their *WithResponse forms); later
 * calls never send anything again. Until then the subscriber keeps its lease alive.
 */
export class Message {
  /** The payload bytes (empty when the message has none). */
  readonly data: Uint8Array;
  /** Attributes set by the publisher (empty object when none). */
  readonly attributes: Readonly<Record<string, string>>;
  /** Broker-assigned ID, unique within the topic. */
  readonly messageId: string;
  /** When the broker accepted the message, as an RFC 3339 UTC timestamp. */
  readonly publishTime: string;
  /** The ordering key, if the publisher set one. */
  readonly orderingKey?: string;
  /**
   * On subscriptions with a dead-letter policy: which delivery attempt this is (1 + the
   * message's nacks and expired leases). Undefined without the policy.
   */
  readonly deliveryAttempt?: number;
  readonly #handle: MessageHandle;

  /** @internal Messages are made by the subscriber. */
  constructor(wire: WireMessage, handle: MessageHandle, deliveryAttempt?: number) {
    this.data = wire.data ? fromBase64(wire.data) : new Uint8Array(0);
    this.attributes = wire.attributes ?? {};
    this.messageId = wire.messageId;
    this.publishTime = wire.publishTime;
    if (wire.orderingKey) this.orderingKey = wire.orderingKey;
    if (deliveryAttempt !== undefined) this.deliveryAttempt = deliveryAttempt;
    this.#handle = handle;
  }

  /** The ack ID of the current delivery (it changes if the broker redelivers while this is held). */
  get ackId(): string {
    return this.#handle.ackId();
  }

  /** The payload decoded as UTF-8. */
  text(): string {
    return utf8Decode(this.data);
  }

  /** Acknowledges the message: it will not be delivered again. Sent in the background, batched. */
  ack(): void {
    void this.#handle.settle('ack');
  }

  /** Gives the message back for redelivery now. */
  nack(): void {
    void this.#handle.settle('nack');
  }

  /**
   * Acknowledges and resolves with the broker's verdict on exactly-once subscriptions (from its
   * acknowledgeConfirmation; transient failures are retried first), or 'SUCCESS' once the ack is
   * sent on other subscriptions. Never rejects.
   */
  ackWithResponse(): Promise<AckResponse> {
    return this.#handle.settle('ack');
  }

  /** nack() with the verdict of the broker's modifyAckDeadlineConfirmation (see ackWithResponse). */
  nackWithResponse(): Promise<AckResponse> {
    return this.#handle.settle('nack');
  }
}
