import { createHash } from 'node:crypto';
import { invalidArgument, notFound, unavailable } from '../errors.ts';
import {
  BACKLOG_STREAMS,
  type BacklogEntry,
  type BacklogPosition,
  type BacklogStream,
  countBacklog,
  readBacklog,
  type StoredState,
} from '../redis/calls/backlog.ts';
import { readBodies } from './bodies.ts';
import type { Authorizer } from './authorization.ts';
import type { CallContext } from './call-context.ts';
import { formatDuration, formatTimestampUs } from './durations.ts';
import { parseFilter } from './filter.ts';
import { type StoredMessage, unpackMessage } from './message-codec.ts';
import { messageId } from './message-ids.ts';
import type { ResourceName } from './names.ts';
import type { ReceivedMessage } from './pull.ts';
import type { Region, Regions } from './regions.ts';
import type { SubscriptionService } from './subscriptions.ts';
import type { TopicService } from './topics.ts';

/**
 * The queryable backlog (README.md, "Queryable backlog"): read-only views of what a subscription
 * holds and of a topic's stored messages. Nothing here changes a lease or counts as use of the
 * subscription (its activeAt stays): the scripts it runs write nothing.
 */

export const BACKLOG_STATES = ['AVAILABLE', 'LEASED', 'SCHEDULED', 'BACKOFF', 'FORWARDING'] as const;
export type BacklogState = (typeof BACKLOG_STATES)[number];

const STATE_OF: Record<StoredState, BacklogState> = {
  a: 'AVAILABLE',
  l: 'LEASED',
  s: 'SCHEDULED',
  b: 'BACKOFF',
  f: 'FORWARDING',
};

/** The streams (read-backlog.lua) that hold messages in each state: k holds every keyed one. */
const STREAMS_OF: Record<BacklogState, BacklogStream[]> = {
  AVAILABLE: ['r', 'k'],
  LEASED: ['l', 'k'],
  SCHEDULED: ['d', 'k'],
  BACKOFF: ['d', 'k'],
  FORWARDING: ['f', 'k'],
};

export interface ListBacklogRequest {
  /** Only messages in these states; every state when empty. */
  states: BacklogState[];
  /** Only messages with this ordering key ('' for no such condition). */
  orderingKey: string;
  /** A Pub/Sub filter on attributes ('' for none). */
  filter: string;
  /** Only messages published at or after this time (µs). */
  publishTimeStartUs?: number;
  /** Only messages published before this time (µs). */
  publishTimeEndUs?: number;
  pageSize: number;
  pageToken: string;
  /** Without data (BASIC) or with it (FULL). */
  view: 'BASIC' | 'FULL';
}

export interface BacklogMessage {
  message: ReceivedMessage['message'];
  state: BacklogState;
  /** Deliveries so far (a leased message's current one included). */
  deliveryAttempt: number;
  leaseExpireTime?: string;
  deliveryTime?: string;
  backoffEndTime?: string;
}

export interface BacklogPage {
  messages: BacklogMessage[];
  nextPageToken?: string;
  /** Entries the scripts examined for this page (its cost; not part of the REST answer). */
  examined: number;
}

export interface BacklogCounts {
  /** Every message the subscription has not acknowledged. */
  unackedMessageCount: number;
  leasedMessageCount: number;
  forwardingMessageCount: number;
  /** The others: available, scheduled for later, or waiting out a retry backoff. */
  waitingMessageCount: number;
  /** The publish time of the oldest un-acknowledged message (absent when there is none). */
  oldestUnackedPublishTime?: string;
  /** How long ago that was, by the clock of the store that holds it. */
  oldestUnackedMessageAge?: string;
}

/** Where a page token goes on: a region, and a position in its streams. */
interface Cursor {
  region: string;
  position?: BacklogPosition;
}

const TOKEN_VERSION = 1;

export class BacklogService {
  constructor(
    private readonly regions: Regions,
    private readonly subscriptions: SubscriptionService,
    private readonly topics: TopicService,
    private readonly authorizer: Authorizer,
  ) {}

  /**
   * One page of a subscription's unacknowledged messages, region by region (in name order), and
   * in each by stream and position (read-backlog.lua). A page reads at most `pageSize` stored
   * entries (and about as many again to find where the last one ended), so its cost does not grow
   * with the backlog; conditions on bodies (attributes, ordering key, publish time) are checked
   * after, so a page may hold fewer messages than `pageSize` and still have a next page.
   */
  async list(caller: CallContext, name: ResourceName, request: ListBacklogRequest): Promise<BacklogPage> {
    // The messages themselves: for those who may receive them.
    await this.authorizer.require(caller, 'pubsub.subscriptions.consume', name.full);
    const record = await this.subscriptions.readForDelivery(name);
    const filter = parseFilter(request.filter);
    const states = new Set<BacklogState>(request.states.length > 0 ? request.states : BACKLOG_STATES);
    // On an ordered subscription every message with an ordering key is in the keyed set, and
    // the key's messages are one range of it.
    const onlyKeyed = request.orderingKey !== '' && record.enableMessageOrdering === true;
    const streams = onlyKeyed
      ? (['k'] as BacklogStream[])
      : BACKLOG_STREAMS.filter((stream) => [...states].some((state) => STREAMS_OF[state].includes(stream)));
    const query = queryFingerprint(record.uid, [...states].sort(), request);
    const usable = this.regions.all.filter((region) => region.usable);
    let cursor = request.pageToken === '' ? undefined : decodeToken(request.pageToken, query, streams);
    let at = 0;
    if (cursor) {
      const region = this.regions.byName(cursor.region);
      if (!region) throw invalidArgument('Invalid pageToken.');
      if (!region.usable) throw unavailable(`The message store of region ${region.name} cannot be reached.`);
      at = usable.indexOf(region);
    }
    const messages: BacklogMessage[] = [];
    let examined = 0;
    for (; at < usable.length; at++) {
      const region = usable[at];
      const budget = request.pageSize - examined;
      if (budget <= 0) {
        cursor = { region: region.name };
        break;
      }
      const data = region.ctx.keys.topicData(record.topicUid);
      const read = await readBacklog(region.ctx.scripts, data.subscription(record.uid), {
        streams,
        after: cursor?.region === region.name ? cursor.position : undefined,
        budget,
        orderingKey: onlyKeyed ? request.orderingKey : '',
      });
      cursor = undefined;
      // Not attached in this region: its topic was deleted there before the subscription came.
      if (read.kind === 'no-subscription') {
        if (region === this.regions.local || !this.regions.multiRegion) throw notFound(name.id);
        continue;
      }
      examined += read.examined;
      const wanted = read.entries.filter((entry) => states.has(STATE_OF[entry.state]));
      // Read outside the script, as a pull does; a body acknowledged away meanwhile is left out.
      const bodies =
        wanted.length > 0
          ? await readBodies(
              region.ctx.redis,
              data,
              wanted.map((e) => e.seq),
            )
          : [];
      for (let i = 0; i < wanted.length; i++) {
        const body = bodies[i];
        if (!body) continue;
        const stored = unpackMessage(body);
        if (request.orderingKey !== '' && (stored.orderingKey ?? '') !== request.orderingKey) continue;
        if (request.publishTimeStartUs !== undefined && stored.publishTimeUs < request.publishTimeStartUs) continue;
        if (request.publishTimeEndUs !== undefined && stored.publishTimeUs >= request.publishTimeEndUs) continue;
        if (filter && !filter.matches(stored.attributes)) continue;
        const message = renderMessage(messageId(region.name, wanted[i].seq), stored, request.view === 'FULL');
        messages.push(backlogMessage(message, wanted[i]));
      }
      if (read.next) {
        cursor = { region: region.name, position: read.next };
        break;
      }
    }
    const page: BacklogPage = { messages, examined };
    if (cursor) page.nextPageToken = encodeToken(query, cursor);
    return page;
  }

  /**
   * How many messages the subscription has not acknowledged, and how many of them are leased or
   * being forwarded, over every usable region: from the sizes of its structures (count-backlog.lua);
   * and the oldest of them, from its holds.
   */
  async counts(caller: CallContext, name: ResourceName): Promise<BacklogCounts> {
    await this.authorizer.require(caller, 'pubsub.subscriptions.get', name.full);
    const record = await this.subscriptions.readForDelivery(name);
    const counts: BacklogCounts = {
      unackedMessageCount: 0,
      leasedMessageCount: 0,
      forwardingMessageCount: 0,
      waitingMessageCount: 0,
    };
    let oldest: { publishedUs: number; ageUs: number } | undefined;
    for (const region of this.regions.localFirst()) {
      const data = region.ctx.keys.topicData(record.topicUid);
      const { nowUs, counts: found } = await countBacklog(
        region.ctx.scripts,
        data,
        [data.subscriptionPrefix(record.uid)],
        region.ctx.clock.scriptTime(),
      );
      const counted = found[0];
      if (counted === 'no-subscription') {
        if (region === this.regions.local || !this.regions.multiRegion) throw notFound(name.id);
        continue;
      }
      counts.unackedMessageCount += counted.unacked;
      counts.leasedMessageCount += counted.leased;
      counts.forwardingMessageCount += counted.forwarding;
      counts.waitingMessageCount += counted.unacked - counted.leased - counted.forwarding;
      if (counted.oldestUs !== undefined && (!oldest || counted.oldestUs < oldest.publishedUs)) {
        oldest = { publishedUs: counted.oldestUs, ageUs: Math.max(0, nowUs - counted.oldestUs) };
      }
    }
    if (oldest) {
      counts.oldestUnackedPublishTime = formatTimestampUs(oldest.publishedUs);
      counts.oldestUnackedMessageAge = formatDuration(oldest.ageUs / 1_000_000);
    }
    return counts;
  }

  /** A message of the topic, as long as its body is stored (a subscription or the log holds it). */
  async message(caller: CallContext, topicName: ResourceName, id: string): Promise<ReceivedMessage['message']> {
    // A topic's messages are for those who may receive them through a subscription of their own.
    await this.authorizer.require(caller, 'pubsub.topics.attachSubscription', topicName.full);
    const topic = await this.topics.read(topicName);
    const { region, seq } = this.parseMessageId(id);
    const [body] = await readBodies(region.ctx.redis, region.ctx.keys.topicData(topic.uid), [seq]);
    if (!body) throw notFound(id);
    return renderMessage(id, unpackMessage(body), true);
  }

  /** The region and seq a message ID names (message-ids.ts); INVALID_ARGUMENT for no ID this broker issues. */
  private parseMessageId(id: string): { region: Region; seq: string } {
    const match = /^(?:(.+)-)?([1-9]\d{3,15})$/.exec(id);
    const region = match && this.regions.byName(match[1] ?? '');
    if (!match || !region) {
      throw invalidArgument(
        `Invalid message ID: "${id}". Message IDs are ` +
          (this.regions.multiRegion ? '"<region>-<number>", with a region of this deployment.' : 'numbers.'),
      );
    }
    if (!region.usable) throw unavailable(`The message store of region ${region.name} cannot be reached.`);
    return { region, seq: match[2] };
  }
}

/** A stored message as a received one is written (pull.ts), its data only when asked for. */
function renderMessage(id: string, stored: StoredMessage, withData: boolean): ReceivedMessage['message'] {
  const message: ReceivedMessage['message'] = { messageId: id, publishTime: formatTimestampUs(stored.publishTimeUs) };
  if (withData && stored.data.length > 0) message.data = stored.data;
  if (stored.attributes) message.attributes = stored.attributes;
  if (stored.orderingKey) message.orderingKey = stored.orderingKey;
  return message;
}

function backlogMessage(message: ReceivedMessage['message'], entry: BacklogEntry): BacklogMessage {
  const state = STATE_OF[entry.state];
  const item: BacklogMessage = { message, state, deliveryAttempt: entry.attempts };
  if (entry.timeUs !== undefined) {
    const time = formatTimestampUs(entry.timeUs);
    if (state === 'LEASED') item.leaseExpireTime = time;
    else if (state === 'SCHEDULED') item.deliveryTime = time;
    else if (state === 'BACKOFF') item.backoffEndTime = time;
  }
  return item;
}

/**
 * What a page token belongs to: the subscription incarnation and the conditions. A token of
 * another query would go on at a position of streams it does not read.
 */
function queryFingerprint(subscriptionUid: string, states: BacklogState[], request: ListBacklogRequest): string {
  const conditions = [
    subscriptionUid,
    states,
    request.orderingKey,
    request.filter,
    request.publishTimeStartUs ?? null,
    request.publishTimeEndUs ?? null,
  ];
  return createHash('sha256').update(JSON.stringify(conditions)).digest('base64url').slice(0, 16);
}

/** base64url of JSON [version, query, region, stream, a, b]: opaque to clients. */
function encodeToken(query: string, cursor: Cursor): string {
  const { stream = '', a = '', b = '' } = cursor.position ?? {};
  return Buffer.from(JSON.stringify([TOKEN_VERSION, query, cursor.region, stream, a, b])).toString('base64url');
}

function decodeToken(token: string, query: string, streams: BacklogStream[]): Cursor {
  let fields: unknown;
  try {
    fields = JSON.parse(Buffer.from(token, 'base64url').toString('utf8'));
  } catch {
    throw invalidArgument('Invalid pageToken.');
  }
  if (
    !Array.isArray(fields) ||
    fields.length !== 6 ||
    fields[0] !== TOKEN_VERSION ||
    !fields.slice(1).every((field) => typeof field === 'string') ||
    Buffer.from(JSON.stringify(fields)).toString('base64url') !== token
  ) {
    throw invalidArgument('Invalid pageToken.');
  }
  const [, tokenQuery, region, stream, a, b] = fields as [number, string, string, string, string, string];
  if (tokenQuery !== query) {
    throw invalidArgument('Invalid pageToken: it was issued for other conditions or another subscription.');
  }
  if (stream === '') return { region };
  if (!streams.includes(stream as BacklogStream) || !validPosition(stream as BacklogStream, a, b)) {
    throw invalidArgument('Invalid pageToken.');
  }
  return { region, position: { stream: stream as BacklogStream, a, b } };
}

/** A position read-backlog.lua can go on from (a token is the client's to tamper with). */
function validPosition(stream: BacklogStream, a: string, b: string): boolean {
  if (stream === 'k') return b === '';
  if (stream === 'r') return a === '' ? b === '' || /^-?\d+$/.test(b) : /^\d+$/.test(b);
  return (a === '' && b === '') || (/^\d+$/.test(a) && b !== '');
}
