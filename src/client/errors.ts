/** Canonical gRPC status names, indexed by their code. */
const STATUS_NAMES = [
  'OK',
  'CANCELLED',
  'UNKNOWN',
  'INVALID_ARGUMENT',
  'DEADLINE_EXCEEDED',
  'NOT_FOUND',
  'ALREADY_EXISTS',
  'PERMISSION_DENIED',
  'RESOURCE_EXHAUSTED',
  'FAILED_PRECONDITION',
  'ABORTED',
  'OUT_OF_RANGE',
  'UNIMPLEMENTED',
  'INTERNAL',
  'UNAVAILABLE',
  'DATA_LOSS',
  'UNAUTHENTICATED',
] as const;

/**
 * Stream close codes after which the subscriber reconnects: 4000 + CANCELLED, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED, ABORTED, INTERNAL, UNAVAILABLE (what the official clients retry), and the
 * WebSocket codes of a dropped connection or a server going away. Every other code (e.g. 4003
 * INVALID_ARGUMENT, 4005 NOT_FOUND, 4007 PERMISSION_DENIED, 4009 FAILED_PRECONDITION, 1008
 * policy violation, 1009 frame too big) ends the subscriber.
 */
const RETRYABLE_CLOSE_CODES = new Set([4001, 4004, 4008, 4010, 4013, 4014, 1000, 1001, 1005, 1006, 1011, 1012, 1013]);

/** Whether a streaming pull that ended with this WebSocket close code should be reopened. */
export const isRetryableCloseCode = (code: number): boolean => RETRYABLE_CLOSE_CODES.has(code);

/** The Pub/Sub error envelope's inner object (`{"error": {...}}`). */
export interface ErrorBody {
  code?: number;
  message?: string;
  status?: string;
  details?: unknown[];
}

/** An error from the broker: a REST error response or the end of a streaming pull. */
export class PubSubError extends Error {
  override readonly name = 'PubSubError';
  /** Canonical status name, e.g. `NOT_FOUND` or `UNAVAILABLE`. */
  readonly status: string;
  /** Canonical gRPC code (5 for NOT_FOUND, 14 for UNAVAILABLE, ...). */
  readonly code: number;
  /** HTTP status of a REST error, when the error came from one. */
  readonly httpStatus?: number;
  /** WebSocket close code, when a stream ended. */
  readonly closeCode?: number;
  /** True when the subscriber reconnects by itself after this error. */
  readonly retryable: boolean;
  /** `error.details` of the envelope, if any (e.g. ErrorInfo of exactly-once ack failures). */
  readonly details?: unknown[];

  constructor(
    status: string,
    message: string,
    extra: { httpStatus?: number; closeCode?: number; retryable?: boolean; details?: unknown[] } = {},
  ) {
    super(message);
    this.status = status;
    const code = STATUS_NAMES.indexOf(status as (typeof STATUS_NAMES)[number]);
    this.code = code < 0 ? 2 : code;
    this.httpStatus = extra.httpStatus;
    this.closeCode = extra.closeCode;
    this.retryable = extra.retryable ?? false;
    this.details = extra.details;
  }

  /** From a REST response body (`{"error": {...}}` or anything else the server sent). */
  static fromResponse(httpStatus: number, text: string): PubSubError {
    let body: ErrorBody | undefined;
    try {
      body = (JSON.parse(text) as { error?: ErrorBody }).error;
    } catch {
      // not JSON: a proxy's error page, say
    }
    const status = body?.status ?? statusForHttp(httpStatus);
    const message = body?.message ?? `HTTP ${httpStatus}${text ? `: ${text.slice(0, 200)}` : ''}`;
    return new PubSubError(status, message, { httpStatus, details: body?.details });
  }

  /**
   * From the end of a stream: the `{"error": ...}` frame the server sent just before closing if
   * there was one, else the close reason (the same JSON, truncated to 123 bytes), else the code.
   */
  static fromClose(code: number, reason: string, frame?: ErrorBody): PubSubError {
    let body = frame;
    if (!body && reason) {
      try {
        body = (JSON.parse(reason) as { error?: ErrorBody }).error;
      } catch {
        body = { message: reason };
      }
    }
    const status =
      body?.status ??
      (code >= 4000 && code < 4000 + STATUS_NAMES.length
        ? STATUS_NAMES[code - 4000]
        : code === 1006
          ? 'UNAVAILABLE'
          : 'UNKNOWN');
    const message =
      body?.message ??
      (code === 1006 ? 'The connection to the broker was lost.' : `The stream closed with code ${code}.`);
    return new PubSubError(status, message, {
      closeCode: code,
      retryable: isRetryableCloseCode(code),
      details: body?.details,
    });
  }
}

function statusForHttp(httpStatus: number): string {
  const byHttp: Record<number, string> = {
    400: 'INVALID_ARGUMENT',
    401: 'UNAUTHENTICATED',
    403: 'PERMISSION_DENIED',
    404: 'NOT_FOUND',
    409: 'ALREADY_EXISTS',
    429: 'RESOURCE_EXHAUSTED',
    499: 'CANCELLED',
    501: 'UNIMPLEMENTED',
    503: 'UNAVAILABLE',
    504: 'DEADLINE_EXCEEDED',
  };
  return byHttp[httpStatus] ?? (httpStatus >= 500 ? 'INTERNAL' : 'UNKNOWN');
}

/** A message handler threw or rejected; the message was nacked (unless it had been settled). */
export class HandlerError extends Error {
  override readonly name = 'HandlerError';
  constructor(
    /** The ID of the message whose handler failed. */
    readonly messageId: string,
    override readonly cause: unknown,
  ) {
    super(`The handler of message ${messageId} failed: ${describe(cause)}`);
  }
}

/** The message of an Error, or any other thrown value as a string. */
export function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
