import { z } from 'zod';

/** JSON forms of the proto3 types that Pub/Sub's resources and requests are made of. */

/** Labels: at most 64, lowercase keys (Pub/Sub's label rules). */
export const labelsSchema = z
  .record(
    z
      .string()
      .regex(
        /^[a-z][a-z0-9_-]{0,62}$/,
        'label keys start with a lowercase letter and hold at most 63 lowercase letters, digits, "_" or "-"',
      ),
    z.string().regex(/^[a-z0-9_-]{0,63}$/, 'label values hold at most 63 lowercase letters, digits, "_" or "-"'),
  )
  .refine((labels) => Object.keys(labels).length <= 64, 'at most 64 labels are allowed');

export const durationString = z.string().regex(/^\d{1,12}(\.\d{1,9})?s$/, 'expected a duration such as "600s"');

/** int64 fields arrive as JSON strings or numbers; int32 as numbers (strings tolerated). */
export const int32 = z.preprocess(
  (value) => (typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value),
  z.number().int('expected an integer'),
);
