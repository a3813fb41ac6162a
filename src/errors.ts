/**
 * The error catalogue: canonical Google status names, their HTTP codes, and the
 * Pub/Sub error envelope `{"error":{"code","message","status","details"?}}`.
 * Every error the broker answers with is an ApiError; anything else is an
 * internal error whose text is never echoed to the client.
 */

export const CANONICAL_HTTP_STATUS = {
  CANCELLED: 499,
  UNKNOWN: 500,
  INVALID_ARGUMENT: 400,
  DEADLINE_EXCEEDED: 504,
  NOT_FOUND: 404,
  ALREADY_EXISTS: 409,
  PERMISSION_DENIED: 403,
  RESOURCE_EXHAUSTED: 429,
  FAILED_PRECONDITION: 400,
  ABORTED: 409,
  OUT_OF_RANGE: 400,
  UNIMPLEMENTED: 501,
  INTERNAL: 500,
  UNAVAILABLE: 503,
  DATA_LOSS: 500,
  UNAUTHENTICATED: 401,
} as const;

export type CanonicalStatus = keyof typeof CANONICAL_HTTP_STATUS;

/** The numeric gRPC code of each canonical status (google.rpc.Code). */
export const GRPC_CODES: Record<CanonicalStatus, number> = {
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  ALREADY_EXISTS: 6,
  PERMISSION_DENIED: 7,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  ABORTED: 10,
  OUT_OF_RANGE: 11,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
  DATA_LOSS: 15,
  UNAUTHENTICATED: 16,
};

export interface ErrorInfoDetail {
  '@type': 'type.googleapis.com/google.rpc.ErrorInfo';
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

export interface ErrorEnvelope {
  error: { code: number; message: string; status: CanonicalStatus; details?: ErrorInfoDetail[] };
}

export class ApiError extends Error {
  readonly status: CanonicalStatus;
  readonly details?: ErrorInfoDetail[];
  /**
   * The canonical HTTP code of `status`, unless the request is refused by the HTTP layer with a
   * more precise one that the canonical mapping lacks (431, 413, 408): see refuseUnparsableRequest
   * in app.ts.
   */
  readonly httpStatus: number;

  constructor(
    status: CanonicalStatus,
    message: string,
    details?: ErrorInfoDetail[],
    httpStatus: number = CANONICAL_HTTP_STATUS[status],
  ) {
    super(message);
    this.status = status;
    this.details = details;
    this.httpStatus = httpStatus;
  }

  toEnvelope(): ErrorEnvelope {
    const error: ErrorEnvelope['error'] = { code: this.httpStatus, message: this.message, status: this.status };
    if (this.details) error.details = this.details;
    return { error };
  }
}

/** Pub/Sub's own wording, so that users searching the real service's messages find the same answers. */
export const notFound = (resourceId: string) =>
  new ApiError('NOT_FOUND', `Resource not found (resource=${resourceId}).`);
export const alreadyExists = (resourceId: string) =>
  new ApiError('ALREADY_EXISTS', `Resource already exists in the project (resource=${resourceId}).`);
export const invalidArgument = (message: string) => new ApiError('INVALID_ARGUMENT', message);
/** What a body that is not JSON gets (also a large publish whose lifted data is not: json-body.ts). */
export const invalidJsonBody = () => invalidArgument('Invalid JSON payload received. Body is not valid JSON.');
export const failedPrecondition = (message: string) => new ApiError('FAILED_PRECONDITION', message);
const TRANSIENT_REDIS_ERROR =
  /Connection is closed|Stream isn't writeable|Command timed out|ECONNREFUSED|ECONNRESET|EPIPE|LOADING|BUSY|CLUSTERDOWN|TRYAGAIN|MASTERDOWN|READONLY|None of startup nodes|Failed to refresh slots cache|Reached the max retries/;

/**
 * What a front end answers for a thrown value that is not an ApiError: UNAVAILABLE while the
 * message store cannot be used (clients retry it), else INTERNAL. Its text is never echoed.
 */
export function unexpectedError(error: unknown, redis: { status: string }): ApiError {
  if (error instanceof ApiError) return error;
  const message = error instanceof Error ? `${error.name} ${error.message}` : String(error);
  if (redis.status !== 'ready' || TRANSIENT_REDIS_ERROR.test(message)) return unavailable();
  return new ApiError('INTERNAL', 'Internal error encountered.');
}

export const unavailable = (message = 'The service is currently unavailable: the message store cannot be reached.') =>
  new ApiError('UNAVAILABLE', message);

/**
 * Per-ack-ID failure codes that official clients understand, in the metadata of the
 * EXACTLY_ONCE_ACKID_FAILURE ErrorInfo (README.md, Semantics, "Exactly-once";
 * https://cloud.google.com/pubsub/docs/exactly-once-delivery).
 */
export type AckFailureCode =
  | 'PERMANENT_FAILURE_INVALID_ACK_ID'
  | 'TRANSIENT_FAILURE_OTHER'
  | 'TRANSIENT_FAILURE_UNORDERED_ACK_ID';

export function exactlyOnceAckFailure(failures: Map<string, AckFailureCode>): ApiError {
  const unordered = [...failures.values()].every((code) => code === 'TRANSIENT_FAILURE_UNORDERED_ACK_ID');
  const message = unordered
    ? 'Some acknowledgement ids in the request were sent out of order.'
    : 'Some acknowledgement ids in the request were invalid. This could be because the acknowledgement ids have expired or the acknowledgement ids were malformed.';
  return new ApiError('INVALID_ARGUMENT', message, [
    {
      '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
      reason: 'EXACTLY_ONCE_ACKID_FAILURE',
      domain: 'pubsub.googleapis.com',
      metadata: Object.fromEntries(failures),
    },
  ]);
}

/** A request without a valid credential (a missing, unknown, malformed or expired token). */
export const unauthenticated = (message: string) => new ApiError('UNAUTHENTICATED', message);
