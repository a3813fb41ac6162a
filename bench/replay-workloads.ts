/**
 * Seek over a large retained backlog: a topic with one subscription with retainAckedMessages
 * gets `messages` messages (1 KB); Redis memory is read with all of them unacknowledged, then
 * with all of them acknowledged (and retained); then a seek to the time before the first publish
 * (every one unacknowledged again) and a seek to a time after the last (the purge) are timed, each
 * one REST call, with the broker's and Redis's CPU measured by the caller. Then snapshots: a
 * second seek back makes every message unacknowledged again, a snapshot of the subscription is
 * created (Redis memory read before and after), the subscription is purged, seeks to the snapshot
 * (every message unacknowledged again) and the snapshot is deleted, each one REST call.
 */
import type { Redis } from 'ioredis';
import { Keys } from '../src/redis/keys.ts';
import {
  createTopic,
  deleteTopic,
  PROJECT,
  subscriptionBacklog,
  subscriptionPath,
  type ThroughputResult,
  usedMemory,
} from './broker-workloads.ts';
import type { HttpClient } from './http.ts';
import { sleep } from './stats.ts';

export interface SnapshotFigures {
  /** Messages the snapshot holds (its info in Redis), and the subscription's unacknowledged ones when it was made. */
  held: number;
  unackedAtCreate: number;
  /** Wall time of the second seek back (the backlog unacknowledged again before the snapshot). */
  replayAgainSeconds: number;
  /** Wall time of the one CreateSnapshot request (PUT). */
  createSeconds: number;
  /** Redis used_memory after the create − before it, per held message. */
  bytesPerHeldMessage: number;
  /** MEMORY USAGE of the snapshot's held flags, and of the topic's body reference counts before and after the create. */
  heldKeyBytes: number;
  refsKeyBytesBefore: number;
  refsKeyBytesAfter: number;
  /** The purge with the snapshot holding the backlog, then the seek to the snapshot. */
  purgeSeconds: number;
  unackedAfterPurge: number;
  seekSeconds: number;
  unackedAfterSeek: number;
  /** Wall time of the one DeleteSnapshot request (it drops the snapshot's data in batches). */
  deleteSeconds: number;
  /** The longest script of the delete in SLOWLOG (threshold 10 ms); null when none reached it. */
  deleteLongestScriptUs: number | null;
  /** Redis used_memory after the delete − before the create, per held message. */
  bytesPerHeldMessageAfterDelete: number;
}

export interface SeekResult {
  messages: number;
  /** Redis used_memory per message over the empty topic: all unacknowledged, then all acknowledged and retained. */
  bytesPerUnacked: number;
  bytesPerRetainedAcked: number;
  /** Wall time of one :seek request that brings every message back, and of the purge. */
  replaySeconds: number;
  purgeSeconds: number;
  unackedAfterReplay: number;
  unackedAfterPurge: number;
  snapshot: SnapshotFigures;
}

export const SEEK_PHASES = {
  replay: 'seek back over the retained backlog',
  purge: 'seek forward (purge)',
  replayAgain: 'seek back again (before the snapshot)',
  snapshotCreate: 'create a snapshot of the unacknowledged backlog',
  snapshotPurge: 'seek forward (purge), the snapshot holding the backlog',
  snapshotSeek: 'seek to the snapshot',
  snapshotDelete: 'delete the snapshot',
} as const;

type SlowlogEntry = [id: number, time: number, usec: number, args: string[]];

/** The id of the latest SLOWLOG entry (-1: none yet). */
async function latestSlowlogId(admin: Redis): Promise<number> {
  const [latest] = (await admin.call('SLOWLOG', 'GET', '1')) as SlowlogEntry[];
  return latest ? latest[0] : -1;
}

/** The longest script in SLOWLOG after entry `afterId` (null: none over the threshold). */
async function longestScriptSince(admin: Redis, afterId: number): Promise<number | null> {
  const entries = (await admin.call('SLOWLOG', 'GET', '-1')) as SlowlogEntry[];
  const usecs = entries
    .filter(([id, , , args]) => id > afterId && /^eval/i.test(args[0] ?? ''))
    .map(([, , usec]) => usec);
  return usecs.length ? Math.max(...usecs) : null;
}

export async function seekWorkload(options: {
  client: HttpClient;
  admin: Redis;
  keyPrefix: string;
  messages: number;
  publish: (workload: string, topicId: string, count: number) => Promise<ThroughputResult>;
  drain: (workload: string, subscriptionId: string, count: number) => Promise<ThroughputResult>;
  measure: <T>(phase: string, fn: () => Promise<T>) => Promise<T>;
  log: (message: string) => void;
}): Promise<SeekResult> {
  const { client, admin, messages, log } = options;
  const id = 'bench-seek';
  await createTopic(client, id, [{ id, retainAckedMessages: true }]);
  const settled = async () => {
    await sleep(2500);
    return usedMemory(admin);
  };
  const empty = await settled();
  const before = new Date(Date.now() - 1000).toISOString();
  log(`seek: publishing ${messages} messages...`);
  await options.publish('seek backlog', id, messages);
  const unacked = await settled();
  log(`seek: acknowledging them...`);
  await options.drain('seek backlog drain', id, messages);
  const acked = await settled();
  /** Seconds of one request (throws unless 2xx). */
  const timed = async (method: string, path: string, body?: unknown) => {
    const started = performance.now();
    await client.json(method, path, body);
    return (performance.now() - started) / 1000;
  };
  const seek = (target: { time: string } | { snapshot: string }) =>
    timed('POST', `${subscriptionPath(id)}:seek`, target);
  const replay = () => seek({ time: before });
  const purge = () => seek({ time: new Date(Date.now() + 60_000).toISOString() });
  const backlog = async () => (await subscriptionBacklog(admin, options.keyPrefix, id))?.ready ?? 0;
  /**
   * The snapshot phases, with every message acknowledged (after the purge): seek back again,
   * create a snapshot of the subscription, purge, seek to the snapshot, delete it.
   */
  const snapshotPhases = async (): Promise<SnapshotFigures> => {
    const name = `projects/${PROJECT}/snapshots/${id}`;
    const replayAgainSeconds = await options.measure(SEEK_PHASES.replayAgain, replay);
    const unackedAtCreate = await backlog();
    const keys = new Keys(options.keyPrefix);
    const recordOf = async (hash: string, field: string) => {
      const json = await admin.hget(hash, field);
      if (!json) throw new Error(`no record ${field} in ${hash}`);
      return JSON.parse(json) as { uid: string; topicUid: string };
    };
    const data = keys.topicData(
      (await recordOf(keys.subscriptions, `projects/${PROJECT}/subscriptions/${id}`)).topicUid,
    );
    const memoryUsage = async (key: string) => Number((await admin.call('MEMORY', 'USAGE', key)) ?? 0);
    const refsKeyBytesBefore = await memoryUsage(data.refs);
    const memoryBefore = await settled();
    const createSeconds = await options.measure(SEEK_PHASES.snapshotCreate, () =>
      timed('PUT', `/v1/${name}`, { subscription: `projects/${PROJECT}/subscriptions/${id}` }),
    );
    const memoryAfter = await settled();
    const snapshotKeys = data.snapshot((await recordOf(keys.snapshots, name)).uid);
    const held = Number(await admin.hget(snapshotKeys.info, 'held'));
    const heldKeyBytes = await memoryUsage(snapshotKeys.held);
    const refsKeyBytesAfter = await memoryUsage(data.refs);
    const snapshotPurgeSeconds = await options.measure(SEEK_PHASES.snapshotPurge, purge);
    const unackedAfterSnapshotPurge = await backlog();
    const seekSeconds = await options.measure(SEEK_PHASES.snapshotSeek, () => seek({ snapshot: name }));
    const unackedAfterSeek = await backlog();
    const slowlogBefore = await latestSlowlogId(admin);
    const deleteSeconds = await options.measure(SEEK_PHASES.snapshotDelete, () => timed('DELETE', `/v1/${name}`));
    const deleteLongestScriptUs = await longestScriptSince(admin, slowlogBefore);
    const memoryAfterDelete = await settled();
    const perHeld = (bytes: number) => Math.round((bytes / Math.max(held, 1)) * 10) / 10;
    const figures: SnapshotFigures = {
      held,
      unackedAtCreate,
      replayAgainSeconds,
      createSeconds,
      bytesPerHeldMessage: perHeld(memoryAfter - memoryBefore),
      heldKeyBytes,
      refsKeyBytesBefore,
      refsKeyBytesAfter,
      purgeSeconds: snapshotPurgeSeconds,
      unackedAfterPurge: unackedAfterSnapshotPurge,
      seekSeconds,
      unackedAfterSeek,
      deleteSeconds,
      deleteLongestScriptUs,
      bytesPerHeldMessageAfterDelete: perHeld(memoryAfterDelete - memoryBefore),
    };
    log(`snapshot: ${JSON.stringify(figures)}`);
    return figures;
  };
  const replaySeconds = await options.measure(SEEK_PHASES.replay, replay);
  const unackedAfterReplay = await backlog();
  const purgeSeconds = await options.measure(SEEK_PHASES.purge, purge);
  const unackedAfterPurge = await backlog();
  const snapshot = await snapshotPhases();
  await deleteTopic(client, id, [id]);
  const perMessage = (bytes: number) => Math.round(((bytes - empty) / messages) * 10) / 10;
  return {
    messages,
    bytesPerUnacked: perMessage(unacked),
    bytesPerRetainedAcked: perMessage(acked),
    replaySeconds,
    purgeSeconds,
    unackedAfterReplay,
    unackedAfterPurge,
    snapshot,
  };
}
