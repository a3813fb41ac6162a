// What tests of the official Node client share, over REST and over gRPC.

import type { Test } from 'tap';
import type { PubSub, Snapshot, Subscription } from '@google-cloud/pubsub';

type GoogleError = import('google-gax').GoogleError;

/** Calls `fn`, expecting it to reject; returns the rejection. */
export async function rejection<E = GoogleError>(fn: () => Promise<unknown>): Promise<E> {
  try {
    await fn();
  } catch (error) {
    return error as E;
  }
  throw new Error('expected the call to fail, but it succeeded');
}

/** Deletes the snapshot through the client and checks that it is gone: not listed, no seek target. */
export async function deleteSnapshotAndCheck(
  t: Test,
  pubsub: PubSub,
  subscription: Subscription,
  snapshot: Snapshot,
): Promise<void> {
  await snapshot.delete();
  const [after] = await pubsub.getSnapshots();
  t.notOk(
    after.some((s) => s.name === snapshot.name),
    'snapshot.delete() deletes it',
  );
  const gone = await rejection(() => subscription.seek(snapshot.name));
  t.equal(gone.code, 5, 'a seek to a deleted snapshot: NOT_FOUND');
}
