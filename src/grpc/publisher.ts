import type { UntypedServiceImplementation } from '@grpc/grpc-js';
import { type GrpcServices, unary } from './calls.ts';
import type { ProtoPubsubMessage } from './messages.ts';
import { decodePublishMessages } from './messages.ts';
import { pageRequest, requestName, requestProject, topicInput, topicProto, updateMaskPaths } from './resources.ts';

interface TopicRequest {
  topic?: string;
}
interface PageFields {
  pageSize?: number;
  pageToken?: string;
}

/** google.pubsub.v1.Publisher over the broker's topic, subscription, delivery and snapshot services. */
export function publisherService(services: GrpcServices): UntypedServiceImplementation {
  const { broker } = services;
  return {
    CreateTopic: unary(services, async (request: { name?: string }, caller) =>
      topicProto(await broker.topics.create(caller, requestName('topics', request.name, 'name'), topicInput(request))),
    ),
    GetTopic: unary(services, async (request: TopicRequest, caller) =>
      topicProto(await broker.topics.get(caller, requestName('topics', request.topic, 'topic'))),
    ),
    UpdateTopic: unary(
      services,
      async (request: { topic?: { name?: string }; updateMask?: { paths?: string[] } }, caller) => {
        const name = requestName('topics', request.topic?.name, 'topic.name');
        const topic = topicInput(request.topic);
        return topicProto(
          await broker.topics.update(caller, name, { topic, updateMask: updateMaskPaths(request.updateMask) }),
        );
      },
    ),
    DeleteTopic: unary(services, async (request: TopicRequest, caller) => {
      await broker.topics.delete(caller, requestName('topics', request.topic, 'topic'));
      return {};
    }),
    ListTopics: unary(services, async (request: { project?: string } & PageFields, caller) => {
      const page = await broker.topics.list(caller, requestProject(request.project), pageRequest(request));
      return { ...page, topics: page.topics?.map(topicProto) };
    }),
    ListTopicSubscriptions: unary(services, (request: TopicRequest & PageFields, caller) =>
      broker.topics.listSubscriptions(caller, requestName('topics', request.topic, 'topic'), pageRequest(request)),
    ),
    Publish: unary(services, (request: TopicRequest & { messages?: ProtoPubsubMessage[] }, caller) =>
      broker.delivery.publish(caller, requestName('topics', request.topic, 'topic'), {
        messages: decodePublishMessages(request.messages),
      }),
    ),
    DetachSubscription: unary(services, async (request: { subscription?: string }, caller) => {
      await broker.subscriptions.detach(caller, requestName('subscriptions', request.subscription, 'subscription'));
      return {};
    }),
    ListTopicSnapshots: unary(services, (request: TopicRequest & PageFields, caller) =>
      broker.snapshots.listOfTopic(caller, requestName('topics', request.topic, 'topic'), pageRequest(request)),
    ),
  };
}
