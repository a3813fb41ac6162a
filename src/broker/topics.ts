import { invalidArgument, notFound } from '../errors.ts';
import { notImplemented, parseBody } from '../schemas/common.ts';
import { topicBodySchema, UNSUPPORTED_TOPIC_FIELDS, updateTopicBodySchema, type TopicBody } from '../schemas/topics.ts';
import type { ControlPlane } from './control-plane.ts';
import { newUid, type Tombstone, type TopicRecord } from './records.ts';
import { checkDuration } from './durations.ts';
import type { ResourceName } from './names.ts';
import type { Regions } from './regions.ts';
import { readNamePage, type PageRequest } from './pagination.ts';
import { parseUpdateMask } from './update-mask.ts';

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
  constructor(
    private readonly regions: Regions,
    private readonly controlPlane: ControlPlane,
  ) {}

  async create(name: ResourceName, rawBody: unknown): Promise<Topic> {
    const body = parseBody(topicBodySchema, rawBody === undefined ? {} : rawBody, 'topic');
    checkBodyName(body.name, name);
    refuseUnsupported(body);
    const settings = this.checkSettingsAndRegions(body);
    this.regions.requireLocal();
    const record = await this.controlPlane.create<TopicRecord>('topic', name, (version) => ({
      name: name.full,
      uid: newUid(),
      version,
      ...settings,
    }));
    return renderTopic(record);
  }

  async get(name: ResourceName): Promise<Topic> {
    return renderTopic(await this.read(name));
  }

  /** The live record of a topic, as this endpoint's region knows it. */
  async read(name: ResourceName): Promise<TopicRecord> {
    const { ctx } = this.regions.requireLocal();
    const json = await ctx.redis.hget(ctx.keys.topics, name.full);
    if (json === null) throw notFound(name.id);
    return JSON.parse(json) as TopicRecord;
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
    const settings = this.checkSettingsAndRegions(request.topic);
    this.regions.requireLocal();
    const updated = await this.controlPlane.replace('topic', name, (record: TopicRecord, version) => {
      const next: TopicRecord = { ...record, version };
      for (const path of paths as (typeof MUTABLE_FIELDS)[number][]) {
        if (settings[path] === undefined) delete next[path];
        else Object.assign(next, { [path]: settings[path] });
      }
      return next;
    });
    return renderTopic(updated);
  }

  async delete(name: ResourceName): Promise<void> {
    this.regions.requireLocal();
    await this.controlPlane.replace(
      'topic',
      name,
      (record: TopicRecord, version): Tombstone => ({ name: name.full, version, deleted: true, uid: record.uid }),
    );
  }

  async list(project: string, page: PageRequest): Promise<{ topics?: Topic[]; nextPageToken?: string }> {
    const { ctx } = this.regions.requireLocal();
    const { names, nextPageToken } = await readNamePage(
      (min, max, count) => ctx.redis.zrangebylex(ctx.keys.topicIndex, min, max, 'LIMIT', 0, count),
      `projects/${project}/topics/`,
      page,
    );
    const records = names.length ? await ctx.redis.hmget(ctx.keys.topics, ...names) : [];
    const topics = records.filter((json): json is string => json !== null).map((json) => renderTopic(JSON.parse(json)));
    return { ...(topics.length ? { topics } : {}), ...(nextPageToken ? { nextPageToken } : {}) };
  }

  async listSubscriptions(
    name: ResourceName,
    page: PageRequest,
  ): Promise<{ subscriptions?: string[]; nextPageToken?: string }> {
    const record = await this.read(name);
    const { ctx } = this.regions.local;
    const { names, nextPageToken } = await readNamePage(
      (min, max, count) => ctx.redis.zrangebylex(ctx.keys.topicSubscriptions(record.uid), min, max, 'LIMIT', 0, count),
      'projects/',
      page,
    );
    return { ...(names.length ? { subscriptions: names } : {}), ...(nextPageToken ? { nextPageToken } : {}) };
  }

  /** checkSettings, and the storage policy names only configured regions. */
  private checkSettingsAndRegions(body: TopicBody): Pick<TopicRecord, (typeof MUTABLE_FIELDS)[number]> {
    const settings = checkSettings(body);
    const regions = settings.messageStoragePolicy?.allowedPersistenceRegions ?? [];
    const unknown = this.regions.multiRegion ? regions.filter((region) => !this.regions.byName(region)) : [];
    if (unknown.length > 0) {
      throw invalidArgument(
        `Invalid messageStoragePolicy: unknown region ${unknown.join(', ')}. The regions are: ${this.regions.all.map((r) => r.name).join(', ')}.`,
      );
    }
    return settings;
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
    const empty =
      value === undefined ||
      value === '' ||
      (typeof value === 'object' && value !== null && Object.keys(value).length === 0);
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
