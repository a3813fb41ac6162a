import type { FastifyInstance } from 'fastify';
import type { Broker } from '../src/broker/broker.ts';
import { Places, resourceExhausted } from '../src/broker/limits.ts';
import { httpCaller } from './caller.ts';

/** Request bodies up to 1 MiB, except publish (10 MB of data travels base64-encoded). */
export const DEFAULT_BODY_LIMIT = 1024 * 1024;
export const PUBLISH_BODY_LIMIT = 16 * 1024 * 1024;

/** Largest client frame of a streaming pull; bigger ones close the stream with INVALID_ARGUMENT. */
export const MAX_STREAM_FRAME_BYTES = 1024 * 1024;

/**
 * Counts every request of the Pub/Sub API (`/v1/...`, the WebSocket upgrade of streaming pull
 * included) against the broker's request rate limit, if it has one (src/broker/limits.ts):
 * RESOURCE_EXHAUSTED, 429, past it. Registered after authentication, which names the principal.
 * Probes, metrics and documents are not counted.
 */
export function limitRequestRate(app: FastifyInstance, broker: Broker): void {
  if (broker.limits.requestsPerSecond === undefined) return;
  app.addHook('onRequest', async (request) => {
    if (request.url.startsWith('/v1/')) broker.admit(httpCaller(broker, request.ws ? 'websocket' : 'rest', request));
  });
}

declare module 'fastify' {
  interface FastifyRequest {
    /** Gives back the bytes its body holds of the budget (limitBodiesInFlight). */
    leaveBodyBudget: (() => void) | null;
  }
}

/**
 * Bounds the bytes of request bodies the HTTP server holds at once (MAX_BODY_MIB_IN_FLIGHT): a
 * body is read whole before its route runs, so many large or slow ones at once could take all
 * the memory however few connections each client opens. Before its body is read, a request
 * takes its declared length of the budget (a chunked one, its route's body limit), and gives it
 * back once answered (or abandoned); one that does not fit is refused with 429
 * RESOURCE_EXHAUSTED, its body unread.
 */
export function limitBodiesInFlight(app: FastifyInstance, maxBytes: number): void {
  const budget = new Places(maxBytes, () =>
    resourceExhausted(
      `This server is already receiving ${Math.round(maxBytes / 2 ** 20)} MiB of request bodies ` +
        '(MAX_BODY_MIB_IN_FLIGHT): retry later.',
    ),
  );
  app.decorateRequest('leaveBodyBudget', null);
  // Hooks that call back rather than return a promise: they run on every request.
  app.addHook('onRequest', (request, _reply, done) => {
    const declared = Number(request.headers['content-length'] ?? 0);
    const chunked = request.headers['transfer-encoding'] !== undefined;
    const limit = request.routeOptions.bodyLimit ?? DEFAULT_BODY_LIMIT;
    const size = Math.min(limit, chunked ? limit : Number.isFinite(declared) ? declared : limit);
    if (size > 0) {
      try {
        request.leaveBodyBudget = budget.enter(size);
      } catch (error) {
        done(error as Error);
        return;
      }
    }
    done();
  });
  app.addHook('onResponse', (request, _reply, done) => {
    request.leaveBodyBudget?.();
    done();
  });
  // A client that goes away before its answer (its body unfinished, say) gets none.
  app.addHook('onRequestAbort', (request, done) => {
    request.leaveBodyBudget?.();
    done();
  });
}
