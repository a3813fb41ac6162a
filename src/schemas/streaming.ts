import { z } from 'zod';
import { int32 } from './wire-types.ts';

/** int64 fields (maxOutstanding*) arrive as JSON numbers or strings. */
const int64 = z.preprocess(
  (value) => (typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value),
  z.number().int('expected an integer'),
);

/** A StreamingPullRequest frame (google/pubsub/v1/pubsub.proto in googleapis/googleapis), in its JSON field names. */
export const streamingPullFrameSchema = z.strictObject({
  subscription: z.string().optional(),
  ackIds: z.array(z.string()).optional(),
  modifyDeadlineSeconds: z.array(int32).optional(),
  modifyDeadlineAckIds: z.array(z.string()).optional(),
  streamAckDeadlineSeconds: int32.optional(),
  clientId: z.string().max(256).optional(),
  maxOutstandingMessages: int64.optional(),
  maxOutstandingBytes: int64.optional(),
  protocolVersion: int64.optional(),
});
