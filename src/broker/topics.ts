import { alreadyExists, invalidArgument, notFound } from '../errors.ts';
import { notImplemented, parseBody } from '../schemas/common.ts';
import {
  topicBodySchema,
  UNSUPPORTED_TOPIC_FIELDS,
  updateTopicBodySchema,
  type TopicBody,
} from '../schemas/topics.ts';
import type { BrokerContext } from './context.ts';
import { checkDuration } from './durations.ts';
import type { ResourceName } from './names.ts';
import { readNamePage, type PageRequest } from './pagination.ts';
import { parseUpdateMask } from './update-mask.ts';

/** A topic as kept in the control plane. `uid` names the incarnation whose data it owns. */
export interface TopicRecord {
  name: string;
  uid: string;
  labels?: Record<string, string>;
  messageRetentionDuration?: string;
  messageStoragePolicy?: { allowedPersistenceRegions?: string[]; enforceInTransit?: boolean };
}

export interface Topic {
  name: string;
  labels?: Record<string, string>;
  messageRetentionDuration?: string;
  messageStoragePolicy?: TopicRecord['messageStoragePolicy'];
  state: 'ACTIVE';
}

const RETENTION_MIN_SECONDS = 600;
const RETENTION_MAX_SECONDS = 31 * 24 * 3600;
const MUTABLE_FIELDS = ['labels', 'messageRetentionDuration', 'messageStoragePolicy'] as const;

export function renderTopic(record: TopicRecord): Topic {
  const topic: Topic = { name: record.name, state: 'ACTIVE' };
  if (record.labels && Object.keys(record.labels).length > 0) topic.labels = record.labels;
  if (record.messageRetentionDuration) topic.messageRetentionDuration = record.messageRetentionDuration;
  if (record.messageStoragePolicy) topic.messageStoragePolicy = record.messageStoragePolicy;
  return topic;
}

export class TopicService {
  constructor(private readonly ctx: BrokerContext) {}

  async create(name: ResourceName, rawBody: unknown): Promise<Topic> {
    const body = parseBody(topicBodySchema, rawBody === undefined ? {} : rawBody, 'topic');
    checkBodyName(body.name, name);
    refuseUnsupported(body);
    const settings = checkSettings(body);
    const uid = String(await this.ctx.redis.incr(this.ctx.keys.topicUidCounter));
    const record: TopicRecord = { name: name.full, uid, ...settings };
    const created = await this.ctx.scripts.run(
      'create-topic',
      [this.ctx.keys.topics, this.ctx.keys.topicIndex],
      [name.full, JSON.stringify(record)],
    );
    if (created !== 1) throw alreadyExists(name.id);
    return renderTopic(record);
  }

  async get(name: ResourceName): Promise<Topic> {
    return renderTopic((await this.read(name)).record);
  }

  /** The live record of a topic, and its stored JSON (for compare-and-set). */
  async read(name: ResourceName): Promise<{ record: TopicRecord; json: string }> {
    const json = await this.ctx.redis.hget(this.ctx.keys.topics, name.full);
    if (json === null) throw notFound(name.id);
    return { record: JSON.parse(json) as TopicRecord, json };
  }

  async update(name: ResourceName, rawBody: unknown): Promise<Topic> {
    const request = parseBody(updateTopicBodySchema, rawBody, 'request');
    checkBodyName(request.topic.name, name);
    const paths = parseUpdateMask(request.updateMask, 'UpdateTopicRequest');
    for (const path of paths) {
      if ((UNSUPPORTED_TOPIC_FIELDS as readonly string[]).includes(path)) throw notImplemented(path);
      if (!(MUTABLE_FIELDS as readonly string[]).includes(path)) {
        throw invalidArgument(`Invalid update_mask provided in the UpdateTopicRequest: unknown field name "${path}".`);
      }
    }
    const settings = checkSettings(request.topic);
    for (;;) {
      const { record, json } = await this.read(name);
      const updated: TopicRecord = { ...record };
      for (const path of paths as (typeof MUTABLE_FIELDS)[number][]) {
        if (settings[path] === undefined) delete updated[path];
        else Object.assign(updated, { [path]: settings[path] });
      }
      const replaced = await this.ctx.scripts.run('replace-record', [this.ctx.keys.topics], [
        name.full,
        json,
        JSON.stringify(updated),
      ]);
      if (replaced === 1) return renderTopic(updated);
    }
  }

  async delete(name: ResourceName): Promise<void> {
    const { record, json } = await this.read(name);
    // Close the data to publishing first: a crash after this leaves a topic whose delete can
    // simply be repeated, never a deleted name whose data still accepts messages.
    await this.ctx.scripts.run('delete-topic-data', [this.ctx.keys.topicData(record.uid).state], []);
    await this.ctx.scripts.run(
      'delete-topic',
      [this.ctx.keys.topics, this.ctx.keys.topicIndex, this.ctx.keys.topicSubscriptions(record.uid)],
      [name.full, json],
    );
  }

  async list(project: string, page: PageRequest): Promise<{ topics?: Topic[]; nextPageToken?: string }> {
    const { names, nextPageToken } = await readNamePage(
      (min, max, count) => this.ctx.redis.zrangebylex(this.ctx.keys.topicIndex, min, max, 'LIMIT', 0, count),
      `projects/${project}/topics/`,
      page,
    );
    const records = names.length ? await this.ctx.redis.hmget(this.ctx.keys.topics, ...names) : [];
    const topics = records.filter((json): json is string => json !== null).map((json) => renderTopic(JSON.parse(json)));
    return { ...(topics.length ? { topics } : {}), ...(nextPageToken ? { nextPageToken } : {}) };
  }

  async listSubscriptions(name: ResourceName, page: PageRequest): Promise<{ subscriptions?: string[]; nextPageToken?: string }> {
    const { record } = await this.read(name);
    const { names, nextPageToken } = await readNamePage(
      (min, max, count) =>
        this.ctx.redis.zrangebylex(this.ctx.keys.topicSubscriptions(record.uid), min, max, 'LIMIT', 0, count),
      'projects/',
      page,
    );
    return { ...(names.length ? { subscriptions: names } : {}), ...(nextPageToken ? { nextPageToken } : {}) };
  }
}

export function checkBodyName(bodyName: string | undefined, name: ResourceName): void {
  if (bodyName !== undefined && bodyName !== '' && bodyName !== name.full) {
    throw invalidArgument(`The name in the body (${bodyName}) does not match the name in the URL (${name.full}).`);
  }
}

function refuseUnsupported(body: TopicBody): void {
  for (const field of UNSUPPORTED_TOPIC_FIELDS) {
    const value = body[field];
    const empty = value === undefined || value === '' || (typeof value === 'object' && value !== null && Object.keys(value).length === 0);
    if (!empty) throw notImplemented(field);
  }
}

function checkSettings(body: TopicBody): Pick<TopicRecord, (typeof MUTABLE_FIELDS)[number]> {
  const settings: Pick<TopicRecord, (typeof MUTABLE_FIELDS)[number]> = {};
  if (body.labels && Object.keys(body.labels).length > 0) settings.labels = body.labels;
  if (body.messageRetentionDuration) {
    settings.messageRetentionDuration = checkDuration(
      body.messageRetentionDuration,
      'messageRetentionDuration',
      RETENTION_MIN_SECONDS,
      RETENTION_MAX_SECONDS,
    );
  }
  if (body.messageStoragePolicy) {
    const regions = body.messageStoragePolicy.allowedPersistenceRegions;
    if (!regions || regions.length === 0) {
      throw invalidArgument('Invalid messageStoragePolicy: allowedPersistenceRegions must list at least one region.');
    }
    settings.messageStoragePolicy = body.messageStoragePolicy;
  }
  return settings;
}
