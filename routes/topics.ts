import type { FastifyInstance, FastifyRequest } from 'fastify';
import { invalidJsonBody } from '../src/errors.ts';
import { refusedByJsonParse } from '../src/json-body.ts';
import { checkProject, resourceName } from '../src/broker/names.ts';
import type { PageRequest } from '../src/broker/pagination.ts';
import { messageJson } from '../src/schemas/backlog.ts';
import { parseBody } from '../src/schemas/common.ts';
import { decodePublishMessages, publishBodySchema } from '../src/schemas/messages.ts';
import { topicBodySchema, updateTopicBodySchema } from '../src/schemas/topics.ts';
import { parseUpdateMask } from '../src/schemas/update-mask.ts';
import { httpCaller } from './caller.ts';
import { TOPIC_PATH, type RouteOptions } from './options.ts';
import { PUBLISH_BODY_LIMIT } from './limits.ts';

interface TopicParams {
  project: string;
  topic: string;
}

export async function topicRoutes(app: FastifyInstance, { broker }: RouteOptions): Promise<void> {
  const topicName = (params: TopicParams) => resourceName('topics', params.project, params.topic);

  const caller = (request: FastifyRequest) => httpCaller(broker, 'rest', request);

  app.put<{ Params: TopicParams }>(TOPIC_PATH, (request) => {
    const name = topicName(request.params);
    return broker.topics.create(
      caller(request),
      name,
      parseBody(topicBodySchema, request.body === undefined ? {} : request.body, 'topic'),
    );
  });
  app.get<{ Params: TopicParams }>(TOPIC_PATH, (request) =>
    broker.topics.get(caller(request), topicName(request.params)),
  );
  app.patch<{ Params: TopicParams }>(TOPIC_PATH, (request) => {
    const name = topicName(request.params);
    const { topic, updateMask } = parseBody(updateTopicBodySchema, request.body, 'request');
    return broker.topics.update(caller(request), name, { topic, updateMask: parseUpdateMask(updateMask) });
  });
  app.delete<{ Params: TopicParams }>(TOPIC_PATH, async (request) => {
    await broker.topics.delete(caller(request), topicName(request.params));
    return {};
  });
  app.get<{ Params: { project: string }; Querystring: PageRequest }>('/v1/projects/:project/topics', (request) =>
    broker.topics.list(caller(request), checkProject(request.params.project), request.query),
  );
  app.get<{ Params: TopicParams; Querystring: PageRequest }>(`${TOPIC_PATH}/subscriptions`, (request) =>
    broker.topics.listSubscriptions(caller(request), topicName(request.params), request.query),
  );
  // The queryable backlog (an extension of Pub/Sub): one stored message.
  app.get<{ Params: TopicParams & { messageId: string } }>(
    `${TOPIC_PATH}/messages/:messageId([^:/]+)`,
    async (request) => {
      const name = topicName(request.params);
      return { message: messageJson(await broker.backlog.message(caller(request), name, request.params.messageId)) };
    },
  );
  app.post<{ Params: TopicParams }>(
    `${TOPIC_PATH}::publish`,
    { bodyLimit: PUBLISH_BODY_LIMIT, config: { liftsMessageData: true } },
    async (request) => {
      try {
        const name = topicName(request.params);
        const body = parseBody(publishBodySchema, request.body, 'publish request');
        return await broker.delivery.publish(caller(request), name, { messages: decodePublishMessages(body.messages) });
      } catch (error) {
        // A large body's data strings were not searched for raw control characters (json-body.ts):
        // every one that decoded had none, so only a failed publish can be such a body.
        throw request.liftedMessageData && refusedByJsonParse(request.liftedMessageData) ? invalidJsonBody() : error;
      }
    },
  );
}
