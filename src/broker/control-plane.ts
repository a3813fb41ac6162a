import { randomBytes } from 'node:crypto';
import {
  attachSubscription,
  type DataOwnerKind,
  deleteTopicData,
  dropSubscription,
  finishCleanup,
  markCleanup,
  type PutStateCall,
  type PutStateResult,
  putDataOwner,
  putProjectPolicy,
  putTopic,
  rescheduleExpiry,
} from '../redis/calls/control-plane.ts';
import { dropSnapshot, markLog } from '../redis/calls/retention.ts';
import { alreadyExists, notFound } from '../errors.ts';
import { deliveryConfigOf } from './fields.ts';
import type { ResourceName } from './names.ts';
import type { Region, Regions } from './regions.ts';
import { SUBSCRIPTION_FIELDS } from './subscription-fields.ts';
import { topicRetentionUs } from './topic-fields.ts';
import {
  dataOwnerTombstone,
  expirationTtlUs,
  isTombstone,
  type ProjectPolicyRecord,
  type SnapshotRecord,
  snapshotExpiresAtUs,
  type State,
  type SubscriptionRecord,
  type Tombstone,
  type TopicRecord,
  versionOf,
} from './records.ts';
import type { CreateLimit } from './limits.ts';
import { CONFIG_CHANGED } from './wakeups.ts';
import { localNowUs } from './clock.ts';
import { Rerun } from './rerun.ts';

/**
 * Topics, subscriptions and snapshots are global: every region's Redis holds a full copy of the control
 * plane. Each name has one state per region: a record, a tombstone (deleted), or nothing; each
 * state carries a version, and a copy only ever moves to a higher one.
 *
 * - A write is decided at the arbiter (the first usable region in name order) by a
 *   compare-and-set against the state the caller read, then copied to every other connected
 *   region before the call returns.
 * - A region that was away catches up by a sync (anti-entropy): every name's highest state is
 *   copied to the regions that hold an older one. A node syncs each region when its connection
 *   to it (re)opens, before it uses that region's data plane, and every SYNC_INTERVAL_MS; the
 *   periodic one compares the records only if some region's store changed since the last sync
 *   that completed (its count of puts, `control-changes`, or its identity, `store-id`, moved).
 *
 * Putting a state also does what the state implies in that region's data plane: a subscription
 * record attaches the subscription to its topic there, a tombstone or a detached record drops
 * its data, a topic tombstone closes the topic's data to publishing, and a snapshot tombstone
 * lets go of what the snapshot held (its data is captured before its record is written:
 * snapshots.ts).
 *
 * Projects are not created: a project's state is its IAM policy (authorization.ts), written by
 * `upsert`, and it has no data-plane effect.
 */
export type Kind = 'topic' | DataOwnerKind | 'project';
type ControlRecord = TopicRecord | SubscriptionRecord | SnapshotRecord;

interface PutResult {
  applied: boolean;
  /** The state the put found in that region (replaced, if it applied). */
  current: string;
  /** A create refused for a limit: the project's or the topic's. */
  full?: 'project' | 'topic';
}

/** What a put that did not apply tells the caller. */
function unapplied(put: Exclude<PutStateResult, { kind: 'written' }>): PutResult {
  return put.kind === 'full'
    ? { applied: false, current: '', full: put.scope }
    : { applied: false, current: put.current };
}

/** Periodic sync: heals regions that missed a write without losing their connection. */
const SYNC_INTERVAL_MS = 30_000;
/** How many held entries one drop-subscription call releases (bounds the script's run time). */
const DROP_BATCH = 1000;
/** The expiration pass reads this many due entries of an expiry index at a time. */
const EXPIRY_BATCH = 200;
/** How many blocks of held messages (up to 1000 each) one drop-snapshot call releases. */
const DROP_SNAPSHOT_BATCH = 2;

/** The same order as may_put in prelude.lua: higher version, then the greater JSON. */
function supersedes(candidate: string, current: string): boolean {
  if (candidate === current || candidate === '') return false;
  if (current === '') return true;
  const [a, b] = [versionOf(candidate), versionOf(current)];
  if (a !== b) return a > b;
  return Buffer.compare(Buffer.from(candidate), Buffer.from(current)) > 0;
}

const dataRef = (record: { topicUid: string; uid: string; name: string }) =>
  `${record.topicUid}/${record.uid}/${record.name}`;

/** What a put-topic or put-data-owner call writes: `state` in place of `expected` ('cas') or of anything older ('newer'). */
function stateCall(state: State, mode: 'cas' | 'newer', expected: string, limit?: CreateLimit): PutStateCall {
  return {
    mode,
    expected,
    name: state.name,
    json: JSON.stringify(state),
    version: state.version,
    tombstone: isTombstone(state),
    limits: limit?.counts,
  };
}

export class ControlPlane {
  /** Bumped whenever a region's connection opens or closes: a sync only vouches for the epoch it saw. */
  private readonly epochs = new Map<Region, number>();
  private readonly syncs = new Rerun(
    () => this.syncLogged(),
    () => this.stopped,
  );
  /** A sync that compares every record is asked for (not only the periodic one). */
  private fullSyncAsked = false;
  /** Each region's store as the last sync that completed in it read it first (changeMark). */
  private readonly syncedMarks = new Map<Region, string>();
  private timer?: NodeJS.Timeout;
  private stopped = false;

  constructor(
    private readonly regions: Regions,
    private readonly log: (message: string) => void = () => {},
  ) {}

  /** Keeps every region in step: a sync now, whenever a connection (re)opens, and periodically. */
  start(): void {
    if (!this.regions.multiRegion) return;
    for (const region of this.regions.all) {
      this.epochs.set(region, 0);
      region.ctx.redis.on('close', () => this.markStale(region));
      region.ctx.redis.on('ready', () => {
        this.markStale(region);
        void this.requestSync();
      });
    }
    void this.requestSync();
    this.timer = setInterval(() => void this.requestSync(false), SYNC_INTERVAL_MS);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.syncs.settled();
  }

  /**
   * Runs a sync unless one is running (then one more runs after it). Failures are retried by the
   * next request. `full` false (the periodic one): it compares the records only if some region's
   * store changed since the last sync that completed in it, or a region is not synced.
   */
  requestSync(full = true): Promise<void> {
    if (full) this.fullSyncAsked = true;
    return this.syncs.request();
  }

  private async syncLogged(): Promise<void> {
    const full = this.fullSyncAsked;
    this.fullSyncAsked = false;
    try {
      await this.sync(full);
    } catch (error) {
      this.fullSyncAsked = true;
      this.log(`control-plane sync failed: ${(error as Error).message}`);
      // A connection that is up but failing still needs one: try again shortly.
      if (!this.stopped) setTimeout(() => void this.requestSync(), 1_000).unref();
    }
  }

  /** The region may lack a write: unusable until a sync that starts after this one completes. */
  private markStale(region: Region): void {
    this.epochs.set(region, (this.epochs.get(region) ?? 0) + 1);
    region.synced = false;
    this.syncedMarks.delete(region);
  }

  /** A name's state in one region: its record JSON, its tombstone JSON, or ''. */
  async readState(region: Region, kind: Kind, name: string): Promise<string> {
    const [records, tombstones] = this.hashes(region, kind);
    const [record, tombstone] = await Promise.all([
      region.ctx.redis.hget(records, name),
      tombstones === undefined ? null : region.ctx.redis.hget(tombstones, name),
    ]);
    return record ?? tombstone ?? '';
  }

  /**
   * Writes what `decide` makes of a name's state at the arbiter (undefined: none yet) for the
   * next version, decided again whenever that state changed meanwhile: project policies, which
   * exist without being created.
   */
  async upsert(
    kind: 'project',
    name: string,
    decide: (current: ProjectPolicyRecord | undefined, version: number) => ProjectPolicyRecord,
  ): Promise<ProjectPolicyRecord> {
    for (;;) {
      const arbiter = this.regions.arbiter();
      const json = await this.readState(arbiter, kind, name);
      const next = decide(json ? (JSON.parse(json) as ProjectPolicyRecord) : undefined, versionOf(json) + 1);
      if ((await this.write(kind, arbiter, json, next)) === 'written') return next;
    }
  }

  /**
   * Creates a name: the record `build` makes (for the version after the name's current state)
   * is written unless the name holds a live record at the arbiter, or a write decided elsewhere
   * at the same time meets this one; both are ALREADY_EXISTS. With `limit`, the count it bounds
   * is checked in the script that does the compare-and-set at the arbiter, so concurrent creates
   * never pass it (RESOURCE_EXHAUSTED); only two nodes that disagree on the arbiter at that
   * moment could each add one.
   */
  async create<T extends ControlRecord>(
    kind: Kind,
    name: ResourceName,
    build: (version: number) => T | Promise<T>,
    limit?: CreateLimit,
  ): Promise<T> {
    for (;;) {
      const arbiter = this.regions.arbiter();
      const current = await this.readState(arbiter, kind, name.full);
      if (current && !isTombstone(JSON.parse(current) as State)) throw alreadyExists(name.id);
      const record = await build(versionOf(current) + 1);
      const outcome = await this.write(kind, arbiter, current, record, limit);
      if (outcome === 'written') return record;
      if (outcome === 'conflict') throw alreadyExists(name.id);
      if (outcome !== 'changed') throw limit!.refusal(outcome === 'project-full' ? 'project' : 'topic');
    }
  }

  /**
   * Throws `limit`'s refusal if the project holds as many names of the kind as it allows at the
   * arbiter: a create that does costly work first (a snapshot's capture) is refused before it.
   * The create itself decides.
   */
  async checkProjectLimit(kind: Kind, limit: CreateLimit): Promise<void> {
    const arbiter = this.regions.arbiter();
    const { keys, redis } = arbiter.ctx;
    const index =
      kind === 'topic' ? keys.topicIndex : kind === 'snapshot' ? keys.snapshotIndex : keys.subscriptionIndex;
    const { projectPrefix, perProject } = limit.counts;
    // The same range as prefix_full in prelude.lua: resource names are ASCII, all below \xff.
    const count = await redis.zlexcount(index, `[${projectPrefix}`, `(${projectPrefix}\xff`);
    if (count >= perProject) throw limit.refusal('project');
  }

  /**
   * Replaces a live record (NOT_FOUND if there is none at the arbiter) with what `change` makes
   * of it for the next version: an updated record or a tombstone, or undefined when the record
   * is already as asked (nothing is written). Decided again whenever the state at the arbiter
   * changed meanwhile.
   */
  async replace<T extends ControlRecord, S extends State>(
    kind: Kind,
    name: ResourceName,
    change: (record: T, version: number) => S | undefined,
  ): Promise<S | T> {
    for (;;) {
      const arbiter = this.regions.arbiter();
      const json = await this.readState(arbiter, kind, name.full);
      const state = json ? (JSON.parse(json) as State) : undefined;
      if (!state || isTombstone(state)) throw notFound(name.id);
      const next = change(state as T, versionOf(json) + 1);
      if (!next) return state as T;
      if ((await this.write(kind, arbiter, json, next)) === 'written') return next;
    }
  }

  /**
   * Writes a state the caller decided on from `expected`, the state it read at `arbiter`, and
   * copies it to every other connected region (those that cannot take it now get it from their
   * next sync). The outcome:
   *   'written'   done;
   *   'changed'   the state at the arbiter changed meanwhile: read again and decide again;
   *   'conflict'  written, but a region holds a different state of the same version: a write
   *               decided at another arbiter at the same time (two nodes disagreed on the first
   *               usable region, e.g. while it was coming back). Copies settle on one of the two
   *               (the greater JSON); the caller reports a create as ALREADY_EXISTS and decides
   *               an update or delete again;
   *   'project-full', 'topic-full'  a create refused at the arbiter: `limit` reached.
   */
  async write(
    kind: Kind,
    arbiter: Region,
    expected: string,
    state: State,
    limit?: CreateLimit,
  ): Promise<'written' | 'changed' | 'conflict' | 'project-full' | 'topic-full'> {
    const decided = await this.put(kind, arbiter, state, 'cas', expected, limit);
    if (decided.full) return `${decided.full}-full`;
    if (!decided.applied) return 'changed';
    const json = JSON.stringify(state);
    const others = this.regions.all.filter((region) => region !== arbiter && region.reachable);
    const copies = await Promise.all(
      others.map((region) =>
        this.put(kind, region, state, 'newer').catch((error: Error) => {
          this.log(`copy of ${state.name} to region ${region.name} failed (${error.message}); it syncs later`);
          this.markStale(region);
          void this.requestSync();
          return { applied: false, current: json };
        }),
      ),
    );
    const concurrent = copies.some(
      ({ applied, current }) => !applied && current !== json && versionOf(current) === state.version,
    );
    return concurrent ? 'conflict' : 'written';
  }

  /**
   * Deletes the subscriptions or snapshots that have expired, looking only at those whose entry in
   * the kind's expiry index (in this endpoint's region's copy) is due by `nowUs`: `expiresAtUs`
   * says when a record expires (undefined: never). An expired one is deleted if its state at the
   * arbiter is still the one judged (a change meanwhile keeps it); any other is indexed again at
   * the time it may expire, and one whose delete lost at the next pass. Returns how many it deleted.
   */
  async expireDue<T extends SubscriptionRecord | SnapshotRecord>(
    kind: DataOwnerKind,
    nowUs: number,
    expiresAtUs: (record: T) => number | undefined | Promise<number | undefined>,
  ): Promise<number> {
    const { redis, keys, scripts } = this.regions.requireLocal().ctx;
    const [records] = this.hashes(this.regions.local, kind);
    const index = kind === 'subscription' ? keys.subscriptionExpiries : keys.snapshotExpiries;
    const judged = new Set<string>();
    let deleted = 0;
    for (;;) {
      const names = (await redis.zrangebyscore(index, '-inf', nowUs, 'LIMIT', 0, EXPIRY_BATCH)).filter(
        (name) => !judged.has(name),
      );
      // Every entry judged in this pass was moved past now or removed, unless a put raced it.
      if (names.length === 0) return deleted;
      const jsons = await redis.hmget(records, ...names);
      for (const [i, name] of names.entries()) {
        judged.add(name);
        const json = jsons[i] ?? '';
        const record = json === '' ? undefined : (JSON.parse(json) as T);
        const atUs = record && (await expiresAtUs(record));
        if (record && atUs !== undefined && atUs <= nowUs && (await this.deleteIfUnchanged(kind, record, json))) {
          deleted++;
          continue;
        }
        const dueUs = atUs === undefined ? undefined : Math.max(atUs, nowUs + 1);
        await rescheduleExpiry(scripts, keys, kind, { name, judged: json, dueUs });
      }
    }
  }

  /** Deletes a record whose state at the arbiter is still `json`; false when it changed, or another put won. */
  private async deleteIfUnchanged(
    kind: DataOwnerKind,
    record: SubscriptionRecord | SnapshotRecord,
    json: string,
  ): Promise<boolean> {
    const arbiter = this.regions.arbiter();
    if ((await this.readState(arbiter, kind, record.name)) !== json) return false;
    const tombstone = dataOwnerTombstone(record, versionOf(json) + 1);
    return (await this.write(kind, arbiter, json, tombstone)) === 'written';
  }

  /** Drops subscription data (a deleted subscription's, or an interrupted attach's) in one region. */
  async dropData(region: Region, topicUid: string, subscriptionUid: string): Promise<void> {
    const { keys, scripts } = region.ctx;
    const data = keys.topicData(topicUid);
    let remaining: number;
    do {
      remaining = await dropSubscription(scripts, data, { subscriptionUid, batch: DROP_BATCH });
    } while (remaining !== 0);
    // It may have retained acked messages: the log is looked at without it.
    await markLog(scripts, keys, { time: region.ctx.clock.scriptTime(), topicUid });
  }

  /** Lets go of a snapshot's data (what it holds, and its hold on the log) in one region. */
  async dropSnapshotData(region: Region, topicUid: string, snapshotUid: string): Promise<void> {
    const { keys, scripts } = region.ctx;
    const data = keys.topicData(topicUid);
    const snapshot = data.snapshot(snapshotUid);
    while ((await dropSnapshot(scripts, data, { snapshot, batch: DROP_SNAPSHOT_BATCH })) !== 0) {}
    // The log is looked at without what the snapshot kept.
    await markLog(scripts, keys, { time: region.ctx.clock.scriptTime(), topicUid });
  }

  /** Drops the data of a subscription or a snapshot in one region. */
  dropOwnerData(region: Region, kind: DataOwnerKind, topicUid: string, uid: string): Promise<void> {
    return kind === 'subscription'
      ? this.dropData(region, topicUid, uid)
      : this.dropSnapshotData(region, topicUid, uid);
  }

  /**
   * Drops data marked for clean-up longer than `olderThanUs` ago in every usable region: deleted
   * subscriptions and snapshots whose drop was interrupted, attaches whose record never got
   * written, snapshots captured for a create that never finished. Returns how many it dropped.
   */
  async collectGarbage(olderThanUs: number): Promise<number> {
    let dropped = 0;
    for (const region of this.regions.localFirst()) {
      const { redis, keys } = region.ctx;
      const refs = await redis.zrangebyscore(keys.pendingCleanups, '-inf', olderThanUs, 'LIMIT', 0, 100);
      for (const ref of refs) {
        const [topicUid, uid] = ref.split('/', 2);
        const name = ref.slice(topicUid.length + uid.length + 2);
        const kind: DataOwnerKind = /^projects\/[^/]+\/snapshots\//.test(name) ? 'snapshot' : 'subscription';
        // A record of that very incarnation came (back) meanwhile: its data is live, keep it,
        // unless the record is detached (a detach interrupted before its drop finished).
        const [records] = this.hashes(region, kind);
        const live = name
          ? (JSON.parse((await redis.hget(records, name)) ?? 'null') as SubscriptionRecord | SnapshotRecord | null)
          : null;
        if (!live || live.uid !== uid || ('detached' in live && live.detached)) {
          await this.dropOwnerData(region, kind, topicUid, uid);
          dropped++;
        }
        await this.finishCleanup(region, ref);
      }
    }
    return dropped;
  }

  async finishCleanup(region: Region, ref: string): Promise<void> {
    await finishCleanup(region.ctx.scripts, region.ctx.keys, { ref });
  }

  /**
   * Puts one state into one region with its data-plane effects. 'cas' applies only if the state
   * there is `expected`; 'newer' only if it is newer than the state there. Returns whether it
   * applied, and the state it found there.
   */
  private async put(
    kind: Kind,
    region: Region,
    state: State,
    mode: 'cas' | 'newer',
    expected = '',
    limit?: CreateLimit,
  ): Promise<PutResult> {
    const call = stateCall(state, mode, expected, limit);
    if (kind === 'topic') return this.putTopic(region, state as TopicRecord | Tombstone, call);
    if (kind === 'project') {
      const put = await putProjectPolicy(region.ctx.scripts, region.ctx.keys, call);
      return put.kind === 'written' ? { applied: true, current: put.previous } : unapplied(put);
    }
    if (kind === 'snapshot') return this.putSnapshot(region, state as SnapshotRecord | Tombstone, call);
    return this.putSubscription(region, state as SubscriptionRecord | Tombstone, call);
  }

  /**
   * A snapshot's data is captured in every region before its record is written (snapshots.ts);
   * a put that ends a record (a tombstone, or another incarnation of the name) lets go of the
   * ended one's data here.
   */
  private async putSnapshot(region: Region, state: SnapshotRecord | Tombstone, call: PutStateCall): Promise<PutResult> {
    const { keys, scripts, clock } = region.ctx;
    const topicUid = state.topicUid ?? '';
    const put = await putDataOwner(scripts, keys, 'snapshot', topicUid, {
      ...call,
      time: clock.scriptTime(),
      // Judged by this node's clock: an entry a little early is only looked at and moved to expireTime.
      expiresAfterUs: isTombstone(state) ? undefined : snapshotExpiresAtUs(state) - localNowUs(clock),
    });
    if (put.kind !== 'written') return unapplied(put);
    const previous = put.previous ? (JSON.parse(put.previous) as SnapshotRecord | Tombstone) : undefined;
    if (previous && !isTombstone(previous) && (isTombstone(state) || previous.uid !== state.uid)) {
      await this.dropSnapshotData(region, previous.topicUid, previous.uid);
      await this.finishCleanup(region, dataRef(previous));
    }
    return { applied: true, current: put.previous };
  }

  private async putTopic(region: Region, state: TopicRecord | Tombstone, call: PutStateCall): Promise<PutResult> {
    const { keys, scripts } = region.ctx;
    const deleted = isTombstone(state);
    // Closed to publishing before the name goes: never a deleted name whose data takes messages.
    if (deleted) await deleteTopicData(scripts, keys.topicData(state.uid));
    // The put marks a retention it starts, changes or ends for the janitor (replay.ts).
    const put = await putTopic(scripts, keys, state.uid, {
      ...call,
      time: region.ctx.clock.scriptTime(),
      retentionUs: deleted ? undefined : topicRetentionUs(state),
    });
    if (put.kind !== 'written') return unapplied(put);
    const previousJson = put.previous;
    const previous = previousJson ? (JSON.parse(previousJson) as TopicRecord | Tombstone) : undefined;
    // This region still had an older incarnation of the name (it missed a delete and a create).
    if (previous && !isTombstone(previous) && previous.uid !== state.uid) {
      await deleteTopicData(scripts, keys.topicData(previous.uid));
      await region.ctx.redis.del(keys.topicSubscriptions(previous.uid));
    }
    return { applied: true, current: previousJson };
  }

  private async putSubscription(
    region: Region,
    state: SubscriptionRecord | Tombstone,
    call: PutStateCall,
  ): Promise<PutResult> {
    const { mode, expected } = call;
    const { keys, scripts, clock } = region.ctx;
    const deleted = isTombstone(state);
    const topicUid = deleted ? (state.topicUid ?? '') : state.topicUid;
    // A detached record is never attached: like a tombstone, it ends the data of its incarnation.
    const detached = !deleted && state.detached === true;
    // A new incarnation is attached before it is recorded (its messages are kept from the moment
    // it is visible); a settings change decided here is recorded first, so that only the
    // compare-and-set winner's settings reach the data plane. Copies are attached first: the
    // attach keeps the settings of the highest record version it has seen.
    const expectedState = expected ? (JSON.parse(expected) as SubscriptionRecord | Tombstone) : undefined;
    const sameIncarnation =
      expectedState !== undefined && !isTombstone(expectedState) && expectedState.uid === state.uid;
    const attachFirst = !deleted && !detached && (mode === 'newer' || !sameIncarnation);
    if (attachFirst) await this.attach(region, state as SubscriptionRecord, true);
    const put = await putDataOwner(scripts, keys, 'subscription', topicUid, {
      ...call,
      time: clock.scriptTime(),
      // A put counts as a use: the subscription may expire a ttl from now at the earliest.
      expiresAfterUs: deleted ? undefined : expirationTtlUs(state),
    });
    if (put.kind !== 'written') {
      // A fresh incarnation that lost (or was over a limit): nobody else can have attached its uid.
      if (attachFirst && mode === 'cas') {
        await this.dropData(region, topicUid, state.uid);
        await this.finishCleanup(region, dataRef(state as SubscriptionRecord));
      }
      return unapplied(put);
    }
    const previousJson = put.previous;
    const previous = previousJson ? (JSON.parse(previousJson) as SubscriptionRecord | Tombstone) : undefined;
    if (!deleted && !detached && !attachFirst) {
      await this.attach(region, state, false);
      // Its retention reached the data plane after the put marked the log: looked at with it.
      const retained = previous && !isTombstone(previous) && previous.retainAckedMessages;
      if (state.retainAckedMessages || retained) await markLog(scripts, keys, { time: clock.scriptTime(), topicUid });
    }
    const changedTopics = new Set<string>();
    if (previous && !isTombstone(previous) && (deleted || previous.uid !== state.uid)) {
      if (previous.topicUid !== topicUid)
        await region.ctx.redis.zrem(keys.topicSubscriptions(previous.topicUid), previous.name);
      await this.dropData(region, previous.topicUid, previous.uid);
      await this.finishCleanup(region, dataRef(previous));
      changedTopics.add(previous.topicUid);
    }
    // The put marked the detached incarnation's data for clean-up (put-data-owner.lua): a
    // crash before the drop finishes leaves it to collectGarbage.
    if (detached) {
      await this.dropData(region, topicUid, state.uid);
      await this.finishCleanup(region, dataRef(state as SubscriptionRecord));
    }
    if (!deleted) changedTopics.add(topicUid);
    await this.announce(region, changedTopics);
    return { applied: true, current: previousJson };
  }

  /**
   * Attaches the subscription in one region with the record's settings. `unrecorded`: the record
   * is not there yet, so the data is marked for clean-up until it is (a crash in between leaves
   * nothing behind for good).
   */
  private async attach(region: Region, record: SubscriptionRecord, unrecorded: boolean): Promise<void> {
    const { keys, scripts, clock } = region.ctx;
    const data = keys.topicData(record.topicUid);
    if (unrecorded) await markCleanup(scripts, keys, { time: clock.scriptTime(), ref: dataRef(record) });
    // 'topic-deleted': the incarnation is deleted in this region; the subscription simply gets nothing here.
    await attachSubscription(scripts, data, {
      time: clock.scriptTime(),
      subscriptionUid: record.uid,
      ordered: record.enableMessageOrdering === true,
      filter: record.filter,
      version: record.version,
      config: deliveryConfigOf(SUBSCRIPTION_FIELDS, record),
    });
  }

  /**
   * Open streams of the topic's subscriptions re-read their settings (or learn of a delete), and
   * every node's push delivery re-reads which subscriptions push (push.ts).
   */
  private async announce(region: Region, topicUids: Set<string>): Promise<void> {
    if (topicUids.size === 0) return;
    const { redis, keys } = region.ctx;
    await Promise.all([
      ...[...topicUids].map((topicUid) => redis.publish(keys.wakeChannel(topicUid), CONFIG_CHANGED)),
      redis.publish(keys.subscriptionsChannel, CONFIG_CHANGED),
    ]);
  }

  /** Where a kind's records and tombstones are kept (project policies have no tombstones). */
  private hashes(region: Region, kind: Kind): [string, string | undefined] {
    const { keys } = region.ctx;
    if (kind === 'topic') return [keys.topics, keys.topicTombstones];
    if (kind === 'project') return [keys.projectPolicies, undefined];
    if (kind === 'snapshot') return [keys.snapshots, keys.snapshotTombstones];
    return [keys.subscriptions, keys.subscriptionTombstones];
  }

  /**
   * Anti-entropy over every reachable region (connected, its store checked: storage-guard.ts):
   * each name's highest state goes to the regions that hold an older one; then every region that
   * took part without an error, and whose connection did not change meanwhile, is synced. A region that fails is left out (and stays
   * unsynced), so that one sick region never keeps the others from being synced.
   */
  private async sync(full: boolean): Promise<void> {
    const reachable = this.regions.all.filter((region) => region.reachable);
    const epochs = new Map(reachable.map((region) => [region, this.epochs.get(region)]));
    // Read before the records: a put after it moves the mark the next sync compares with.
    const marks = new Map(
      await Promise.all(reachable.map(async (region) => [region, await this.changeMark(region)] as const)),
    );
    const unchanged = (region: Region) =>
      region.synced && marks.get(region) !== undefined && this.syncedMarks.get(region) === marks.get(region);
    if (!full && reachable.every(unchanged)) return;
    const failed = new Set<Region>();
    const attempt = async (region: Region, work: () => Promise<unknown>) => {
      if (failed.has(region)) return;
      try {
        await work();
      } catch (error) {
        this.log(`control-plane sync of region ${region.name} failed: ${(error as Error).message}`);
        failed.add(region);
      }
    };
    await this.shareAckSecret(reachable, attempt);
    // Topics first: a subscription or snapshot copied to a region finds its topic's state already there.
    for (const kind of ['topic', 'subscription', 'snapshot', 'project'] as const) {
      const states = new Map<Region, Map<string, string>>();
      await Promise.all(
        reachable.map((region) => attempt(region, async () => states.set(region, await this.readAll(region, kind)))),
      );
      const names = new Set([...states.values()].flatMap((byName) => [...byName.keys()]));
      for (const name of names) {
        let winner = '';
        for (const byName of states.values()) {
          const candidate = byName.get(name) ?? '';
          if (supersedes(candidate, winner)) winner = candidate;
        }
        for (const [region, byName] of states) {
          if (supersedes(winner, byName.get(name) ?? '')) {
            await attempt(region, () => this.put(kind, region, JSON.parse(winner) as State, 'newer'));
          }
        }
      }
    }
    for (const region of reachable) {
      const mark = marks.get(region);
      if (!failed.has(region) && region.reachable && this.epochs.get(region) === epochs.get(region)) {
        region.synced = true;
        if (mark !== undefined) this.syncedMarks.set(region, mark);
      } else {
        this.syncedMarks.delete(region);
      }
    }
    if (failed.size > 0)
      throw new Error(`regions ${[...failed].map((region) => region.name).join(', ')} are not synced`);
  }

  /**
   * What the sync compares a region's store by: its identity, its count of control-plane puts,
   * and whether it holds the ack ID secret (which the sync shares, and which no put counts).
   * Undefined when it cannot tell: the store has no identity yet (new, or it lost its data; one
   * is made), or it cannot be read.
   */
  private async changeMark(region: Region): Promise<string | undefined> {
    const { redis, keys } = region.ctx;
    try {
      const [id, changes, secret] = await redis.mget(keys.storeId, keys.controlChanges, keys.ackSecret);
      if (id !== null) return `${id}/${changes ?? 0}/${secret === null ? '' : 'secret'}`;
      await redis.set(keys.storeId, randomBytes(8).toString('hex'), 'NX');
    } catch {
      // Unreadable: the sync that follows finds out how, and leaves the region unsynced.
    }
    return undefined;
  }

  private async readAll(region: Region, kind: Kind): Promise<Map<string, string>> {
    const [records, tombstones] = this.hashes(region, kind);
    const [live, dead] = await Promise.all([
      region.ctx.redis.hgetall(records),
      tombstones === undefined ? ({} as Record<string, string>) : region.ctx.redis.hgetall(tombstones),
    ]);
    return new Map([...Object.entries(dead), ...Object.entries(live)]);
  }

  /** Every region gets the ack ID secret of the first region (in name order) that has one. */
  private async shareAckSecret(
    regions: Region[],
    attempt: (region: Region, work: () => Promise<unknown>) => Promise<void>,
  ) {
    const secrets = new Map<Region, string | null>();
    await Promise.all(
      regions.map((region) =>
        attempt(region, async () => secrets.set(region, await region.ctx.redis.get(region.ctx.keys.ackSecret))),
      ),
    );
    const secret = regions.map((region) => secrets.get(region)).find((value) => value);
    if (!secret) return;
    await Promise.all(
      [...secrets]
        .filter(([, value]) => value === null)
        .map(([region]) => attempt(region, () => region.ctx.redis.set(region.ctx.keys.ackSecret, secret, 'NX'))),
    );
  }
}

/** The ack ID secret: the first region's (in name order) that can be reached, created there if none has one. */
export async function loadAckSecret(regions: Regions): Promise<Buffer> {
  const reachable = regions.all.filter((region) => region.usable);
  for (const region of reachable) {
    const secret = await region.ctx.redis.get(region.ctx.keys.ackSecret);
    if (secret) return Buffer.from(secret, 'hex');
  }
  const first = reachable[0] ?? regions.local;
  await first.ctx.redis.set(first.ctx.keys.ackSecret, randomBytes(32).toString('hex'), 'NX');
  const secret = await first.ctx.redis.get(first.ctx.keys.ackSecret);
  if (!secret) throw new Error('the ack ID secret vanished from Redis');
  return Buffer.from(secret, 'hex');
}
