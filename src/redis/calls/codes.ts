import type { ScriptName } from '../scripts.ts';

/**
 * The codes the scripts reply with, under the names prelude.lua gives them
 * (test/lua/script-headers.test.ts checks that both sides agree). The wrappers beside this file
 * decode each reply with them into a named result, so that their callers see no code.
 */
export const REPLY_OK = 1;
/** put-topic, put-data-owner: the state there was kept (see may_put in prelude.lua). */
export const REPLY_REFUSED = 0;
export const REPLY_TOPIC_DELETED = -1;
export const REPLY_NO_SUBSCRIPTION = -1;
export const REPLY_ATTACHMENTS_CHANGED = -2;
export const REPLY_STAMP_REFUSED = -3;
/** publish: the message forwarded from a dead-letter policy was stored before. */
export const REPLY_FORWARDED_BEFORE = -4;
/** seek: the snapshot is not recorded in that region. */
export const REPLY_NO_SNAPSHOT = -5;
/** publish: a message is scheduled later than a subscription that takes it retains messages. */
export const REPLY_PAST_RETENTION = -6;
/** acknowledge-and-publish: not every lease is current; nothing changed. */
export const REPLY_LEASES_REFUSED = -7;
/** acknowledge-and-publish: its publish refused (publish.lua's reply follows); nothing changed. */
export const REPLY_PUBLISH_REFUSED = -8;
/** put-topic, put-data-owner: a create refused, the project holds its limit of names of the kind. */
export const REPLY_PROJECT_FULL = -9;
/** put-data-owner: a create refused, the topic has its limit of subscriptions. */
export const REPLY_TOPIC_FULL = -10;

/** Per delivery, from acknowledge, acknowledge-ordered and modify-ack-deadline. */
export const DELIVERY_GONE = 0;
export const DELIVERY_APPLIED = 1;
export const DELIVERY_EXPIRED = 2;
export const DELIVERY_OUT_OF_ORDER = 3;

/**
 * Generations run in epochs of this many (GEN_EPOCH in prelude.lua): a seek that brings back an
 * acknowledged message starts it at its subscription's next epoch.
 */
export const GEN_EPOCH = 1_048_576;

/** What every script's time argument is: '' to use Redis TIME, else microseconds (Clock.scriptTime). */
export type ScriptTime = string;

/** A reply no header documents: a script and its wrapper disagree. */
export function unexpectedReply(script: ScriptName, reply: unknown): Error {
  return new Error(`${script} answered ${JSON.stringify(reply)}, which its wrapper does not know`);
}
