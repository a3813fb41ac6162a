import {
  ApiError,
  exactlyOnceAckFailure,
  failedPrecondition,
  invalidArgument,
  notFound,
  unavailable,
  type AckFailureCode,
} from '../errors.ts';
import { randomUUID } from 'node:crypto';
import { BulkStrings } from '../redis/binary-command.ts';
import { BLOCK_FIELD_DIGITS, SEQS_PER_BLOCK, type TopicKeys } from '../redis/keys.ts';
import type { RedisClient } from '../redis/client.ts';
import type { PubsubMessageBody } from '../schemas/messages.ts';
import { withTimeout } from '../timeout.ts';
import { checkDeadlineChange } from './ack-deadline.ts';
import type { AckIdCodec, Delivery } from './ack-id.ts';
import type { ClockReading } from './clock.ts';
import { formatTimestampUs } from './durations.ts';
import { layoutMessage, packMessages, stampMessages, unpackMessage } from './message-codec.ts';
import { parseResourceName, type ResourceName } from './names.ts';
import type { Region, Regions } from './regions.ts';
import type { SubscriptionRecord, TopicRecord } from './records.ts';
import type { SubscriptionService } from './subscriptions.ts';
import type { TopicService } from './topics.ts';
import type { Waiter } from './wakeups.ts';

export const MAX_PULL_MESSAGES = 1000;
/**
 * Message bytes one pull returns at most (at least one message always goes): 1000 messages of
 * 10 MB would not fit in Redis's Lua memory, nor in one JSON string.
 */
export const MAX_PULL_BYTES = 10_000_000;
export const MAX_PUBLISH_MESSAGES = 1000;
// A publish's seqs lie in one block of sequence numbers (keys.ts): its messages must fit in it.
if (MAX_PUBLISH_MESSAGES > SEQS_PER_BLOCK) throw new Error('a publish must fit in one block of sequence numbers');
export const MAX_PUBLISH_BYTES = 10_000_000;
const MAX_ATTRIBUTES = 100;
const MAX_ATTRIBUTE_KEY_BYTES = 256;
const MAX_ATTRIBUTE_VALUE_BYTES = 1024;
const MAX_ORDERING_KEY_BYTES = 1024;
/**
 * A remote region that answers slower than this is skipped by a pull: a sick region must not
 * stall pulls through the healthy ones. Whatever its script leased meanwhile is nacked when the
 * answer comes (nobody saw it, so exactly-once still holds), or else delivered again when the
 * lease runs out.
 */
const REMOTE_PULL_TIMEOUT_MS = 2_000;

export interface ReceivedMessage {
  ackId: string;
  message: {
    /** Raw bytes; base64 on the wire (see received-json.ts). */
    data?: Buffer;
    attributes?: Record<string, string>;
    messageId: string;
    publishTime: string;
    orderingKey?: string;
  };
}

/**
 * A message a pull leased, with the delivery it is (streams track ordering keys by region and
 * sequence). Its ack ID is sealed when first asked for, as the answer is written: made for the
 * whole batch up front, the ack ID strings outlived young-generation collections (as base64
 * data did, see received-json.ts).
 */
export class LeasedMessage implements ReceivedMessage {
  // Truly private (#): the codec holds the ack ID secret, and must not show in logs or JSON.
  readonly #codec: AckIdCodec;
  #sealed?: string;

  constructor(
    codec: AckIdCodec,
    readonly delivery: Delivery,
    readonly message: ReceivedMessage['message'],
  ) {
    this.#codec = codec;
  }

  get ackId(): string {
    this.#sealed ??= this.#codec.encode(this.delivery);
    return this.#sealed;
  }

  toJSON(): ReceivedMessage {
    return { ackId: this.ackId, message: this.message };
  }
}

interface Attachments {
  version: string;
  /** Attached subscription uids, and for each whether it orders by key. */
  subscriptions: { uid: string; ordered: boolean }[];
}

export interface DeliveryOptions {
  /** The ack ID codec; its secret lives in Redis, so it is loaded on first use. */
  ackIds: () => Promise<AckIdCodec>;
  /** Upper bound of a long-polling pull, in milliseconds. */
  pullWaitMs: number;
  /** How long a topic record is reused for publishing, in milliseconds (see rememberTopic). */
  rememberTopicMs: number;
  /** Publishes whose packed bodies reach this many bytes stage them outside the script (see publishTo). */
  stageBodiesFromBytes: number;
}

/**
 * Publishing and the pull/ack/modack cycle, each state change one script. A publish is stored
 * in one region (this endpoint's, unless the topic's storage policy says otherwise); pulls
 * look in every usable region, this one first; an ack goes to the region its ack ID names.
 */
export class DeliveryService {
  /** Per region and topic incarnation: the attached subscriptions this node last read (checked by publish). */
  private readonly attachments = new Map<string, Attachments>();
  /** Single region only: topic records by name, so that a publish need not read one (see rememberTopic). */
  private readonly publishTopics = new Map<string, { record: TopicRecord; until: number }>();
  /** Counts pulls, so that every few a remote region is looked at first (see pullOrder). */
  private pulls = 0;
  private closing = false;

  constructor(
    private readonly regions: Regions,
    private readonly topics: TopicService,
    private readonly subscriptions: SubscriptionService,
    private readonly options: DeliveryOptions,
  ) {}

  /** Stops long polls from waiting (graceful shutdown). */
  close(): void {
    this.closing = true;
  }

  async publish(topicName: ResourceName, messages: PubsubMessageBody[]): Promise<{ messageIds: string[] }> {
    const bodies = checkPublishRequest(messages, this.options.stageBodiesFromBytes);
    const orderingKey = messages[0].orderingKey ?? '';
    for (;;) {
      const remembered = this.rememberedTopic(topicName.full);
      const record = remembered ?? (await this.topics.read(topicName));
      const messageIds = await this.publishTo(record, bodies, orderingKey);
      if (messageIds) {
        if (!remembered) this.rememberTopic(record);
        return { messageIds };
      }
      // That incarnation was deleted: the name is gone, or now names a new incarnation.
      this.publishTopics.delete(topicName.full);
      if (!remembered) throw notFound(topicName.id);
    }
  }

  /**
   * Remembers a topic's record for the publishes of the next rememberTopicMs (a second), on a
   * single region only. There the record gives publish nothing but the incarnation (uid), and the
   * publish script refuses a deleted one, so a remembered record cannot take a message the topic
   * would not; the time bounds how long a Redis that lost its data (say, restarted without its
   * append-only file) still sees publishes to topics it no longer has. With regions, the record's
   * storage policy decides where messages go, and a change to it applies from the next publish
   * on: the record is read every time.
   */
  private rememberTopic(record: TopicRecord): void {
    if (this.regions.multiRegion) return;
    if (this.publishTopics.size >= MAX_REMEMBERED_TOPICS)
      this.publishTopics.delete(this.publishTopics.keys().next().value!);
    this.publishTopics.set(record.name, { record, until: performance.now() + this.options.rememberTopicMs });
  }

  private rememberedTopic(fullName: string): TopicRecord | undefined {
    const remembered = this.publishTopics.get(fullName);
    if (!remembered) return undefined;
    if (remembered.until > performance.now()) return remembered.record;
    this.publishTopics.delete(fullName);
    return undefined;
  }

  /** Stores a publish in the topic incarnation; undefined when the incarnation was deleted. */
  private async publishTo(
    record: TopicRecord,
    { bodies, staged }: PackedPublish,
    orderingKey: string,
  ): Promise<string[] | undefined> {
    const region = this.storageRegion(record, orderingKey);
    const { ctx } = region;
    const data = ctx.keys.topicData(record.uid);
    const wakeChannel = ctx.keys.wakeChannel(record.uid);
    const cacheKey = `${region.name}/${record.uid}`;
    const stagingKey = data.staging(randomUUID());
    let refusal: ClockReading | undefined;
    for (let refusedStamps = 0; ; ) {
      const attachments = this.attachments.get(cacheKey) ?? (await this.readAttachments(region, record.uid));
      const subscriptionKeys = attachments.subscriptions.flatMap(({ uid }) => {
        const sub = data.subscription(uid);
        return [sub.ready, sub.keyed, sub.keyStates];
      });
      const orderedFlags = attachments.subscriptions.map(({ ordered }) => (ordered ? '1' : '0')).join('');
      const publishTimeUs = refusal ? ctx.publishClock.stampFrom(refusal) : await ctx.publishClock.stampUs();
      stampMessages(bodies, publishTimeUs);
      const keys = [data.state, data.bodies, data.refs, stagingKey, ...subscriptionKeys];
      const args = [
        ctx.clock.scriptTime(),
        String(publishTimeUs),
        attachments.version,
        wakeChannel,
        orderingKey,
        orderedFlags,
        String(bodies.count),
      ];
      // Large bodies are staged in a hash the script renames, so that Redis never makes Lua
      // strings of them; small ones go in the call (two commands fewer), and share a block with
      // other small publishes. Either way they are encoded in one pass: they are nearly all of
      // what is sent (binary-command.ts).
      const result = (await (staged
        ? ctx.scripts.runStaged('publish', keys, args, stagingKey, bodies).catch(stagedBodiesMissing)
        : ctx.scripts.runEncoded('publish', keys, args, bodies))) as number[];
      if (result[0] === -1) return undefined;
      if (result[0] === -2) {
        this.attachments.delete(cacheKey);
        continue;
      }
      if (result[0] === -3) {
        // Stamped from a reading the script's clock disagrees with (Redis's clock was set, or
        // another shard's clock read it): stamp again from the time this script returned.
        refusal = ctx.publishClock.observe(result[1]);
        if (++refusedStamps < MAX_REFUSED_STAMPS) continue;
        throw unavailable('The publish time could not be agreed with the Redis clock; retry the publish.');
      }
      ctx.publishClock.observe(result[2]);
      const firstSeq = result[1];
      return Array.from({ length: bodies.count }, (_, i) => messageId(region.name, firstSeq + i));
    }
  }

  /** Leases messages for a unary pull; long-polls unless returnImmediately. */
  async pull(
    name: ResourceName,
    maxMessages: number,
    returnImmediately: boolean,
    cancelled: AbortSignal,
  ): Promise<ReceivedMessage[]> {
    const record = await this.subscriptions.read(name);
    await this.checkSubscribeRegion(record);
    const max = Math.min(maxMessages, MAX_PULL_MESSAGES);
    const giveUpAt = Date.now() + (returnImmediately ? 0 : this.options.pullWaitMs);
    for (;;) {
      // Without a wake-up channel the pull answers at once; clients pull again.
      const waiter =
        returnImmediately || this.closing ? undefined : await this.armWaiter(record).catch(() => undefined);
      try {
        const { received, nextDueUs } = await this.pullOnce(record, max);
        const remainingMs = giveUpAt - Date.now();
        if (received.length > 0 || !waiter || remainingMs <= 0 || cancelled.aborted || this.closing) {
          return received;
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
        if (cancelled.aborted) return [];
      } finally {
        waiter?.cancel();
      }
    }
  }

  async acknowledge(name: ResourceName, ackIds: string[]): Promise<void> {
    const record = await this.subscriptions.read(name);
    await this.checkSubscribeRegion(record);
    throwFailures(await this.acknowledgeDeliveries(record, ackIds));
  }

  async modifyAckDeadline(name: ResourceName, ackIds: string[], seconds: number): Promise<void> {
    checkDeadlineChange(seconds, 'ackDeadlineSeconds');
    const record = await this.subscriptions.read(name);
    await this.checkSubscribeRegion(record);
    throwFailures(await this.modifyDeliveries(record, ackIds, seconds));
  }

  /** Acknowledges deliveries and reports, per ack ID, what happened (see settle). */
  acknowledgeDeliveries(record: SubscriptionRecord, ackIds: string[]): Promise<SettleOutcome> {
    return this.settle(record, ackIds, (region, members) => this.acknowledgeMembers(region, record, members));
  }

  /** Runs the acknowledge script of the subscription's kind on lease members ("seq:gen"). */
  private acknowledgeMembers({ ctx }: Region, record: SubscriptionRecord, members: string[]): Promise<unknown> {
    const data = ctx.keys.topicData(record.topicUid);
    const sub = data.subscription(record.uid);
    const time = ctx.clock.scriptTime();
    return record.enableMessageOrdering
      ? ctx.scripts.run(
          'acknowledge-ordered',
          [sub.config, sub.leased, data.bodies, data.refs, sub.ready, sub.keyed, sub.keyedDeliveries, sub.keyStates],
          [time, ctx.keys.wakeChannel(record.topicUid), ...members],
        )
      : ctx.scripts.run('acknowledge', [sub.config, sub.leased, data.bodies, data.refs], [time, ...members]);
  }

  /** Sets new deadlines (0 = nack) and reports, per ack ID, what happened (see settle). */
  modifyDeliveries(record: SubscriptionRecord, ackIds: string[], seconds: number): Promise<SettleOutcome> {
    return this.settle(record, ackIds, ({ ctx }, members) => {
      const sub = ctx.keys.topicData(record.topicUid).subscription(record.uid);
      return ctx.scripts.run(
        'modify-ack-deadline',
        [sub.config, sub.leased, sub.ready, sub.keyed, sub.keyedDeliveries, sub.keyStates],
        [ctx.clock.scriptTime(), seconds, ctx.keys.wakeChannel(record.topicUid), ...members],
      );
    });
  }

  /**
   * Leases up to `max` available messages once, without waiting, from every usable region
   * (see pullOrder). `deadlineSeconds` overrides the subscription's ack deadline (streams
   * lease with their own streamAckDeadlineSeconds). A remote region that fails is skipped:
   * its messages wait for it; this region's failure fails the pull.
   */
  async pullOnce(record: SubscriptionRecord, max: number, deadlineSeconds?: number, maxBytes = MAX_PULL_BYTES) {
    const received: LeasedMessage[] = [];
    let nextDueUs: number | undefined;
    let bytesLeft = maxBytes;
    for (const region of this.pullOrder()) {
      if (received.length >= max || bytesLeft <= 0) break;
      const pulling = this.pullFrom(region, record, max - received.length, deadlineSeconds, bytesLeft);
      try {
        const part = region === this.regions.local ? await pulling : await withTimeout(pulling, REMOTE_PULL_TIMEOUT_MS);
        received.push(...part.received);
        bytesLeft -= part.bytes;
        if (part.nextDueUs !== undefined) nextDueUs = Math.min(nextDueUs ?? Infinity, part.nextDueUs);
      } catch (error) {
        if (region === this.regions.local || error instanceof ApiError) throw error;
        this.releaseLate(record, pulling);
      }
    }
    return { received, nextDueUs };
  }

  /**
   * A remote pull given up on may still lease messages when its answer comes: nobody got them,
   * so they are nacked at once instead of waiting for their leases to run out.
   */
  private releaseLate(record: SubscriptionRecord, pulling: Promise<{ received: ReceivedMessage[] }>): void {
    pulling
      .then(({ received }) =>
        received.length > 0
          ? this.modifyDeliveries(
              record,
              received.map((m) => m.ackId),
              0,
            )
          : undefined,
      )
      .catch(() => {}); // Unanswered or failed: the leases run out by themselves.
  }

  /**
   * Arms a wake-up on the subscription's topic in every usable region: it fires on a publish or
   * nack anywhere, or on a change of one of the topic's subscriptions. Fails if this region's
   * channel cannot be armed; other regions' failures only cost their wake-ups.
   */
  async armWaiter(record: SubscriptionRecord): Promise<Waiter> {
    const armed = await Promise.allSettled(
      this.regions.localFirst().map((region) => region.wakeups.arm(region.ctx.keys.wakeChannel(record.topicUid))),
    );
    const waiters = armed.flatMap((result) => (result.status === 'fulfilled' ? [result.value] : []));
    const local = armed[0];
    if (local?.status === 'rejected') {
      for (const waiter of waiters) waiter.cancel();
      throw local.reason;
    }
    if (waiters.length === 1) return waiters[0];
    return {
      woken: Promise.race(waiters.map((waiter) => waiter.woken)),
      cancel: () => {
        for (const waiter of waiters) waiter.cancel();
      },
    };
  }

  /**
   * With `enforceInTransit`, subscribing through a region outside the topic's allowed
   * persistence regions fails (reference §11).
   */
  async checkSubscribeRegion(record: SubscriptionRecord): Promise<void> {
    if (!this.regions.multiRegion) return;
    // A deleted topic has no policy left to enforce; any other failure to read it fails the call.
    const topic = await this.topics.read(parseResourceName('topics', record.topic)).catch((error: unknown) => {
      if (error instanceof ApiError && error.status === 'NOT_FOUND') return undefined;
      throw error;
    });
    if (topic?.uid !== record.topicUid) return;
    const policy = topic.messageStoragePolicy;
    if (policy?.enforceInTransit && !policy.allowedPersistenceRegions?.includes(this.regions.local.name)) {
      throw inTransitRefusal(topic, this.regions.local.name);
    }
  }

  /**
   * Where a publish is stored (reference §11): this endpoint's region, unless the topic's
   * messageStoragePolicy leaves it out; then the first allowed region that can be reached,
   * except for keyed messages (their order holds per region) and with enforceInTransit.
   */
  private storageRegion(topic: TopicRecord, orderingKey: string): Region {
    const local = this.regions.requireLocal();
    const policy = topic.messageStoragePolicy;
    const allowed = this.regions.multiRegion ? policy?.allowedPersistenceRegions : undefined;
    if (!allowed || allowed.includes(local.name)) return local;
    if (policy?.enforceInTransit) throw inTransitRefusal(topic, local.name);
    if (orderingKey) {
      throw failedPrecondition(
        `Cannot publish messages that contain ordering keys to topic ${topic.name} due a message storage policy on the topic that would require the messages to be forwarded to another region. Please either change the topic's message storage policy or publish to an allowed region using the appropriate regional Cloud Pub/Sub endpoint.`,
      );
    }
    const target = allowed.map((name) => this.regions.byName(name)).find((region) => region?.usable);
    if (!target)
      throw unavailable(`None of the topic's allowed persistence regions (${allowed.join(', ')}) can be reached.`);
    return target;
  }

  /**
   * The regions a pull looks in: usable ones, this region first. Every fourth pull starts with
   * a remote region in turn, so that a busy local backlog never starves the others.
   */
  private pullOrder(): Region[] {
    const order = this.regions.localFirst();
    if (order.length < 2 || ++this.pulls % 4 !== 0) return order;
    const remote = order.slice(1);
    const first = remote[(this.pulls / 4) % remote.length];
    return [first, ...order.filter((region) => region !== first)];
  }

  private async pullFrom(
    region: Region,
    record: SubscriptionRecord,
    max: number,
    deadlineSeconds: number | undefined,
    maxBytes: number,
  ) {
    const { ctx } = region;
    const data = ctx.keys.topicData(record.topicUid);
    const sub = data.subscription(record.uid);
    const deadlineUs = deadlineSeconds === undefined ? '' : deadlineSeconds * 1_000_000;
    const reply = (await ctx.scripts.run(
      'pull',
      [sub.config, sub.ready, sub.leased, data.bodies, sub.keyed, sub.keyedDeliveries, sub.keyStates],
      [ctx.clock.scriptTime(), max, deadlineUs, ctx.keys.wakeChannel(record.topicUid), maxBytes],
    )) as [number, number | '', number, ...(string | number)[]];
    // Not attached in this region: its topic was deleted there before the subscription came.
    if (reply[0] === -1) {
      if (region === this.regions.local || !this.regions.multiRegion) throw notFound(shortName(record.name));
      return { received: [], bytes: 0, nextDueUs: undefined };
    }
    const nextDueUs = typeof reply[1] === 'number' ? reply[1] : undefined;
    if (reply.length <= 3) return { received: [], bytes: 0, nextDueUs };
    const oldestKeptUs = reply[2];
    const seqs: string[] = [];
    const generations: number[] = [];
    for (let i = 3; i < reply.length; i += 2) {
      seqs.push(String(reply[i]));
      generations.push(Number(reply[i + 1]));
    }
    // Read outside the script: Redis copies a body straight into the reply from here.
    const bodies = await readBodies(ctx.redis, data, seqs);
    const codec = await this.options.ackIds();
    const received: LeasedMessage[] = [];
    const expired: string[] = [];
    let bytes = 0;
    for (let j = 0; j < seqs.length; j++) {
      const seq = seqs[j];
      const generation = generations[j];
      const body = bodies[j];
      if (!body) continue; // gone (its subscription or topic was deleted meanwhile)
      const stored = unpackMessage(body);
      // Older than the subscription's retention: dropped, never delivered (see pull.lua).
      if (stored.publishTimeUs < oldestKeptUs) {
        expired.push(`${seq}:${generation}`);
        continue;
      }
      bytes += body.length;
      const message: ReceivedMessage['message'] = {
        messageId: messageId(region.name, seq),
        publishTime: publishTimes.format(stored.publishTimeUs),
      };
      if (stored.data.length > 0) message.data = stored.data;
      if (stored.attributes) message.attributes = stored.attributes;
      if (stored.orderingKey) message.orderingKey = stored.orderingKey;
      received.push(
        new LeasedMessage(codec, { region: region.name, subscriptionUid: record.uid, seq, generation }, message),
      );
    }
    if (expired.length > 0) await this.acknowledgeMembers(region, record, expired);
    return { received, bytes, nextDueUs };
  }

  /**
   * Decodes ack IDs and runs one script per region over its distinct deliveries.
   * Exactly-once subscriptions get a per-ack-ID result: malformed, stale and expired IDs fail,
   * the valid ones still take effect, and a region that cannot be reached is a transient
   * failure of its IDs. Others ignore stale IDs, but a malformed ID refuses the whole request
   * before anything changes, and an unreachable region fails it after the others are applied.
   */
  private async settle(
    record: SubscriptionRecord,
    ackIds: string[],
    apply: (region: Region, members: string[]) => Promise<unknown>,
  ): Promise<SettleOutcome> {
    const exactlyOnce = record.enableExactlyOnceDelivery === true;
    const codec = await this.options.ackIds();
    const outcome: SettleOutcome = { applied: [], failures: new Map() };
    const byRegion = new Map<Region, Map<string, string>>();
    for (const ackId of ackIds) {
      const delivery = codec.decode(ackId);
      const region = delivery?.subscriptionUid === record.uid ? this.regions.byName(delivery.region) : undefined;
      if (delivery && region) {
        const memberOf = byRegion.get(region) ?? new Map<string, string>();
        byRegion.set(region, memberOf.set(ackId, leaseMember(delivery)));
      } else if (exactlyOnce) outcome.failures.set(ackId, 'PERMANENT_FAILURE_INVALID_ACK_ID');
      else throw invalidArgument(`Invalid ack ID: "${ackId.slice(0, 200)}" was not issued for ${record.name}.`);
    }
    let regionFailure: unknown;
    for (const [region, memberOf] of byRegion) {
      const members = [...new Set(memberOf.values())];
      let codes: number[];
      try {
        if (!region.usable) throw unavailable(`The message store of region ${region.name} cannot be reached.`);
        codes = (await apply(region, members)) as number[];
      } catch (error) {
        if (!exactlyOnce) regionFailure ??= error;
        else for (const ackId of memberOf.keys()) outcome.failures.set(ackId, 'TRANSIENT_FAILURE_OTHER');
        continue;
      }
      if (codes[0] === -1) {
        if (region === this.regions.local || !this.regions.multiRegion) throw notFound(shortName(record.name));
        codes = members.map(() => GONE);
      }
      const codeOf = new Map(members.map((member, i) => [member, codes[i]]));
      for (const [ackId, member] of memberOf) {
        const code = codeOf.get(member);
        if (code === APPLIED || (!exactlyOnce && code !== OUT_OF_ORDER)) outcome.applied.push(ackId);
        else if (code === OUT_OF_ORDER) outcome.failures.set(ackId, 'TRANSIENT_FAILURE_UNORDERED_ACK_ID');
        else outcome.failures.set(ackId, 'PERMANENT_FAILURE_INVALID_ACK_ID');
      }
    }
    if (regionFailure) throw regionFailure;
    return outcome;
  }

  private async readAttachments(region: Region, topicUid: string): Promise<Attachments> {
    const { redis, keys } = region.ctx;
    const data = keys.topicData(topicUid);
    const [version, attached] = await Promise.all([
      redis.hget(data.state, 'attachVersion'),
      redis.hgetall(data.attached),
    ]);
    // Sent in this order on one connection, the set read is at least as new as the version: if
    // it is newer, publish fails its version check and this is read again, so a stale pair is
    // never used to publish.
    const attachments: Attachments = {
      version: version ?? '0',
      subscriptions: Object.entries(attached).map(([uid, ordered]) => ({ uid, ordered: ordered === '1' })),
    };
    this.attachments.set(`${region.name}/${topicUid}`, attachments);
    return attachments;
  }
}

function inTransitRefusal(topic: TopicRecord, region: string): ApiError {
  const allowed = topic.messageStoragePolicy?.allowedPersistenceRegions ?? [];
  return failedPrecondition(
    `The message storage policy of topic ${topic.name} enforces its allowed persistence regions (${allowed.join(', ')}) in transit; region ${region} is not one of them. Use an endpoint of an allowed region.`,
  );
}

/**
 * Message IDs are the message's sequence in its topic incarnation, and in a deployment with
 * regions the region that stores it: "<region>-<seq>".
 */
function messageId(region: string, seq: number | string): string {
  return region ? `${region}-${seq}` : String(seq);
}

/** The region ('' without regions) and sequence of a message ID this broker issued (the bench counts by region). */
export function messageOrigin(id: string): { region: string; seq: number } {
  const dash = id.lastIndexOf('-');
  return { region: id.slice(0, Math.max(0, dash)), seq: Number(id.slice(dash + 1)) };
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

/**
 * Publish stamps in a row the script may refuse before the publish fails. A second stamp comes
 * from the time the refusing script returned, so only a clock stepped again meanwhile, or a call
 * that waited over 10 s on its way to Redis, is refused twice.
 */
const MAX_REFUSED_STAMPS = 3;

/** Topic records kept for publishing (see rememberTopic); past this, the longest kept is dropped. */
const MAX_REMEMBERED_TOPICS = 10_000;

/** Per-delivery result codes of the acknowledge and modify-ack-deadline scripts. */
const GONE = 0;
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

/**
 * The stored bodies of messages `seqs` (null where gone), in that order: one HMGET per run of
 * seqs in one body block (a pull's messages come in runs from few blocks), pipelined when there
 * are several; on Redis Cluster all on the topic's slot. A seq's digits name its block and field
 * (keys.ts).
 */
async function readBodies(redis: RedisClient, data: TopicKeys, seqs: string[]): Promise<(Buffer | null)[]> {
  const runs: { block: string; fields: string[] }[] = [];
  for (const seq of seqs) {
    const block = seq.slice(0, -BLOCK_FIELD_DIGITS);
    let run = runs.at(-1);
    if (run?.block !== block) runs.push((run = { block, fields: [] }));
    run.fields.push(seq.slice(-BLOCK_FIELD_DIGITS));
  }
  // One run (most pulls of a stream): one HMGET, without the cost of an ioredis pipeline.
  if (runs.length === 1) return redis.hmgetBuffer(data.bodyBlock(runs[0].block), ...runs[0].fields);
  const pipeline = redis.pipeline();
  for (const { block, fields } of runs) pipeline.hmgetBuffer(data.bodyBlock(block), ...fields);
  // exec() answers null only for a transaction whose WATCH failed; this is a plain pipeline.
  return (await pipeline.exec())!.flatMap(([error, values]) => {
    if (error) throw error;
    return values as (Buffer | null)[];
  });
}

const leaseMember = (delivery: Delivery) => `${delivery.seq}:${delivery.generation}`;

/** A publish's bodies as they go to Redis: staged (as body block fields) or in the script call. */
interface PackedPublish {
  bodies: BulkStrings;
  staged: boolean;
}

/**
 * Validates a publish request (reference §3) and packs the message bodies for storage, to be
 * staged when they reach `stageFromBytes`.
 */
function checkPublishRequest(messages: PubsubMessageBody[], stageFromBytes: number): PackedPublish {
  if (messages.length === 0) throw invalidArgument('The publish request must contain at least one message.');
  if (messages.length > MAX_PUBLISH_MESSAGES) {
    throw invalidArgument(
      `The publish request has ${messages.length} messages; at most ${MAX_PUBLISH_MESSAGES} are allowed.`,
    );
  }
  const orderingKeys = new Set(messages.map((message) => message.orderingKey ?? ''));
  if (orderingKeys.size > 1) {
    throw new ApiError(
      'FAILED_PRECONDITION',
      'In a single publish request, all messages must have no ordering key or they must all have the same ordering key.',
    );
  }
  let totalBytes = 0;
  let storedBytes = 0;
  const layouts = messages.map((message, index) => {
    const attributes = message.attributes ?? {};
    const attributeNames = Object.keys(attributes);
    const orderingKey = message.orderingKey ?? '';
    const stored = layoutMessage(message.data ?? '', attributes, orderingKey);
    if (!stored) throw invalidBase64(index);
    if (stored.dataBytes === 0 && attributeNames.length === 0) {
      throw invalidArgument(
        'One or more messages in the publish request is empty. Each message must contain either non-empty data, or at least one attribute.',
      );
    }
    if (attributeNames.length > MAX_ATTRIBUTES) {
      throw invalidArgument(
        `Message ${index} has ${attributeNames.length} attributes; at most ${MAX_ATTRIBUTES} are allowed.`,
      );
    }
    totalBytes += stored.dataBytes;
    for (const key of attributeNames) {
      const keyBytes = Buffer.byteLength(key);
      const valueBytes = Buffer.byteLength(attributes[key]);
      if (keyBytes === 0 || keyBytes > MAX_ATTRIBUTE_KEY_BYTES) {
        throw invalidArgument(`Message ${index}: attribute keys must be 1 to ${MAX_ATTRIBUTE_KEY_BYTES} bytes long.`);
      }
      if (valueBytes > MAX_ATTRIBUTE_VALUE_BYTES) {
        throw invalidArgument(
          `Message ${index}: the value of attribute "${key}" exceeds ${MAX_ATTRIBUTE_VALUE_BYTES} bytes.`,
        );
      }
      // Reserved in any case; the official clients' OpenTelemetry tracing sets googclient_traceparent.
      if (/^goog/i.test(key) && key !== 'googclient_traceparent') {
        throw invalidArgument(`Message ${index}: attribute key "${key}" uses the reserved prefix "goog".`);
      }
      totalBytes += keyBytes + valueBytes;
    }
    if (Buffer.byteLength(orderingKey) > MAX_ORDERING_KEY_BYTES) {
      throw invalidArgument(`Message ${index}: the ordering key exceeds ${MAX_ORDERING_KEY_BYTES} bytes.`);
    }
    totalBytes += Buffer.byteLength(orderingKey);
    storedBytes += stored.storedBytes;
    return stored;
  });
  if (totalBytes > MAX_PUBLISH_BYTES) {
    throw invalidArgument(`The publish request is ${totalBytes} bytes; the limit is ${MAX_PUBLISH_BYTES} bytes.`);
  }
  const staged = storedBytes >= stageFromBytes;
  const packed = packMessages(layouts, { asBlockFields: staged });
  if (!(packed instanceof BulkStrings)) throw invalidBase64(packed.invalidData);
  return { bodies: packed, staged };
}

/**
 * The publish script found the staged bodies missing: ioredis Cluster, retrying commands one by
 * one after a failover, sent the script before them. Nothing was stored, and a retry succeeds.
 */
function stagedBodiesMissing(error: unknown): never {
  if (error instanceof Error && error.message.includes(STAGED_BODIES_MISSING)) {
    throw unavailable('The publish could not be stored this time; retry it.');
  }
  throw error;
}
/** The error publish.lua answers when the staged bodies are not all there. */
const STAGED_BODIES_MISSING = 'the staged bodies are not all there';

const invalidBase64 = (index: number) => invalidArgument(`Message ${index}: "data" is not valid base64.`);
