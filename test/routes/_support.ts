// Shared pieces of the route tests (test/routes/*.test.ts): a request helper that enforces the
// response invariants every route must keep, and builders for the exact bodies the broker
// answers with.
//
// Invariants checked on EVERY response (a violation shows up as an `invariant` key in the reply,
// so the strictSame comparing the reply fails with a readable diff):
//   - the body is never empty, and is JSON (content-type application/json) except /openapi.yaml;
//   - an error response is exactly {"error":{"code","message","status"[,"details"]}} with
//     error.code equal to the HTTP status and a canonical status name that maps to it.

import { CANONICAL_HTTP_STATUS } from '../../src/errors.ts';
import type { RedisTarget } from '../helpers/redis.ts';
import { startBroker, type TestBroker } from '../helpers/app.ts';

export const CANONICAL_HTTP: Record<string, number> = CANONICAL_HTTP_STATUS;

export interface Reply {
  status: number;
  body: any;
  /** Present only when the response broke an invariant (see checkInvariants). */
  invariant?: string;
}

export interface RawRequest {
  method: string;
  url: string;
  /** A string is sent as is; anything else (but undefined) is JSON-encoded. */
  payload?: unknown;
  /** Replaces the default headers (content-type: application/json when there is a payload). */
  headers?: Record<string, string>;
}

export interface Client {
  broker: TestBroker;
  /** JSON request (content-type application/json when `body` is given), invariants checked. */
  api: (method: string, url: string, body?: unknown) => Promise<Reply>;
  /** Full control over payload and headers, invariants checked. */
  raw: (request: RawRequest) => Promise<Reply>;
}

/**
 * Returns the parsed body and, when the response breaks an invariant, a description of it.
 * Violations are reported inside the reply (key `invariant`) rather than thrown, so that a
 * strictSame on the reply shows them in its diff and the remaining cases still run.
 */
function checkInvariants(
  request: RawRequest,
  statusCode: number,
  contentType: string | undefined,
  text: string,
): { body: any; violation?: string } {
  if (text.length === 0) return { body: undefined, violation: 'empty response body' };
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    return { body: text.slice(0, 500), violation: 'response body is not JSON' };
  }
  if (!/^application\/json/.test(contentType ?? ''))
    return { body, violation: `content-type ${contentType}, expected application/json` };
  if (statusCode >= 400) {
    const error = body?.error;
    const keys = Object.keys(body ?? {});
    if (keys.length !== 1 || keys[0] !== 'error' || typeof error !== 'object' || error === null) {
      return { body, violation: 'not a {"error":{...}} envelope' };
    }
    const extra = Object.keys(error).filter((key) => !['code', 'message', 'status', 'details'].includes(key));
    if (extra.length > 0) return { body, violation: `unexpected envelope fields ${extra.join(',')}` };
    if (error.code !== statusCode) return { body, violation: `error.code ${error.code} is not the HTTP status` };
    if (typeof error.message !== 'string' || error.message === '') return { body, violation: 'no error.message' };
    if (CANONICAL_HTTP[error.status] !== statusCode) {
      return { body, violation: `error.status ${error.status} does not map to HTTP ${statusCode}` };
    }
  }
  void request;
  return { body };
}

export function client(broker: TestBroker): Client {
  const raw = async (request: RawRequest): Promise<Reply> => {
    const payload =
      request.payload === undefined || typeof request.payload === 'string' || Buffer.isBuffer(request.payload)
        ? request.payload
        : JSON.stringify(request.payload);
    const headers = request.headers ?? (payload === undefined ? {} : { 'content-type': 'application/json' });
    const response = await broker.app.inject({
      method: request.method as 'GET',
      url: request.url,
      headers,
      ...(payload === undefined ? {} : { payload: payload as string }),
    });
    const { body, violation } = checkInvariants(
      request,
      response.statusCode,
      response.headers['content-type'] as string,
      response.body,
    );
    return violation === undefined
      ? { status: response.statusCode, body }
      : { status: response.statusCode, body, invariant: violation };
  };
  const api = (method: string, url: string, body?: unknown) =>
    raw({ method, url, payload: body === undefined ? undefined : JSON.stringify(body) });
  return { broker, api, raw };
}

/** A broker on `target` with a fresh key namespace, closed when `t` ends. */
export async function openClient(
  t: { teardown(fn: () => unknown): void },
  target: RedisTarget,
  name: string,
): Promise<Client> {
  return client(await startBroker(t, { target, name }));
}

// ---------------------------------------------------------------- expected bodies

export const errorBody = (code: number, status: string, message: string) => ({ error: { code, message, status } });
export const invalid = (message: string) => errorBody(400, 'INVALID_ARGUMENT', message);
export const failedPrecondition = (message: string) => errorBody(400, 'FAILED_PRECONDITION', message);
export const notFound = (id: string) => errorBody(404, 'NOT_FOUND', `Resource not found (resource=${id}).`);
export const alreadyExists = (id: string) =>
  errorBody(409, 'ALREADY_EXISTS', `Resource already exists in the project (resource=${id}).`);
export const unimplemented = (field: string) =>
  errorBody(501, 'UNIMPLEMENTED', `The field "${field}" is not supported by this broker yet.`);
export const noRoute = (method: string, path: string) =>
  errorBody(404, 'NOT_FOUND', `No such method or resource: ${method} ${path}`);
export const unknownField = (name: string, at?: string) =>
  invalid(`Invalid JSON payload received. Unknown name "${name}"${at ? ` at '${at}'` : ''}: Cannot find field.`);
export const notAnObject = (what: string) =>
  invalid(`Invalid JSON payload received. The ${what} must be a JSON object.`);
export const invalidValue = (path: string, message: string) => invalid(`Invalid value at '${path}': ${message}`);

export function badResourceName(collection: 'topics' | 'subscriptions', project: string, id: string) {
  const singular = collection === 'topics' ? 'topic' : 'subscription';
  return invalid(
    `Invalid [${collection}] name: (name=projects/${project}/${collection}/${id}). A ${singular} ID must ` +
      'start with a letter, hold only letters, numbers, dashes, underscores, periods, tildes, plus or percent signs, ' +
      'be 3 to 255 characters long, and not start with "goog".',
  );
}
export const badProject = (project: string) => invalid(`Invalid project name: "${project}".`);

export const MIXED_ORDERING_KEYS =
  'In a single publish request, all messages must have no ordering key or they must all have the same ordering key.';

/** A topic as returned with no optional field set. */
export const topicBody = (project: string, id: string, extra: Record<string, unknown> = {}) => ({
  name: `projects/${project}/topics/${id}`,
  ...extra,
  state: 'ACTIVE',
});

/** A subscription as returned with every default filled in. */
export const subscriptionBody = (project: string, id: string, topic: string, extra: Record<string, unknown> = {}) => ({
  name: `projects/${project}/subscriptions/${id}`,
  topic,
  pushConfig: {},
  ackDeadlineSeconds: 10,
  messageRetentionDuration: '604800s',
  expirationPolicy: { ttl: '2678400s' },
  state: 'ACTIVE',
  ...extra,
});

// ---------------------------------------------------------------- pulled messages

const RFC3339_UTC = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{3}|\.\d{6}|\.\d{9})?Z$/;

/**
 * Replaces the server-chosen parts of a pull response (ackId, messageId, publishTime) with
 * placeholders after checking their format, so the rest can be compared with strictSame.
 * Returns the normalised body and the raw ack and message IDs in order.
 */
export function normalisePull(body: any): { body: any; ackIds: string[]; messageIds: string[] } {
  const ackIds: string[] = [];
  const messageIds: string[] = [];
  if (!body || typeof body !== 'object' || !('receivedMessages' in body)) return { body, ackIds, messageIds };
  const receivedMessages = body.receivedMessages.map((received: any) => {
    const { ackId, message, ...rest } = received;
    if (typeof ackId !== 'string' || ackId.length === 0) throw new Error(`bad ackId ${JSON.stringify(ackId)}`);
    const { messageId, publishTime, ...fields } = message;
    if (typeof messageId !== 'string' || !/^\d+$/.test(messageId)) throw new Error(`bad messageId ${messageId}`);
    if (typeof publishTime !== 'string' || !RFC3339_UTC.test(publishTime))
      throw new Error(`bad publishTime ${publishTime}`);
    ackIds.push(ackId);
    messageIds.push(messageId);
    return {
      ackId: '<ackId>',
      message: { ...fields, messageId: '<messageId>', publishTime: '<publishTime>' },
      ...rest,
    };
  });
  return { body: { ...body, receivedMessages }, ackIds, messageIds };
}

/** The normalised form of one received message (see normalisePull). */
export const received = (fields: Record<string, unknown>) => ({
  ackId: '<ackId>',
  message: { ...fields, messageId: '<messageId>', publishTime: '<publishTime>' },
});

export const b64 = (text: string | Buffer) => Buffer.from(text).toString('base64');

/** Checks a publish response: exactly {messageIds:[n unique decimal strings]}. Returns the IDs. */
export function checkMessageIds(reply: Reply, count: number): string[] {
  const ids = reply.body?.messageIds;
  if (reply.status !== 200 || Object.keys(reply.body).join() !== 'messageIds' || !Array.isArray(ids)) {
    throw new Error(`publish failed: ${reply.status} ${JSON.stringify(reply.body).slice(0, 300)}`);
  }
  if (ids.length !== count) throw new Error(`expected ${count} message IDs, got ${ids.length}`);
  if (!ids.every((id: unknown) => typeof id === 'string' && /^\d+$/.test(id)))
    throw new Error('non-decimal message ID');
  if (new Set(ids).size !== ids.length) throw new Error('duplicate message IDs');
  return ids;
}

// ---------------------------------------------------------------- table-driven rows

export interface Row {
  name: string;
  method: string;
  url: string;
  body?: unknown;
  status: number;
  expected: unknown;
  /** Read-backs run after the request: [method, url, status, expected body]. */
  after?: [string, string, number, unknown][];
}

export interface Asserter {
  strictSame(found: unknown, wanted: unknown, message: string): boolean;
}

/** Runs rows in order: each request, then its read-backs, each compared whole (status + body). */
export async function runRows(t: Asserter, api: Client['api'], rows: Row[]): Promise<void> {
  for (const row of rows) {
    const reply = await api(row.method, row.url, row.body);
    t.strictSame(
      reply,
      { status: row.status, body: row.expected },
      `${row.name}: ${row.method} ${row.url.slice(0, 100)} -> ${row.status}`,
    );
    for (const [method, url, status, expected] of row.after ?? []) {
      t.strictSame(
        await api(method, url),
        { status, body: expected },
        `  after "${row.name}": ${method} ${url.slice(0, 100)} -> ${status}`,
      );
    }
  }
}
