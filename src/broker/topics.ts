import { invalidArgument, notFound } from '../errors.ts';
import type { Authorizer } from './authorization.ts';
import type { CallContext } from './call-context.ts';
import type { ControlPlane } from './control-plane.ts';
import { DEFAULT_LIMITS, ResourceLimits } from './limits.ts';
import { checkUpdateMask, refuseUnimplemented, settleAll, settleMasked, storedSettings } from './fields.ts';
import type { ResourceName } from './names.ts';
import { type PageRequest, readNamePage } from './pagination.ts';
import { findRecord, newUid, type Tombstone, type TopicRecord } from './records.ts';
import type { Regions } from './regions.ts';
import { TOPIC_FIELDS, type TopicInput, type TopicSettings } from './topic-fields.ts';

export interface Topic extends TopicSettings {
  name: string;
  state: 'ACTIVE';
}

/** An UpdateTopicRequest: the mask's paths are field names (lowerCamelCase). */
export interface UpdateTopicRequest {
  topic: TopicInput;
  updateMask: string[];
}

export function renderTopic(record: TopicRecord): Topic {
  return { name: record.name, ...storedSettings(TOPIC_FIELDS, record), state: 'ACTIVE' };
}

export class TopicService {
  constructor(
    private readonly regions: Regions,
    private readonly controlPlane: ControlPlane,
    private readonly authorizer: Authorizer,
    private readonly limits = new ResourceLimits(DEFAULT_LIMITS),
  ) {}

  async create(caller: CallContext, name: ResourceName, topic: TopicInput): Promise<Topic> {
    checkBodyName(topic.name, name);
    await this.authorizer.require(caller, 'pubsub.topics.create', `projects/${name.project}`);
    refuseUnimplemented(TOPIC_FIELDS, topic);
    const settings = this.checkRegions(settleAll(TOPIC_FIELDS, topic));
    this.regions.requireLocal();
    const record = await this.controlPlane.create<TopicRecord>(
      'topic',
      name,
      (version) => ({ name: name.full, uid: newUid(), version, ...settings }),
      this.limits.topic(name),
    );
    return renderTopic(record);
  }

  async get(caller: CallContext, name: ResourceName): Promise<Topic> {
    await this.authorizer.require(caller, 'pubsub.topics.get', name.full);
    return renderTopic(await this.read(name));
  }

  /** The live record of a topic, as this endpoint's region knows it. */
  async read(name: ResourceName): Promise<TopicRecord> {
    const record = await this.find(name.full);
    if (!record) throw notFound(name.id);
    return record;
  }

  /** As read, by full name, but undefined when the topic does not exist (deleted, say). */
  find(fullName: string): Promise<TopicRecord | undefined> {
    return findRecord(this.regions, 'topics', fullName);
  }

  /** The live records of the named topics (undefined for a name with none), in one read. */
  async findEach(fullNames: string[]): Promise<Map<string, TopicRecord | undefined>> {
    const { ctx } = this.regions.requireLocal();
    const names = [...new Set(fullNames)];
    const records = names.length ? await ctx.redis.hmget(ctx.keys.topics, ...names) : [];
    return new Map(names.map((name, i) => [name, records[i] ? (JSON.parse(records[i]!) as TopicRecord) : undefined]));
  }

  /** Every live topic record this endpoint's region knows (background passes). */
  async all(): Promise<TopicRecord[]> {
    const { ctx } = this.regions.requireLocal();
    return (await ctx.redis.hvals(ctx.keys.topics)).map((json) => JSON.parse(json) as TopicRecord);
  }

  async update(caller: CallContext, name: ResourceName, request: UpdateTopicRequest): Promise<Topic> {
    checkBodyName(request.topic.name, name);
    checkUpdateMask(TOPIC_FIELDS, request.updateMask, 'UpdateTopicRequest');
    await this.authorizer.require(caller, 'pubsub.topics.update', name.full);
    this.regions.requireLocal();
    const updated = await this.controlPlane.replace('topic', name, (record: TopicRecord, version) =>
      this.checkRegions(settleMasked(TOPIC_FIELDS, { ...record, version }, request.updateMask, request.topic)),
    );
    return renderTopic(updated);
  }

  async delete(caller: CallContext, name: ResourceName): Promise<void> {
    await this.authorizer.require(caller, 'pubsub.topics.delete', name.full);
    this.regions.requireLocal();
    await this.controlPlane.replace(
      'topic',
      name,
      (record: TopicRecord, version): Tombstone => ({ name: name.full, version, deleted: true, uid: record.uid }),
    );
  }

  async list(
    caller: CallContext,
    project: string,
    page: PageRequest,
  ): Promise<{ topics?: Topic[]; nextPageToken?: string }> {
    await this.authorizer.require(caller, 'pubsub.topics.list', `projects/${project}`);
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
    caller: CallContext,
    name: ResourceName,
    page: PageRequest,
  ): Promise<{ subscriptions?: string[]; nextPageToken?: string }> {
    await this.authorizer.require(caller, 'pubsub.topics.get', name.full);
    const record = await this.read(name);
    const { ctx } = this.regions.local;
    const { names, nextPageToken } = await readNamePage(
      (min, max, count) => ctx.redis.zrangebylex(ctx.keys.topicSubscriptions(record.uid), min, max, 'LIMIT', 0, count),
      'projects/',
      page,
    );
    return { ...(names.length ? { subscriptions: names } : {}), ...(nextPageToken ? { nextPageToken } : {}) };
  }

  /** The storage policy names only configured regions (in a deployment with regions). */
  private checkRegions<Settings extends TopicSettings>(settings: Settings): Settings {
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
