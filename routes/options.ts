import type { Broker } from '../src/broker/broker.ts';

/** What every route module is registered with. */
export interface RouteOptions {
  broker: Broker;
}

/** Path prefixes. Resource IDs never contain ':' or '/', so a custom verb follows the last ':'. */
export const PROJECT_PATH = '/v1/projects/:project([^:/]+)';
export const TOPIC_PATH = '/v1/projects/:project/topics/:topic([^:/]+)';
export const SUBSCRIPTION_PATH = '/v1/projects/:project/subscriptions/:subscription([^:/]+)';
export const SNAPSHOT_PATH = '/v1/projects/:project/snapshots/:snapshot([^:/]+)';
