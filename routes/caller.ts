import type { FastifyRequest } from 'fastify';
import type { Broker } from '../src/broker/broker.ts';
import type { CallContext } from '../src/broker/call-context.ts';

/**
 * The caller context of a request to this HTTP front end: the principal its authentication found
 * (authentication.ts; none while the broker authenticates no one). `signal` is aborted when the
 * client goes away.
 */
export function httpCaller(
  broker: Broker,
  endpoint: 'rest' | 'websocket',
  request: FastifyRequest,
  signal?: AbortSignal,
): CallContext {
  return { principal: request.principal, address: request.ip, endpoint, region: broker.regions.local.name, signal };
}
