import type { Broker } from '../src/broker/broker.ts';
import type { CallContext } from '../src/broker/call-context.ts';

/**
 * The caller context of a request to this HTTP front end. Nothing identifies the caller yet;
 * `signal` is aborted when the client goes away.
 */
export function httpCaller(broker: Broker, endpoint: 'rest' | 'websocket', signal?: AbortSignal): CallContext {
  return { endpoint, region: broker.regions.local.name, signal };
}
