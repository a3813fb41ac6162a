import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { unavailable } from '../src/errors.ts';
import { packagePath } from '../src/paths.ts';
import type { RouteOptions } from './index.ts';

const OPENAPI_DOCUMENT = readFileSync(packagePath('openapi.yaml'), 'utf8');

export async function healthRoutes(app: FastifyInstance, { broker }: RouteOptions): Promise<void> {
  /** The process is up (liveness). */
  app.get('/healthz', async () => ({ status: 'ok' }));

  /** Redis answers and every script is loaded (readiness). */
  app.get('/readyz', async () => {
    try {
      await broker.ctx.redis.ping();
      await broker.ctx.scripts.loadAll();
    } catch {
      throw unavailable('Not ready: Redis cannot be reached.');
    }
    return { status: 'ready', redis: 'ok' };
  });

  app.get('/openapi.yaml', async (_request, reply) => reply.type('text/yaml; charset=utf-8').send(OPENAPI_DOCUMENT));
}
