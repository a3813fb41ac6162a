import { z } from 'zod';
import { invalidArgument } from '../errors.ts';

/**
 * A subscription's PushConfig (google/pubsub/v1/pubsub.proto): where push delivery POSTs each
 * message, and how. An empty one is a pull subscription; the record stores a push config only
 * when it names an endpoint.
 */
export interface PushConfig {
  pushEndpoint: string;
  attributes?: Record<string, string>;
  /** Pub/Sub's JSON envelope (the default) ... */
  pubsubWrapper?: Record<string, never>;
  /** ... or the raw data, with the metadata as headers when writeMetadata. */
  noWrapper?: { writeMetadata?: boolean };
  /** Stored and returned; the broker does not mint Google-signed tokens (README). */
  oidcToken?: { serviceAccountEmail?: string; audience?: string };
}

export const pushConfigSchema = z.strictObject({
  pushEndpoint: z.string().optional(),
  attributes: z.record(z.string(), z.string()).optional(),
  pubsubWrapper: z.strictObject({}).optional(),
  noWrapper: z.strictObject({ writeMetadata: z.boolean().optional() }).optional(),
  oidcToken: z.strictObject({ serviceAccountEmail: z.string().optional(), audience: z.string().optional() }).optional(),
});

export type PushConfigInput = z.output<typeof pushConfigSchema>;

/** The stored push config for what a request gave; undefined (pull) when it names no endpoint. */
export function settlePushConfig(input: PushConfigInput | undefined): PushConfig | undefined {
  if (!input?.pushEndpoint) {
    if (input && Object.keys(input).length > 0) {
      throw invalidArgument('push_config.push_endpoint must be set when other push_config fields are.');
    }
    return undefined;
  }
  checkEndpointUrl(input.pushEndpoint);
  if (input.pubsubWrapper && input.noWrapper) {
    throw invalidArgument('push_config may set only one of pubsub_wrapper and no_wrapper.');
  }
  if (input.oidcToken?.audience && !input.oidcToken.serviceAccountEmail) {
    throw invalidArgument('push_config.oidc_token.service_account_email must be set.');
  }
  const config: PushConfig = { pushEndpoint: input.pushEndpoint };
  if (input.attributes && Object.keys(input.attributes).length > 0) config.attributes = input.attributes;
  if (input.noWrapper) config.noWrapper = input.noWrapper.writeMetadata ? { writeMetadata: true } : {};
  else config.pubsubWrapper = {};
  if (input.oidcToken?.serviceAccountEmail) config.oidcToken = input.oidcToken;
  return config;
}

function checkEndpointUrl(endpoint: string): void {
  let url: URL | undefined;
  try {
    url = new URL(endpoint);
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || !url.hostname) {
    throw invalidArgument(`Invalid push_config.push_endpoint: "${endpoint}" is not an http or https URL.`);
  }
}

/**
 * Which hosts push delivery may target (PUSH_ENDPOINT_HOSTS): any ('*', as Pub/Sub), or a list
 * of host names, matched case-insensitively (`.example.com` also matches its subdomains).
 */
export type PushHosts = '*' | readonly string[];

export function pushHostAllowed(endpoint: string, hosts: PushHosts): boolean {
  if (hosts === '*') return true;
  const host = new URL(endpoint).hostname.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  return hosts.some((allowed) => {
    const entry = allowed.toLowerCase();
    return entry.startsWith('.') ? host.endsWith(entry) || host === entry.slice(1) : host === entry;
  });
}

/** Refuses an endpoint whose host the broker may not push to. */
export function checkPushHost(config: PushConfig | undefined, hosts: PushHosts): void {
  if (config && !pushHostAllowed(config.pushEndpoint, hosts)) {
    throw invalidArgument(
      `Invalid push_config.push_endpoint: this broker does not push to ${new URL(config.pushEndpoint).host}.`,
    );
  }
}
