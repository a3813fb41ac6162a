/**
 * Seek over a large retained backlog: a topic with one subscription with retainAckedMessages
 * gets `messages` messages (1 KB); Redis memory is read with all of them unacknowledged, then
 * with all of them acknowledged (and retained); then a seek to the time before the first publish
 * (every one unacknowledged again) and a seek to a time after the last (the purge) are timed, each
 * one REST call, with the broker's and Redis's CPU measured by the caller.
 */
import type { Redis } from 'ioredis';
import {
  createTopic,
  deleteTopic,
  subscriptionBacklog,
  subscriptionPath,
  type ThroughputResult,
  usedMemory,
} from './broker-workloads.ts';
import type { HttpClient } from './http.ts';
import { sleep } from './stats.ts';

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
}

export const SEEK_PHASES = {
  replay: 'seek back over the retained backlog',
  purge: 'seek forward (purge)',
} as const;

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
  const seek = async (time: string) => {
    const started = performance.now();
    await client.json('POST', `${subscriptionPath(id)}:seek`, { time }); // throws unless 2xx
    return (performance.now() - started) / 1000;
  };
  const replaySeconds = await options.measure(SEEK_PHASES.replay, () => seek(before));
  const backlog = async () => (await subscriptionBacklog(admin, options.keyPrefix, id))?.ready ?? 0;
  const unackedAfterReplay = await backlog();
  const purgeSeconds = await options.measure(SEEK_PHASES.purge, () =>
    seek(new Date(Date.now() + 60_000).toISOString()),
  );
  const unackedAfterPurge = await backlog();
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
  };
}
