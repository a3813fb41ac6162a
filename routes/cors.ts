import cors from '@fastify/cors';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ApiError } from '../src/errors.ts';

/**
 * Browser apps of other origins: CORS for the origins listed (CORS_ORIGINS) through
 * @fastify/cors, whose hook answers preflights before authentication runs (a preflight carries
 * no token) and puts the CORS headers on every answer, refusals included, so that the app can
 * read them. A WebSocket upgrade is not subject to CORS, so its Origin is checked here against
 * the same list when `checkUpgrades` (with a list, or with authentication): a browser page of
 * another origin is refused with 403 PERMISSION_DENIED. Registered before authentication.
 */
export async function allowOrigins(
  app: FastifyInstance,
  { origins, checkUpgrades }: { origins: string[]; checkUpgrades: boolean },
): Promise<void> {
  if (origins.length > 0) {
    await app.register(cors, {
      origin: origins,
      methods: ['GET', 'PUT', 'POST', 'PATCH', 'DELETE'],
      // Preflights are answered from the browser's cache for this long (seconds).
      maxAge: 600,
      exposedHeaders: ['www-authenticate'],
    });
  }
  if (!checkUpgrades) return;
  const allowed = new Set(origins);
  app.addHook('onRequest', async (request) => {
    const origin = request.headers.origin;
    if (!request.ws || origin === undefined || allowed.has(origin) || isOwnOrigin(request, origin)) return;
    throw new ApiError(
      'PERMISSION_DENIED',
      `WebSocket connections from origin ${origin} are not allowed: list it in CORS_ORIGINS.`,
    );
  });
}

/** A page the broker serves itself (the browser example) connects from its own origin. */
function isOwnOrigin(request: FastifyRequest, origin: string): boolean {
  try {
    return new URL(origin).host === request.headers.host;
  } catch {
    return false;
  }
}
