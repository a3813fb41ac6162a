import type { FastifyInstance } from 'fastify';
import { invalidJsonBody } from '../src/errors.ts';
import { refusedByJsonParse } from '../src/json-body.ts';
import { checkProject, resourceName } from '../src/broker/names.ts';
import type { PageRequest } from '../src/broker/pagination.ts';
import { parseBody } from '../src/schemas/common.ts';
import { publishBodySchema } from '../src/schemas/messages.ts';
import { TOPIC_PATH, type RouteOptions } from './options.ts';
import { PUBLISH_BODY_LIMIT } from './limits.ts';

interface TopicParams {
  project: string;
  topic: string;
}

export async function topicRoutes(app: FastifyInstance, { broker }: RouteOptions): Promise<void> {
  const topicName = (params: TopicParams) => resourceName('topics', params.project, params.topic);

  app.put<{ Params: TopicParams }>(TOPIC_PATH, (request) =>
    broker.topics.create(topicName(request.params), request.body),
  );
  app.get<{ Params: TopicParams }>(TOPIC_PATH, (request) => broker.topics.get(topicName(request.params)));
  app.patch<{ Params: TopicParams }>(TOPIC_PATH, (request) =>
    broker.topics.update(topicName(request.params), request.body),
  );
  app.delete<{ Params: TopicParams }>(TOPIC_PATH, async (request) => {
    await broker.topics.delete(topicName(request.params));
    return {};
  });
  app.get<{ Params: { project: string }; Querystring: PageRequest }>('/v1/projects/:project/topics', (request) =>
    broker.topics.list(checkProject(request.params.project), request.query),
  );
  app.get<{ Params: TopicParams; Querystring: PageRequest }>(`${TOPIC_PATH}/subscriptions`, (request) =>
    broker.topics.listSubscriptions(topicName(request.params), request.query),
  );
  app.post<{ Params: TopicParams }>(
    `${TOPIC_PATH}::publish`,
    { bodyLimit: PUBLISH_BODY_LIMIT, config: { liftsMessageData: true } },
    async (request) => {
      try {
        const name = topicName(request.params);
        const body = parseBody(publishBodySchema, request.body, 'publish request');
        return await broker.delivery.publish(name, body.messages);
      } catch (error) {
        // A large body's data strings were not searched for raw control characters (json-body.ts):
        // every one that decoded had none, so only a failed publish can be such a body.
        throw request.liftedMessageData && refusedByJsonParse(request.liftedMessageData) ? invalidJsonBody() : error;
      }
    },
  );
}
