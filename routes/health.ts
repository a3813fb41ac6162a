import { Readable } from 'node:stream';
import { readFileSync } from 'node:fs';
import type { FastifyInstance } from 'fastify';
import { unavailable } from '../src/errors.ts';
import type { Region } from '../src/broker/regions.ts';
import { packagePath } from '../src/paths.ts';
import { withTimeout } from '../src/timeout.ts';
import type { RouteOptions } from './options.ts';

const OPENAPI_DOCUMENT = readFileSync(packagePath('openapi.yaml'), 'utf8');
/** A region that does not answer within this is reported unreachable (a hung server must not hang the probe). */
const PROBE_TIMEOUT_MS = 2_000;

export async function healthRoutes(app: FastifyInstance, { broker }: RouteOptions): Promise<void> {
  const { regions } = broker;

  /** The process is up (liveness). */
  app.get('/healthz', async () => ({ status: 'ok' }));

  /**
   * Redis answers and every script is loaded (readiness). With regions: this endpoint's region
   * must be reachable and synced; every region's state is reported.
   */
  app.get('/readyz', async (_request, reply) => {
    if (!regions.multiRegion) {
      if (!(await probe(regions.local))) throw unavailable('Not ready: Redis cannot be reached.');
      return { status: 'ready', redis: 'ok' };
    }
    const states = await Promise.all(
      regions.all.map(async (region) => {
        const reachable = await probe(region);
        return [region.name, { reachable, synced: reachable && region.usable }] as const;
      }),
    );
    const byName = Object.fromEntries(states);
    const ready = byName[regions.local.name].synced;
    return reply
      .code(ready ? 200 : 503)
      .send({ status: ready ? 'ready' : 'unavailable', region: regions.local.name, regions: byName });
  });

  /** Prometheus text format, named after Pub/Sub's metrics (src/broker/metrics.ts), sent in pieces. */
  app.get('/metrics', async (_request, reply) =>
    reply.type(broker.metrics.registry.contentType).send(Readable.from(await broker.metrics.scrape())),
  );

  app.get('/openapi.yaml', async (_request, reply) => reply.type('text/yaml; charset=utf-8').send(OPENAPI_DOCUMENT));
}

async function probe(region: Region): Promise<boolean> {
  if (!region.storageChecked) return false;
  const check = (async () => {
    await region.ctx.redis.ping();
    await region.ctx.scripts.loadAll();
    return true;
  })();
  return withTimeout(check, PROBE_TIMEOUT_MS).catch(() => false);
}
