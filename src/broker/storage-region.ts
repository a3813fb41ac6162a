import { type ApiError, failedPrecondition, unavailable } from '../errors.ts';
import type { SubscriptionRecord, TopicRecord } from './records.ts';
import type { Region, Regions } from './regions.ts';
import type { TopicService } from './topics.ts';

/**
 * The rules of where messages live with regions
 * (https://cloud.google.com/pubsub/docs/resource-location-restriction): a topic's message storage
 * policy names the regions that may store its messages, and with enforceInTransit also the
 * regions whose endpoints may publish and subscribe.
 */

/**
 * Where a publish is stored: this endpoint's region, unless the topic's
 * messageStoragePolicy leaves it out; then the first allowed region that can be reached,
 * except for keyed messages (their order holds per region) and with enforceInTransit.
 */
export function storageRegion(regions: Regions, topic: TopicRecord, orderingKey: string): Region {
  const local = regions.requireLocal();
  const policy = topic.messageStoragePolicy;
  const allowed = regions.multiRegion ? policy?.allowedPersistenceRegions : undefined;
  if (!allowed || allowed.includes(local.name)) return local;
  if (policy?.enforceInTransit) throw inTransitRefusal(topic, local.name);
  if (orderingKey) {
    throw failedPrecondition(
      `Cannot publish messages that contain ordering keys to topic ${topic.name} due a message storage policy on the topic that would require the messages to be forwarded to another region. Please either change the topic's message storage policy or publish to an allowed region using the appropriate regional Cloud Pub/Sub endpoint.`,
    );
  }
  const target = allowed.map((name) => regions.byName(name)).find((region) => region?.usable);
  if (!target)
    throw unavailable(`None of the topic's allowed persistence regions (${allowed.join(', ')}) can be reached.`);
  return target;
}

/**
 * Where a message forwarded to a dead-letter topic is stored: the region of the message it
 * forwards, or else the first region the topic's storage policy allows. The same wherever the
 * forward runs, so that its forward ID is checked in one place (dead-letters.ts); UNAVAILABLE
 * while that region cannot be reached.
 */
export function deadLetterRegion(regions: Regions, topic: TopicRecord, source: Region): Region {
  const allowed = regions.multiRegion ? topic.messageStoragePolicy?.allowedPersistenceRegions : undefined;
  if (!allowed || allowed.includes(source.name)) return source;
  const target = regions.byName(allowed[0]);
  if (!target?.usable)
    throw unavailable(`The region ${allowed[0]} of dead-letter topic ${topic.name} cannot be reached.`);
  return target;
}

/**
 * With `enforceInTransit`, subscribing through a region outside the topic's allowed
 * persistence regions fails.
 */
export async function checkSubscribeRegion(
  regions: Regions,
  topics: TopicService,
  record: SubscriptionRecord,
): Promise<void> {
  if (!regions.multiRegion) return;
  // A deleted topic has no policy left to enforce; a failure to read it fails the call.
  const topic = await topics.find(record.topic);
  if (topic?.uid !== record.topicUid) return;
  const policy = topic.messageStoragePolicy;
  if (policy?.enforceInTransit && !policy.allowedPersistenceRegions?.includes(regions.local.name)) {
    throw inTransitRefusal(topic, regions.local.name);
  }
}

function inTransitRefusal(topic: TopicRecord, region: string): ApiError {
  const allowed = topic.messageStoragePolicy?.allowedPersistenceRegions ?? [];
  return failedPrecondition(
    `The message storage policy of topic ${topic.name} enforces its allowed persistence regions (${allowed.join(', ')}) in transit; region ${region} is not one of them. Use an endpoint of an allowed region.`,
  );
}
