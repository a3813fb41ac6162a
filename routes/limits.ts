import type { FastifyInstance } from 'fastify';
import type { Broker } from '../src/broker/broker.ts';
import { httpCaller } from './caller.ts';

/** Request bodies up to 1 MiB, except publish (10 MB of data travels base64-encoded). */
export const DEFAULT_BODY_LIMIT = 1024 * 1024;
export const PUBLISH_BODY_LIMIT = 16 * 1024 * 1024;

/** Largest client frame of a streaming pull; bigger ones close the stream with INVALID_ARGUMENT. */
export const MAX_STREAM_FRAME_BYTES = 1024 * 1024;

/**
 * A request's headers and body must have arrived within this (else 408 DEADLINE_EXCEEDED and
 * the connection is closed), so that a client sending slowly cannot hold a connection for
 * ever. It bounds the receiving only: a long poll waits for its answer well past it. 16 MB of
 * publish in two minutes needs about 140 kB/s.
 */
export const REQUEST_TIMEOUT_MS = 120_000;

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
