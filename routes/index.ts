import type { FastifyInstance } from 'fastify';
import { exampleRoutes } from './examples.ts';
import { healthRoutes } from './health.ts';
import { iamRoutes } from './iam.ts';
import type { RouteOptions } from './options.ts';
import { snapshotRoutes } from './snapshots.ts';
import { streamingRoutes } from './streaming.ts';
import { subscriptionRoutes } from './subscriptions.ts';
import { topicRoutes } from './topics.ts';
import { unimplementedRoutes } from './unimplemented.ts';

export async function registerRoutes(app: FastifyInstance, options: RouteOptions): Promise<void> {
  await app.register(healthRoutes, options);
  await app.register(topicRoutes, options);
  await app.register(subscriptionRoutes, options);
  await app.register(snapshotRoutes, options);
  await app.register(streamingRoutes, options);
  await app.register(iamRoutes, options);
  await app.register(unimplementedRoutes);
  await app.register(exampleRoutes);
}
