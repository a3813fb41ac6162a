import { ApiError, exactlyOnceAckFailure, invalidArgument, notFound, type AckFailureCode } from '../errors.ts';
import type { PubsubMessageBody } from '../schemas/messages.ts';
import { AckIdCodec, type Delivery } from './ack-id.ts';
import type { BrokerContext } from './context.ts';
import { formatTimestampUs } from './durations.ts';
import { packMessage, unpackMessage } from './message-codec.ts';
import type { ResourceName } from './names.ts';
import type { SubscriptionRecord, SubscriptionService } from './subscriptions.ts';
import type { TopicService } from './topics.ts';
import type { Wakeups } from './wakeups.ts';

export const MAX_PULL_MESSAGES = 1000;
/**
 * Message bytes one pull returns at most (at least one message always goes): 1000 messages of
 * 10 MB would not fit in Redis's Lua memory, nor in one JSON string.
 */
export const MAX_PULL_BYTES = 10_000_000;
export const MAX_PUBLISH_MESSAGES = 1000;
export const MAX_PUBLISH_BYTES = 10_000_000;
const MAX_ATTRIBUTES = 100;
const MAX_ATTRIBUTE_KEY_BYTES = 256;
const MAX_ATTRIBUTE_VALUE_BYTES = 1024;
const MAX_ORDERING_KEY_BYTES = 1024;

export interface ReceivedMessage {
  ackId: string;
  message: {
    data?: string;
    attributes?: Record<string, string>;
    messageId: string;
    publishTime: string;
    orderingKey?: string;
  };
}

interface Attachments {
  version: string;
  /** Attached subscription uids, and for each whether it orders by key. */
  subscriptions: { uid: string; ordered: boolean }[];
}

export interface DeliveryOptions {
  /** The ack ID codec; its secret lives in Redis, so it is loaded on first use. */
  ackIds: () => Promise<AckIdCodec>;
  wakeups: Wakeups;
  /** Upper bound of a long-polling pull, in milliseconds. */
  pullWaitMs: number;
}

/** Publishing and the pull/ack/modack cycle, each state change one script. */
export class DeliveryService {
  /** Per topic incarnation: the attached subscriptions this node last read (checked by publish). */
  private readonly attachments = new Map<string, Attachments>();
  private closing = false;

  constructor(
    private readonly ctx: BrokerContext,
    private readonly topics: TopicService,
    private readonly subscriptions: SubscriptionService,
    private readonly options: DeliveryOptions,
  ) {}

  /** The channel on which publishes and nacks of the subscription's topic wake waiters. */
  wakeChannel(record: SubscriptionRecord): string {
    return this.ctx.keys.wakeChannel(record.topicUid);
  }

  /** Stops long polls from waiting (graceful shutdown). */
  close(): void {
    this.closing = true;
  }

  async publish(topicName: ResourceName, messages: PubsubMessageBody[]): Promise<{ messageIds: string[] }> {
    const bodies = checkPublishRequest(messages);
    const orderingKey = messages[0].orderingKey ?? '';
    const { record } = await this.topics.read(topicName);
    const data = this.ctx.keys.topicData(record.uid);
    const wakeChannel = this.ctx.keys.wakeChannel(record.uid);
    for (;;) {
      const attachments = this.attachments.get(record.uid) ?? (await this.readAttachments(record.uid));
      const subscriptionKeys = attachments.subscriptions.flatMap(({ uid }) => {
        const sub = data.subscription(uid);
        return [sub.ready, sub.keyed, sub.keyStates];
      });
      const orderedFlags = attachments.subscriptions.map(({ ordered }) => (ordered ? '1' : '0')).join('');
      const result = (await this.ctx.scripts.run(
        'publish',
        [data.state, data.messages, data.refs, ...subscriptionKeys],
        [this.ctx.clock.scriptTime(), attachments.version, wakeChannel, orderingKey, orderedFlags, ...bodies],
      )) as number[];
      if (result[0] === -1) throw notFound(topicName.id);
      if (result[0] === -2) {
        this.attachments.delete(record.uid);
        continue;
      }
      const firstSeq = result[1];
      return { messageIds: bodies.map((_, i) => String(firstSeq + i)) };
    }
  }

  async pull(name: ResourceName, maxMessages: number, returnImmediately: boolean, cancelled: AbortSignal) {
    const { record } = await this.subscriptions.read(name);
    const max = Math.min(maxMessages, MAX_PULL_MESSAGES);
    const giveUpAt = Date.now() + (returnImmediately ? 0 : this.options.pullWaitMs);
    for (;;) {
      const waiter = returnImmediately || this.closing ? undefined : await this.armWaiter(record.topicUid);
      try {
        const { received, nextDueUs } = await this.pullOnce(record, max);
        const remainingMs = giveUpAt - Date.now();
        if (received.length > 0 || !waiter || remainingMs <= 0 || cancelled.aborted || this.closing) {
          return received.length > 0 ? { receivedMessages: received } : {};
        }
        // Sleep until a publish or nack wakes us, a lease runs out, the client leaves, or time is up.
        const sleepMs = nextDueUs === undefined ? remainingMs : Math.min(remainingMs, Math.ceil(nextDueUs / 1000) + 1);
        await new Promise<void>((resolve) => {
          const stop = () => {
            clearTimeout(timer);
            cancelled.removeEventListener('abort', stop);
            resolve();
          };
          const timer = setTimeout(stop, sleepMs);
          waiter.woken.then(stop);
          cancelled.addEventListener('abort', stop, { once: true });
        });
        if (cancelled.aborted) return {};
      } finally {
        waiter?.cancel();
      }
    }
  }

  async acknowledge(name: ResourceName, ackIds: string[]): Promise<void> {
    const { record } = await this.subscriptions.read(name);
    throwFailures(await this.acknowledgeDeliveries(record, ackIds));
  }

  async modifyAckDeadline(name: ResourceName, ackIds: string[], seconds: number): Promise<void> {
    const { record } = await this.subscriptions.read(name);
    throwFailures(await this.modifyDeliveries(record, ackIds, seconds));
  }

  /** Acknowledges deliveries and reports, per ack ID, what happened (see settle). */
  acknowledgeDeliveries(record: SubscriptionRecord, ackIds: string[]): Promise<SettleOutcome> {
    const data = this.ctx.keys.topicData(record.topicUid);
    const sub = data.subscription(record.uid);
    const time = this.ctx.clock.scriptTime();
    return this.settle(record, ackIds, (members) =>
      record.enableMessageOrdering
        ? this.ctx.scripts.run(
            'acknowledge-ordered',
            [sub.config, sub.leased, data.messages, data.refs, sub.ready, sub.keyed, sub.keyedDeliveries, sub.keyStates],
            [time, this.ctx.keys.wakeChannel(record.topicUid), ...members],
          )
        : this.ctx.scripts.run('acknowledge', [sub.config, sub.leased, data.messages, data.refs], [time, ...members]),
    );
  }

  /** Sets new deadlines (0 = nack) and reports, per ack ID, what happened (see settle). */
  modifyDeliveries(record: SubscriptionRecord, ackIds: string[], seconds: number): Promise<SettleOutcome> {
    const sub = this.ctx.keys.topicData(record.topicUid).subscription(record.uid);
    const args = [this.ctx.clock.scriptTime(), seconds, this.ctx.keys.wakeChannel(record.topicUid)];
    return this.settle(record, ackIds, (members) =>
      this.ctx.scripts.run(
        'modify-ack-deadline',
        [sub.config, sub.leased, sub.ready, sub.keyed, sub.keyedDeliveries, sub.keyStates],
        [...args, ...members],
      ),
    );
  }

  /**
   * Leases up to `max` available messages once, without waiting. `deadlineSeconds` overrides
   * the subscription's ack deadline (streams lease with their own streamAckDeadlineSeconds).
   */
  async pullOnce(record: SubscriptionRecord, max: number, deadlineSeconds?: number, maxBytes = MAX_PULL_BYTES) {
    const data = this.ctx.keys.topicData(record.topicUid);
    const sub = data.subscription(record.uid);
    const time = this.ctx.clock.scriptTime();
    const deadlineUs = deadlineSeconds === undefined ? '' : deadlineSeconds * 1_000_000;
    const reply = (await this.ctx.scripts.runBuffers(
      'pull',
      [sub.config, sub.ready, sub.leased, data.messages, data.refs, sub.keyed, sub.keyedDeliveries, sub.keyStates],
      [time, max, deadlineUs, this.ctx.keys.wakeChannel(record.topicUid), maxBytes],
    )) as [
      number,
      Buffer | number,
      ...(Buffer | number)[],
    ];
    if (reply[0] === -1) throw notFound(shortName(record.name));
    const codec = await this.options.ackIds();
    const received: ReceivedMessage[] = [];
    for (let i = 2; i < reply.length; i += 3) {
      const seq = reply[i].toString();
      const generation = Number(reply[i + 1]);
      const stored = unpackMessage(reply[i + 2] as Buffer);
      const message: ReceivedMessage['message'] = { messageId: seq, publishTime: publishTimes.format(stored.publishTimeUs) };
      if (stored.data.length > 0) message.data = stored.data.toString('base64');
      if (stored.attributes) message.attributes = stored.attributes;
      if (stored.orderingKey) message.orderingKey = stored.orderingKey;
      received.push({ ackId: codec.encode({ subscriptionUid: record.uid, seq, generation }), message });
    }
    const nextDueUs = typeof reply[1] === 'number' ? reply[1] : undefined;
    return { received, nextDueUs };
  }

  /**
   * Decodes ack IDs and runs one script over the distinct deliveries. Exactly-once
   * subscriptions get a per-ack-ID result: malformed, stale and expired IDs fail, the valid ones
   * still take effect, and a Redis failure is a transient failure of every ID. Others ignore
   * stale IDs, but a malformed ID refuses the whole request before anything changes.
   */
  private async settle(
    record: SubscriptionRecord,
    ackIds: string[],
    apply: (members: string[]) => Promise<unknown>,
  ): Promise<SettleOutcome> {
    const exactlyOnce = record.enableExactlyOnceDelivery === true;
    const codec = await this.options.ackIds();
    const outcome: SettleOutcome = { applied: [], failures: new Map() };
    const memberOf = new Map<string, string>();
    for (const ackId of ackIds) {
      const delivery = codec.decode(ackId);
      if (delivery && delivery.subscriptionUid === record.uid) memberOf.set(ackId, leaseMember(delivery));
      else if (exactlyOnce) outcome.failures.set(ackId, 'PERMANENT_FAILURE_INVALID_ACK_ID');
      else throw invalidArgument(`Invalid ack ID: "${ackId.slice(0, 200)}" was not issued for ${record.name}.`);
    }
    const members = [...new Set(memberOf.values())];
    if (members.length === 0) return outcome;
    let codes: number[];
    try {
      codes = (await apply(members)) as number[];
    } catch (error) {
      if (!exactlyOnce) throw error;
      for (const ackId of memberOf.keys()) outcome.failures.set(ackId, 'TRANSIENT_FAILURE_OTHER');
      return outcome;
    }
    if (codes[0] === -1) throw notFound(shortName(record.name));
    const codeOf = new Map(members.map((member, i) => [member, codes[i]]));
    for (const [ackId, member] of memberOf) {
      const code = codeOf.get(member);
      if (code === APPLIED || (!exactlyOnce && code !== OUT_OF_ORDER)) outcome.applied.push(ackId);
      else if (code === OUT_OF_ORDER) outcome.failures.set(ackId, 'TRANSIENT_FAILURE_UNORDERED_ACK_ID');
      else outcome.failures.set(ackId, 'PERMANENT_FAILURE_INVALID_ACK_ID');
    }
    return outcome;
  }

  private async readAttachments(topicUid: string): Promise<Attachments> {
    const data = this.ctx.keys.topicData(topicUid);
    const [version, attached] = await Promise.all([
      this.ctx.redis.hget(data.state, 'attachVersion'),
      this.ctx.redis.hgetall(data.attached),
    ]);
    // Sent in this order on one connection, the set read is at least as new as the version: if
    // it is newer, publish fails its version check and this is read again, so a stale pair is
    // never used to publish.
    const attachments: Attachments = {
      version: version ?? '0',
      subscriptions: Object.entries(attached).map(([uid, ordered]) => ({ uid, ordered: ordered === '1' })),
    };
    this.attachments.set(topicUid, attachments);
    return attachments;
  }

  private async armWaiter(topicUid: string) {
    try {
      return await this.options.wakeups.arm(this.ctx.keys.wakeChannel(topicUid));
    } catch {
      return undefined; // Without a wake-up channel the pull answers at once; clients pull again.
    }
  }
}

/** Per-ack-ID results. `failures` is only ever filled on exactly-once subscriptions. */
export interface SettleOutcome {
  /** Ack IDs whose delivery the request changed (on other subscriptions: all well-formed ones). */
  applied: string[];
  failures: Map<string, AckFailureCode>;
}

function throwFailures(outcome: SettleOutcome): void {
  if (outcome.failures.size > 0) throw exactlyOnceAckFailure(outcome.failures);
}

const shortName = (fullName: string) => fullName.slice(fullName.lastIndexOf('/') + 1);

/** Per-delivery result codes of the acknowledge and modify-ack-deadline scripts. */
const APPLIED = 1;
const OUT_OF_ORDER = 3;

/** Messages of one publish share a publish time: format it once, not once per message. */
const publishTimes = {
  lastUs: -1,
  lastText: '',
  format(microseconds: number): string {
    if (microseconds !== this.lastUs) {
      this.lastUs = microseconds;
      this.lastText = formatTimestampUs(microseconds);
    }
    return this.lastText;
  },
};

const leaseMember = (delivery: Delivery) => `${delivery.seq}:${delivery.generation}`;

/** Validates a publish request (reference §3) and packs the message bodies for storage. */
function checkPublishRequest(messages: PubsubMessageBody[]): Buffer[] {
  if (messages.length === 0) throw invalidArgument('The publish request must contain at least one message.');
  if (messages.length > MAX_PUBLISH_MESSAGES) {
    throw invalidArgument(`The publish request has ${messages.length} messages; at most ${MAX_PUBLISH_MESSAGES} are allowed.`);
  }
  const orderingKeys = new Set(messages.map((message) => message.orderingKey ?? ''));
  if (orderingKeys.size > 1) {
    throw new ApiError(
      'FAILED_PRECONDITION',
      'In a single publish request, all messages must have no ordering key or they must all have the same ordering key.',
    );
  }
  let totalBytes = 0;
  const bodies = messages.map((message, index) => {
    const attributes = message.attributes ?? {};
    const attributeNames = Object.keys(attributes);
    const orderingKey = message.orderingKey ?? '';
    const stored = packMessage(message.data ?? '', attributes, orderingKey);
    if (!stored) throw invalidArgument(`Message ${index}: "data" is not valid base64.`);
    if (stored.dataBytes === 0 && attributeNames.length === 0) {
      throw invalidArgument(
        'One or more messages in the publish request is empty. Each message must contain either non-empty data, or at least one attribute.',
      );
    }
    if (attributeNames.length > MAX_ATTRIBUTES) {
      throw invalidArgument(`Message ${index} has ${attributeNames.length} attributes; at most ${MAX_ATTRIBUTES} are allowed.`);
    }
    totalBytes += stored.dataBytes;
    for (const key of attributeNames) {
      const keyBytes = Buffer.byteLength(key);
      const valueBytes = Buffer.byteLength(attributes[key]);
      if (keyBytes === 0 || keyBytes > MAX_ATTRIBUTE_KEY_BYTES) {
        throw invalidArgument(`Message ${index}: attribute keys must be 1 to ${MAX_ATTRIBUTE_KEY_BYTES} bytes long.`);
      }
      if (valueBytes > MAX_ATTRIBUTE_VALUE_BYTES) {
        throw invalidArgument(`Message ${index}: the value of attribute "${key}" exceeds ${MAX_ATTRIBUTE_VALUE_BYTES} bytes.`);
      }
      if (key.startsWith('goog')) {
        throw invalidArgument(`Message ${index}: attribute key "${key}" uses the reserved prefix "goog".`);
      }
      totalBytes += keyBytes + valueBytes;
    }
    if (Buffer.byteLength(orderingKey) > MAX_ORDERING_KEY_BYTES) {
      throw invalidArgument(`Message ${index}: the ordering key exceeds ${MAX_ORDERING_KEY_BYTES} bytes.`);
    }
    totalBytes += Buffer.byteLength(orderingKey);
    return stored.packed;
  });
  if (totalBytes > MAX_PUBLISH_BYTES) {
    throw invalidArgument(`The publish request is ${totalBytes} bytes; the limit is ${MAX_PUBLISH_BYTES} bytes.`);
  }
  return bodies;
}

