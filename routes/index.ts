import type { FastifyInstance } from 'fastify';
import type { Broker } from '../src/app.ts';
import { exampleRoutes } from './examples.ts';
import { healthRoutes } from './health.ts';
import { streamingRoutes } from './streaming.ts';
import { subscriptionRoutes } from './subscriptions.ts';
import { topicRoutes } from './topics.ts';

export interface RouteOptions {
  broker: Broker;
}

export async function registerRoutes(app: FastifyInstance, options: RouteOptions): Promise<void> {
  await app.register(healthRoutes, options);
  await app.register(topicRoutes, options);
  await app.register(subscriptionRoutes, options);
  await app.register(streamingRoutes, options);
  await app.register(exampleRoutes);
}

/** Path prefixes. Resource IDs never contain ':' or '/', so a custom verb follows the last ':'. */
export const TOPIC_PATH = '/v1/projects/:project/topics/:topic([^:/]+)';
export const SUBSCRIPTION_PATH = '/v1/projects/:project/subscriptions/:subscription([^:/]+)';
