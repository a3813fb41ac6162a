import type { FastifyInstance, FastifyRequest } from 'fastify';
import { checkProject, parseResourceName, resourceName } from '../src/broker/names.ts';
import type { PageRequest } from '../src/broker/pagination.ts';
import { backlogPageJson, parseListBacklogQuery } from '../src/schemas/backlog.ts';
import { receivedMessagesJson } from '../src/schemas/received-json.ts';
import { parseBody } from '../src/schemas/common.ts';
import { decodePublishMessages } from '../src/schemas/messages.ts';
import {
  acknowledgeAndPublishBodySchema,
  acknowledgeBodySchema,
  detachBodySchema,
  modifyAckDeadlineBodySchema,
  modifyPushConfigBodySchema,
  pullBodySchema,
  seekBodySchema,
  subscriptionBodySchema,
  updateSubscriptionBodySchema,
} from '../src/schemas/subscriptions.ts';
import { parseUpdateMask } from '../src/schemas/update-mask.ts';
import { httpCaller } from './caller.ts';
import { PUBLISH_BODY_LIMIT } from './limits.ts';
import { SUBSCRIPTION_PATH, type RouteOptions } from './options.ts';

/** Why a long poll stopped waiting: its client went away. */
const CLIENT_GONE = new Error('the client went away');

interface SubscriptionParams {
  project: string;
  subscription: string;
}

export async function subscriptionRoutes(app: FastifyInstance, { broker }: RouteOptions): Promise<void> {
  const subscriptionName = (params: SubscriptionParams) =>
    resourceName('subscriptions', params.project, params.subscription);

  const caller = (request: FastifyRequest) => httpCaller(broker, 'rest', request);

  app.put<{ Params: SubscriptionParams }>(SUBSCRIPTION_PATH, (request) => {
    const name = subscriptionName(request.params);
    return broker.subscriptions.create(
      caller(request),
      name,
      parseBody(subscriptionBodySchema, request.body, 'subscription'),
    );
  });
  app.get<{ Params: SubscriptionParams }>(SUBSCRIPTION_PATH, (request) =>
    broker.subscriptions.get(caller(request), subscriptionName(request.params)),
  );
  app.patch<{ Params: SubscriptionParams }>(SUBSCRIPTION_PATH, (request) => {
    const name = subscriptionName(request.params);
    const { subscription, updateMask } = parseBody(updateSubscriptionBodySchema, request.body, 'request');
    return broker.subscriptions.update(caller(request), name, {
      subscription,
      updateMask: parseUpdateMask(updateMask),
    });
  });
  app.delete<{ Params: SubscriptionParams }>(SUBSCRIPTION_PATH, async (request) => {
    await broker.subscriptions.delete(caller(request), subscriptionName(request.params));
    return {};
  });
  app.post<{ Params: SubscriptionParams }>(`${SUBSCRIPTION_PATH}::detach`, async (request) => {
    const name = subscriptionName(request.params);
    parseBody(detachBodySchema, request.body ?? {}, 'detach request');
    await broker.subscriptions.detach(caller(request), name);
    return {};
  });
  app.post<{ Params: SubscriptionParams }>(`${SUBSCRIPTION_PATH}::seek`, async (request) => {
    const name = subscriptionName(request.params);
    await broker.replay.seek(caller(request), name, parseBody(seekBodySchema, request.body, 'seek request'));
    return {};
  });
  // The queryable backlog (an extension of Pub/Sub): read-only views, no use of the subscription.
  app.get<{ Params: SubscriptionParams }>(`${SUBSCRIPTION_PATH}/messages`, async (request) => {
    const name = subscriptionName(request.params);
    const page = await broker.backlog.list(caller(request), name, parseListBacklogQuery(request.query));
    return backlogPageJson(page.messages, page.nextPageToken);
  });
  app.get<{ Params: SubscriptionParams }>(`${SUBSCRIPTION_PATH}/backlog`, (request) =>
    broker.backlog.counts(caller(request), subscriptionName(request.params)),
  );
  app.get<{ Params: { project: string }; Querystring: PageRequest }>('/v1/projects/:project/subscriptions', (request) =>
    broker.subscriptions.list(caller(request), checkProject(request.params.project), request.query),
  );

  app.post<{ Params: SubscriptionParams }>(`${SUBSCRIPTION_PATH}::pull`, async (request, reply) => {
    const name = subscriptionName(request.params);
    const body = parseBody(pullBodySchema, request.body, 'pull request');
    // A long poll stops waiting when the client goes away: the connection closes before the
    // answer is sent. (Aborting after every answer would cost each pull the default reason, a
    // DOMException and its stack trace.)
    const clientGone = new AbortController();
    reply.raw.on('close', () => {
      if (!reply.raw.writableFinished) clientGone.abort(CLIENT_GONE);
    });
    const received = await broker.delivery.pull(httpCaller(broker, 'rest', request, clientGone.signal), name, body);
    // An empty pull answers {}, as Pub/Sub does.
    return reply.type('application/json; charset=utf-8').send(receivedMessagesJson(received));
  });
  app.post<{ Params: SubscriptionParams }>(`${SUBSCRIPTION_PATH}::acknowledge`, async (request) => {
    const name = subscriptionName(request.params);
    const body = parseBody(acknowledgeBodySchema, request.body, 'acknowledge request');
    await broker.delivery.acknowledge(caller(request), name, body);
    return {};
  });
  app.post<{ Params: SubscriptionParams }>(
    `${SUBSCRIPTION_PATH}::acknowledgeAndPublish`,
    { bodyLimit: PUBLISH_BODY_LIMIT },
    (request) => {
      const name = subscriptionName(request.params);
      const body = parseBody(acknowledgeAndPublishBodySchema, request.body, 'acknowledgeAndPublish request');
      const publish = (body.publish ?? []).map(({ topic, messages }) => ({
        topic: parseResourceName('topics', topic),
        messages: decodePublishMessages(messages),
      }));
      return broker.delivery.acknowledgeAndPublish(caller(request), name, { ackIds: body.ackIds, publish });
    },
  );
  app.post<{ Params: SubscriptionParams }>(`${SUBSCRIPTION_PATH}::modifyAckDeadline`, async (request) => {
    const name = subscriptionName(request.params);
    const body = parseBody(modifyAckDeadlineBodySchema, request.body, 'modifyAckDeadline request');
    await broker.delivery.modifyAckDeadline(caller(request), name, body);
    return {};
  });
  app.post<{ Params: SubscriptionParams }>(`${SUBSCRIPTION_PATH}::modifyPushConfig`, async (request) => {
    const name = subscriptionName(request.params);
    const body = parseBody(modifyPushConfigBodySchema, request.body, 'modifyPushConfig request');
    await broker.subscriptions.modifyPushConfig(caller(request), name, body);
    return {};
  });
}
