import { alreadyExists, failedPrecondition, invalidArgument, notFound, unavailable } from '../errors.ts';
import { markCleanup } from '../redis/calls/control-plane.ts';
import { createSnapshot } from '../redis/calls/retention.ts';
import { longCallConnection } from '../redis/client.ts';
import { Scripts } from '../redis/scripts.ts';
import type { Authorizer } from './authorization.ts';
import type { CallContext } from './call-context.ts';
import type { ControlPlane } from './control-plane.ts';
import { DEFAULT_LIMITS, ResourceLimits } from './limits.ts';
import { formatTimestampUs } from './durations.ts';
import { checkUpdateMask, notImplemented, settleAll, settleMasked, storedSettings } from './fields.ts';
import { DELETED_TOPIC, parseResourceName, type ResourceName } from './names.ts';
import { type PageRequest, readNamePage } from './pagination.ts';
import {
  snapshotExpiresAtUs,
  dataOwnerTombstone,
  findRecord,
  isTombstone,
  newUid,
  type SnapshotRecord,
  type State,
  type TopicRecord,
} from './records.ts';
import type { Region, Regions } from './regions.ts';
import { SNAPSHOT_FIELDS, type SnapshotInput, type SnapshotSettings } from './snapshot-fields.ts';
import type { SubscriptionService } from './subscriptions.ts';
import { checkBodyName, type TopicService } from './topics.ts';

export interface Snapshot extends SnapshotSettings {
  name: string;
  topic: string;
  expireTime: string;
}

/** A CreateSnapshotRequest (the name is the URL's). */
export interface CreateSnapshotRequest {
  name?: string;
  subscription?: string;
  labels?: Record<string, string>;
  tags?: Record<string, string>;
}

/** An UpdateSnapshotRequest: the mask's paths are field names (lowerCamelCase). */
export interface UpdateSnapshotRequest {
  snapshot: SnapshotInput;
  updateMask: string[];
}

/** A snapshot lives at most seven days after its oldest message was published (Pub/Sub's rule). */
export const SNAPSHOT_MAX_LIFE_US = 7 * 24 * 3600 * 1_000_000;
/** A snapshot that would expire sooner than this is refused (FAILED_PRECONDITION), as in Pub/Sub. */
const SNAPSHOT_MIN_LIFE_US = 3600 * 1_000_000;
/** How long capturing a snapshot's script may run (about a microsecond per message it holds). */
const CAPTURE_TIMEOUT_MS = 300_000;

export function renderSnapshot(record: SnapshotRecord, liveTopic: TopicRecord | undefined): Snapshot {
  return {
    name: record.name,
    topic: liveTopic?.uid === record.topicUid ? record.topic : DELETED_TOPIC,
    expireTime: record.expireTime,
    ...storedSettings(SNAPSHOT_FIELDS, record),
  };
}

/**
 * Snapshots: a subscription's acknowledgement state, recorded so that any subscription of the
 * same topic can seek back to it (replay.ts). A snapshot is captured in every region's data
 * plane (create-snapshot.lua: the messages the subscription has not acknowledged, and the cut
 * after which everything published is the snapshot's too), then recorded in the control plane;
 * it expires seven days after its oldest message was published, and the janitor deletes it then.
 */
export class SnapshotService {
  constructor(
    private readonly regions: Regions,
    private readonly controlPlane: ControlPlane,
    private readonly topics: TopicService,
    private readonly subscriptions: SubscriptionService,
    private readonly authorizer: Authorizer,
    private readonly limits = new ResourceLimits(DEFAULT_LIMITS),
  ) {}

  async create(caller: CallContext, name: ResourceName, request: CreateSnapshotRequest): Promise<Snapshot> {
    checkBodyName(request.name, name);
    if (!request.subscription) throw invalidArgument('The snapshot needs a subscription (field "subscription").');
    if (request.tags && Object.keys(request.tags).length > 0) throw notImplemented('tags');
    const settings = settleAll(SNAPSHOT_FIELDS, { labels: request.labels }) as SnapshotSettings;
    const subscriptionName = parseResourceName('subscriptions', request.subscription);
    // Pub/Sub's rule: a grant on the project, and the right to consume the subscription.
    await this.authorizer.require(caller, 'pubsub.snapshots.create', `projects/${name.project}`);
    await this.authorizer.require(caller, 'pubsub.subscriptions.consume', subscriptionName.full);
    const subscription = await this.subscriptions.readForDelivery(subscriptionName);
    // Refused before anything is captured (the create itself checks again).
    const current = await this.controlPlane.readState(this.regions.arbiter(), 'snapshot', name.full);
    if (current && !isTombstone(JSON.parse(current) as State)) throw alreadyExists(name.id);
    const limit = this.limits.snapshot(name);
    await this.controlPlane.checkProjectLimit('snapshot', limit);
    const unusable = this.regions.all.find((region) => !region.usable);
    if (unusable) {
      throw unavailable(`The message store of region ${unusable.name} cannot be reached; retry creating the snapshot.`);
    }
    const uid = newUid();
    const ref = `${subscription.topicUid}/${uid}/${name.full}`;
    // Marked for clean-up in every region before anything is captured: a create that fails or
    // never finishes leaves nothing behind for good (ControlPlane.collectGarbage).
    for (const region of this.regions.all) {
      await markCleanup(region.ctx.scripts, region.ctx.keys, { time: region.ctx.clock.scriptTime(), ref });
    }
    try {
      let oldestUs: number | undefined;
      let atUs = 0;
      for (const region of this.regions.all) {
        const captured = await this.capture(region, subscription.topicUid, subscription.uid, uid);
        if (captured.oldestUs !== undefined) oldestUs = Math.min(oldestUs ?? captured.oldestUs, captured.oldestUs);
        atUs = Math.max(atUs, captured.atUs);
      }
      const expireUs = (oldestUs ?? atUs) + SNAPSHOT_MAX_LIFE_US;
      if (expireUs - atUs < SNAPSHOT_MIN_LIFE_US) {
        throw failedPrecondition(
          `The snapshot would expire in less than an hour: the oldest unacknowledged message of ${subscription.name} ` +
            'was published almost seven days ago.',
        );
      }
      const record = await this.controlPlane.create<SnapshotRecord>(
        'snapshot',
        name,
        (version) => ({
          name: name.full,
          topic: subscription.topic,
          topicUid: subscription.topicUid,
          uid,
          version,
          expireTime: formatTimestampUs(expireUs),
          ...settings,
          ...(subscription.filter !== undefined ? { filter: subscription.filter } : {}),
        }),
        limit,
      );
      return renderSnapshot(record, await this.topics.find(record.topic));
    } catch (error) {
      // Undone where it can be now; a region that fails here keeps the mark for the janitor.
      for (const region of this.regions.all) {
        try {
          await this.controlPlane.dropSnapshotData(region, subscription.topicUid, uid);
          await this.controlPlane.finishCleanup(region, ref);
        } catch {}
      }
      throw error;
    }
  }

  /** Records the subscription's state as the snapshot's in one region (one script, on a connection that waits for it). */
  private async capture(region: Region, topicUid: string, subscriptionUid: string, snapshotUid: string) {
    const { ctx } = region;
    // The snapshot keeps the topic's log from now on; its record's put marks the log for the
    // janitor (replay.ts), and a capture whose record never comes is dropped, which marks it too.
    const connection = longCallConnection(ctx.redis, CAPTURE_TIMEOUT_MS);
    try {
      const data = ctx.keys.topicData(topicUid);
      return await createSnapshot(new Scripts(connection), data, {
        time: ctx.clock.scriptTime(),
        subscriptionUid,
        snapshot: data.snapshot(snapshotUid),
        maxLifeUs: SNAPSHOT_MAX_LIFE_US,
      });
    } finally {
      connection.disconnect();
    }
  }

  /** The record of a snapshot, as this endpoint's region knows it. */
  async read(name: ResourceName): Promise<SnapshotRecord> {
    const record = await findRecord(this.regions, 'snapshots', name.full);
    if (!record) throw notFound(name.id);
    return record;
  }

  /** Every snapshot record this endpoint's region knows (background passes). */
  async all(): Promise<SnapshotRecord[]> {
    const { ctx } = this.regions.requireLocal();
    return (await ctx.redis.hvals(ctx.keys.snapshots)).map((json) => JSON.parse(json) as SnapshotRecord);
  }

  async get(caller: CallContext, name: ResourceName): Promise<Snapshot> {
    await this.authorizer.require(caller, 'pubsub.snapshots.get', name.full);
    const record = await this.read(name);
    return renderSnapshot(record, await this.topics.find(record.topic));
  }

  async update(caller: CallContext, name: ResourceName, request: UpdateSnapshotRequest): Promise<Snapshot> {
    await this.authorizer.require(caller, 'pubsub.snapshots.update', name.full);
    checkBodyName(request.snapshot.name, name);
    checkUpdateMask(SNAPSHOT_FIELDS, request.updateMask, 'UpdateSnapshotRequest');
    this.regions.requireLocal();
    const updated = await this.controlPlane.replace('snapshot', name, (record: SnapshotRecord, version) =>
      settleMasked(SNAPSHOT_FIELDS, { ...record, version }, request.updateMask, request.snapshot),
    );
    return renderSnapshot(updated, await this.topics.find(updated.topic));
  }

  /** Deletes the snapshot: what it held is let go in every region (control-plane.ts). */
  async delete(caller: CallContext, name: ResourceName): Promise<void> {
    await this.authorizer.require(caller, 'pubsub.snapshots.delete', name.full);
    this.regions.requireLocal();
    await this.controlPlane.replace('snapshot', name, (record: SnapshotRecord, version) =>
      dataOwnerTombstone(record, version),
    );
  }

  async list(
    caller: CallContext,
    project: string,
    page: PageRequest,
  ): Promise<{ snapshots?: Snapshot[]; nextPageToken?: string }> {
    await this.authorizer.require(caller, 'pubsub.snapshots.list', `projects/${project}`);
    const { keys, redis } = this.regions.requireLocal().ctx;
    const { names, nextPageToken } = await readNamePage(
      (min, max, count) => redis.zrangebylex(keys.snapshotIndex, min, max, 'LIMIT', 0, count),
      `projects/${project}/snapshots/`,
      page,
    );
    const records = (names.length ? await redis.hmget(keys.snapshots, ...names) : [])
      .filter((json): json is string => json !== null)
      .map((json) => JSON.parse(json) as SnapshotRecord);
    const liveTopics = await this.topics.findEach(records.map((record) => record.topic));
    const snapshots = records.map((record) => renderSnapshot(record, liveTopics.get(record.topic)));
    return { ...(snapshots.length ? { snapshots } : {}), ...(nextPageToken ? { nextPageToken } : {}) };
  }

  /** ListTopicSnapshots: the names of the topic's snapshots. */
  async listOfTopic(
    caller: CallContext,
    topic: ResourceName,
    page: PageRequest,
  ): Promise<{ snapshots?: string[]; nextPageToken?: string }> {
    await this.authorizer.require(caller, 'pubsub.topics.get', topic.full);
    const record = await this.topics.read(topic);
    const { redis, keys } = this.regions.local.ctx;
    const { names, nextPageToken } = await readNamePage(
      (min, max, count) => redis.zrangebylex(keys.topicSnapshots(record.uid), min, max, 'LIMIT', 0, count),
      'projects/',
      page,
    );
    return { ...(names.length ? { snapshots: names } : {}), ...(nextPageToken ? { nextPageToken } : {}) };
  }

  /** Deletes the snapshots whose expireTime has passed (unless changed meanwhile). Returns how many. */
  expire(nowUs: number): Promise<number> {
    return this.controlPlane.expireDue('snapshot', nowUs, (record: SnapshotRecord) => snapshotExpiresAtUs(record));
  }
}
