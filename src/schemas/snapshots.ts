import { z } from 'zod';
import { SNAPSHOT_FIELDS } from '../broker/snapshot-fields.ts';
import { resourceSchema } from './common.ts';
import { labelsSchema } from './wire-types.ts';

/** A CreateSnapshotRequest: the subscription whose state it records, and its labels. */
export const createSnapshotBodySchema = z.strictObject({
  name: z.string().optional(),
  subscription: z.string().optional(),
  labels: labelsSchema.optional(),
  tags: z.record(z.string(), z.string()).optional(),
});

/** An UpdateSnapshotRequest; the Snapshot's fields come from SNAPSHOT_FIELDS. */
export const updateSnapshotBodySchema = z.strictObject({
  snapshot: resourceSchema(SNAPSHOT_FIELDS),
  updateMask: z.string().optional(),
});
