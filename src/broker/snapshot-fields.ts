import { z } from 'zod';
import { labelsSchema } from '../schemas/wire-types.ts';
import { type FieldDefinition, type FieldTable, outputField, type WireOf } from './fields.ts';

/** Every field of a Pub/Sub Snapshot, declared once (see fields.ts). */

/** The settings a snapshot record stores (records.ts), as the table below settles them. */
export interface SnapshotSettings {
  labels?: Record<string, string>;
}

const field = <Value>(definition: FieldDefinition<SnapshotSettings, Value>) => definition;

export const SNAPSHOT_FIELDS = {
  name: field({ wire: z.string(), access: 'fixed' }),
  labels: field({
    wire: labelsSchema,
    access: 'mutable',
    settle: (labels) => (labels && Object.keys(labels).length > 0 ? labels : undefined),
  }),
  // Set from the subscription and its oldest message when the snapshot is made.
  topic: outputField(z.string()),
  expireTime: outputField(z.string()),
} satisfies FieldTable<SnapshotSettings>;

/** A Snapshot as a request gives it (every field optional). */
export type SnapshotInput = WireOf<typeof SNAPSHOT_FIELDS>;
