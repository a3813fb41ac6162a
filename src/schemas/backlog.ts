import { z } from 'zod';
import { BACKLOG_STATES, type BacklogMessage, type BacklogState, type ListBacklogRequest } from '../broker/backlog.ts';
import { parseTimestampUs } from '../broker/durations.ts';
import { parsePageSize } from '../broker/pagination.ts';
import type { ReceivedMessage } from '../broker/pull.ts';
import { invalidArgument } from '../errors.ts';

/**
 * The query of `GET .../subscriptions/{s}/messages` (a repeated parameter comes as an array). A
 * parameter it does not know is refused, as Google's front end refuses one it cannot bind.
 */
const text = z.string();
const listBacklogQuerySchema = z
  .object({
    state: z.union([text, z.array(text)]).optional(),
    orderingKey: text.optional(),
    filter: text.optional(),
    publishTimeStart: text.optional(),
    publishTimeEnd: text.optional(),
    pageSize: text.optional(),
    pageToken: text.optional(),
    view: text.optional(),
  })
  .strict();

export function parseListBacklogQuery(query: unknown): ListBacklogRequest {
  const parsed = listBacklogQuerySchema.safeParse(query ?? {});
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    if (issue.code === 'unrecognized_keys') {
      throw invalidArgument(`Invalid query parameter "${issue.keys[0]}": Cannot bind query parameter.`);
    }
    throw invalidArgument(`Invalid query parameter "${issue.path.join('.')}": it must be given once.`);
  }
  const q = parsed.data;
  const view = q.view ?? 'FULL';
  if (view !== 'BASIC' && view !== 'FULL') {
    throw invalidArgument(`Invalid value for view: "${view}" is not BASIC or FULL.`);
  }
  for (const [name, value] of Object.entries(q)) {
    if (name !== 'state' && Array.isArray(value)) {
      throw invalidArgument(`Invalid query parameter "${name}": it must be given once.`);
    }
  }
  const request: ListBacklogRequest = {
    states: parseStates(q.state),
    orderingKey: q.orderingKey ?? '',
    filter: q.filter ?? '',
    pageSize: parsePageSize(q.pageSize),
    pageToken: q.pageToken ?? '',
    view,
  };
  if (q.publishTimeStart !== undefined) {
    request.publishTimeStartUs = parseTimestampUs(q.publishTimeStart, 'publishTimeStart');
  }
  if (q.publishTimeEnd !== undefined) request.publishTimeEndUs = parseTimestampUs(q.publishTimeEnd, 'publishTimeEnd');
  return request;
}

/** `state=LEASED&state=BACKOFF` or `state=LEASED,BACKOFF`. */
function parseStates(raw: string | string[] | undefined): BacklogState[] {
  const names = (Array.isArray(raw) ? raw : raw === undefined ? [] : [raw]).flatMap((value) => value.split(','));
  return names.map((name) => {
    if (!(BACKLOG_STATES as readonly string[]).includes(name)) {
      throw invalidArgument(`Invalid value for state: "${name}" is not one of ${BACKLOG_STATES.join(', ')}.`);
    }
    return name as BacklogState;
  });
}

/** A message as JSON: its data in base64. */
export function messageJson(message: ReceivedMessage['message']): Record<string, unknown> {
  return message.data ? { ...message, data: message.data.toString('base64') } : { ...message };
}

/** A page of the backlog as JSON (no key for what is empty, as Pub/Sub's lists). */
export function backlogPageJson(messages: BacklogMessage[], nextPageToken?: string): Record<string, unknown> {
  const json: Record<string, unknown> = {};
  if (messages.length > 0) json.messages = messages.map((item) => ({ ...item, message: messageJson(item.message) }));
  if (nextPageToken) json.nextPageToken = nextPageToken;
  return json;
}
