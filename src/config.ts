import { z } from 'zod';

/**
 * Broker configuration, read once from the environment. Defaults give a working
 * first run: the broker listens on 8085 (like the Pub/Sub emulator) and, without
 * REDIS_URL or REDIS_CLUSTER_NODES, starts and owns a local redis-server.
 */
const portNumber = z.coerce.number().int().min(1).max(65535);

const clusterNodes = z.string().transform((value, ctx) => {
  const nodes = value
    .split(',')
    .map((entry) => entry.trim())
    .filter(Boolean)
    .map((entry) => {
      const match = /^(.+):(\d+)$/.exec(entry);
      if (!match) {
        ctx.addIssue({ code: 'custom', message: `"${entry}" is not host:port` });
        return z.NEVER;
      }
      return { host: match[1], port: Number(match[2]) };
    });
  if (nodes.length === 0) ctx.addIssue({ code: 'custom', message: 'lists no host:port' });
  return nodes;
});

/** Region names as Pub/Sub spells them (us-east1, europe-west4); they also appear in ack IDs. */
const REGION_NAME = /^[a-z][a-z0-9-]{0,62}$/;

export interface RegionRedis {
  name: string;
  /** A standalone Redis ... */
  url?: string;
  /** ... or the seed nodes of a Redis Cluster. */
  clusterNodes?: { host: string; port: number }[];
}

/**
 * REGIONS: comma-separated `name=redis://host:port` entries (rediss:// for TLS), or
 * `name=cluster://host:port+host:port` for a region whose data lives on a Redis Cluster.
 */
const regionList = z.string().transform((value, ctx) => {
  const regions: RegionRedis[] = [];
  for (const entry of value
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)) {
    const match = /^([^=]+)=(.+)$/.exec(entry);
    const name = match?.[1].trim() ?? '';
    const target = match?.[2].trim() ?? '';
    if (!match || !REGION_NAME.test(name)) {
      ctx.addIssue({
        code: 'custom',
        message: `"${entry}" is not name=redis://host:port (names: lowercase letters, digits, "-")`,
      });
      continue;
    }
    if (regions.some((region) => region.name === name))
      ctx.addIssue({ code: 'custom', message: `region ${name} is listed twice` });
    if (target.startsWith('cluster://')) {
      const nodes = clusterNodes.safeParse(target.slice('cluster://'.length).replaceAll('+', ','));
      if (nodes.success) regions.push({ name, clusterNodes: nodes.data });
      else
        ctx.addIssue({ code: 'custom', message: `region ${name}: "${target}" is not cluster://host:port+host:port` });
    } else if (z.url({ protocol: /^rediss?$/ }).safeParse(target).success) {
      regions.push({ name, url: target });
    } else {
      ctx.addIssue({ code: 'custom', message: `region ${name}: "${target}" is not a redis:// URL` });
    }
  }
  if (regions.length === 0) ctx.addIssue({ code: 'custom', message: 'lists no region' });
  return regions;
});

/**
 * PUSH_ENDPOINT_HOSTS: `*` (any host, as Pub/Sub), or comma-separated host names push endpoints
 * may name; `.example.com` also allows its subdomains. Entries are kept as push-config.ts
 * compares them: lower case, an IPv6 address without its brackets, and no port (the setting
 * limits hosts, whatever port).
 */
const pushHosts = z.string().transform((value, ctx): '*' | string[] => {
  if (value.trim() === '*') return '*';
  const hosts = value
    .split(',')
    .map((entry) =>
      entry
        .trim()
        .toLowerCase()
        .replace(/^\[(.*)\]$/, '$1'),
    )
    .filter(Boolean);
  for (const host of hosts) {
    if (/^[^:]*:\d*$/.test(host))
      ctx.addIssue({ code: 'custom', message: `"${host}" names a port: list host names only` });
    else if (!/^\.?[a-z0-9_.:-]+$/.test(host))
      ctx.addIssue({ code: 'custom', message: `"${host}" is not a host name` });
  }
  if (hosts.length === 0) ctx.addIssue({ code: 'custom', message: 'lists no host (use * for any)' });
  return hosts;
});

/** The routes AUTH_OPEN_PATHS may open to callers without a credential. */
export const OPENABLE_PATHS = [
  '/healthz',
  '/readyz',
  '/metrics',
  '/openapi.yaml',
  '/examples/browser',
  '/examples/browser/app.js',
  '/client/pubsub-client.js',
] as const;

/** A comma-separated list of entries, each checked by `entry`. */
const commaList = <T extends z.ZodType<string>>(entry: T) =>
  z.string().transform((value, ctx): z.infer<T>[] => {
    const entries: z.infer<T>[] = [];
    for (const part of value
      .split(',')
      .map((item) => item.trim())
      .filter(Boolean)) {
      const checked = entry.safeParse(part);
      if (checked.success) entries.push(checked.data);
      else ctx.addIssue({ code: 'custom', message: `"${part}": ${checked.error.issues[0].message}` });
    }
    return entries;
  });

const flag = z.enum(['true', 'false']).transform((value) => value === 'true');

/** A limit: a whole number of at least 1 (src/broker/limits.ts says what each one bounds). */
const limit = z.coerce.number().int().min(1);

const environmentSchema = z.object({
  PORT: portNumber.default(8085),
  HOST: z.string().min(1).default('127.0.0.1'),
  REDIS_URL: z.url({ protocol: /^rediss?$/ }).optional(),
  REDIS_CLUSTER_NODES: clusterNodes.optional(),
  REDIS_SERVER_BIN: z.string().min(1).optional(),
  REDIS_PORT: portNumber.default(6399),
  REDIS_APPENDFSYNC: z.enum(['everysec', 'always']).default('everysec'),
  DATA_DIR: z.string().min(1).default('./data'),
  KEY_PREFIX: z
    .string()
    .regex(/^[A-Za-z0-9_.-]+$/, 'may hold only letters, digits, "_", "." and "-"')
    .default('ps'),
  PULL_WAIT_SECONDS: z.coerce.number().min(0).max(600).default(20),
  REGION: z.string().regex(REGION_NAME, 'is not a region name (lowercase letters, digits, "-")').optional(),
  REGIONS: regionList.optional(),
  PUSH_ENDPOINT_HOSTS: pushHosts.default('*'),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  /** Bearer tokens and the principals they name (format: src/auth/token-file.ts, README). */
  AUTH_TOKENS_FILE: z.string().min(1).optional(),
  /** JWTs signed by a key of this JWKS file, with this issuer and audience (src/auth/jwt.ts). */
  AUTH_JWKS_FILE: z.string().min(1).optional(),
  AUTH_JWT_ISSUER: z.string().min(1).optional(),
  AUTH_JWT_AUDIENCE: z.string().min(1).optional(),
  /** Project-level IAM bindings from the configuration (format: src/auth/policy-file.ts, README). */
  IAM_POLICY_FILE: z.string().min(1).optional(),
  /**
   * Origins of browser apps served elsewhere that may call the broker (CORS, and the WebSocket
   * upgrade's Origin): `https://app.example.com`, comma-separated; none by default.
   */
  CORS_ORIGINS: commaList(
    z
      .string()
      .toLowerCase()
      .regex(/^https?:\/\/[^/\s?#]+$/, 'is not an origin (scheme://host[:port], no path)'),
  ).default([]),
  /** With both: HTTPS, WSS and gRPC over TLS on the one port (PEM files). */
  TLS_CERT_FILE: z.string().min(1).optional(),
  TLS_KEY_FILE: z.string().min(1).optional(),
  /** Listening beyond loopback without authentication needs this said explicitly. */
  ALLOW_UNAUTHENTICATED: flag.default(false),
  /**
   * Limits that protect the broker (README, _Limits_), each refused with RESOURCE_EXHAUSTED. The
   * resource counts follow Pub/Sub's quotas; the rest are generous but finite.
   */
  MAX_TOPICS_PER_PROJECT: limit.default(10_000),
  MAX_SUBSCRIPTIONS_PER_PROJECT: limit.default(10_000),
  MAX_SUBSCRIPTIONS_PER_TOPIC: limit.default(10_000),
  MAX_SNAPSHOTS_PER_PROJECT: limit.default(5_000),
  MAX_STREAMS_PER_SUBSCRIPTION: limit.default(1_000),
  MAX_STREAMS: limit.default(10_000),
  MAX_LONG_POLLS: limit.default(10_000),
  /** Open connections (HTTP, WebSocket and gRPC alike); beyond it a new connection is closed at once. */
  MAX_CONNECTIONS: limit.default(10_000),
  /** MiB of HTTP request bodies received at once; a request whose body does not fit is refused. */
  MAX_BODY_MIB_IN_FLIGHT: limit.default(1024),
  /** Requests per second of one principal (or one address, without authentication); off when absent. */
  RATE_LIMIT_PER_SECOND: z.coerce.number().positive().optional(),
  /**
   * Routes that answer without a credential while authentication is on. Probes of orchestrators
   * carry no token and these two reveal only that the broker is up and ready; /metrics names
   * every subscription, so it needs a token unless listed (Prometheus can send one).
   */
  AUTH_OPEN_PATHS: commaList(z.enum(OPENABLE_PATHS, { error: `is not one of ${OPENABLE_PATHS.join(', ')}` })).default([
    '/healthz',
    '/readyz',
  ]),
});

export type Config = z.infer<typeof environmentSchema>;

export class ConfigError extends Error {}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const set = Object.fromEntries(Object.entries(env).filter(([, value]) => value !== undefined && value !== ''));
  const parsed = environmentSchema.safeParse(set);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => `  ${issue.path.join('.')}: ${issue.message}`).join('\n');
    throw new ConfigError(`Invalid configuration in the environment:\n${problems}`);
  }
  const config = parsed.data;
  if (config.REDIS_URL && config.REDIS_CLUSTER_NODES) {
    throw new ConfigError('Set REDIS_URL or REDIS_CLUSTER_NODES, not both.');
  }
  checkRegions(config);
  checkJwtSettings(config);
  if (config.IAM_POLICY_FILE && !authenticates(config)) {
    throw new ConfigError(
      'IAM_POLICY_FILE grants roles to authenticated principals: set AUTH_TOKENS_FILE or the AUTH_JWT_* settings too.',
    );
  }
  if (Boolean(config.TLS_CERT_FILE) !== Boolean(config.TLS_KEY_FILE)) {
    throw new ConfigError('Set TLS_CERT_FILE and TLS_KEY_FILE together to serve TLS.');
  }
  checkExposure(config);
  return config;
}

/** Whether any authentication mode is configured (else every caller is let in). */
export const authenticates = (config: Config): boolean =>
  config.AUTH_TOKENS_FILE !== undefined || config.AUTH_JWKS_FILE !== undefined;

/** A JWT is checked against its keys, issuer and audience: all three, or none. */
function checkJwtSettings(config: Config): void {
  const given = [config.AUTH_JWKS_FILE, config.AUTH_JWT_ISSUER, config.AUTH_JWT_AUDIENCE].filter(Boolean).length;
  if (given !== 0 && given !== 3) {
    throw new ConfigError('Set AUTH_JWKS_FILE, AUTH_JWT_ISSUER and AUTH_JWT_AUDIENCE together to accept JWTs.');
  }
}

/** Loopback addresses only this machine reaches. A host name other than localhost may resolve to anything. */
export function isLoopback(host: string): boolean {
  const address = host.replace(/^\[(.*)\]$/, '$1').toLowerCase();
  return address === 'localhost' || address === '::1' || /^(::ffff:)?127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(address);
}

/** The fail-safe: a broker reachable from other machines authenticates, unless told otherwise. */
function checkExposure(config: Config): void {
  if (isLoopback(config.HOST) || authenticates(config) || config.ALLOW_UNAUTHENTICATED) return;
  throw new ConfigError(
    `Refusing to listen on ${config.HOST} without authentication: anyone who reaches it could read and ` +
      'delete every topic and subscription. Set AUTH_TOKENS_FILE (bearer tokens) or AUTH_JWKS_FILE, ' +
      'AUTH_JWT_ISSUER and AUTH_JWT_AUDIENCE (JWTs) to authenticate callers, ' +
      'or set ALLOW_UNAUTHENTICATED=true to serve it open on purpose, or listen on 127.0.0.1.',
  );
}

/** REGION names this endpoint's entry of REGIONS; REDIS_URL, if also set, must be that entry. */
function checkRegions(config: Config): void {
  if (!config.REGION && !config.REGIONS) return;
  if (!config.REGION || !config.REGIONS) {
    throw new ConfigError("Set both REGION (this endpoint's region) and REGIONS (every region's Redis), or neither.");
  }
  const local = config.REGIONS.find((region) => region.name === config.REGION);
  if (!local) {
    throw new ConfigError(
      `REGION ${config.REGION} is not listed in REGIONS (${config.REGIONS.map((r) => r.name).join(', ')}).`,
    );
  }
  if (config.REDIS_CLUSTER_NODES) {
    throw new ConfigError(
      'With REGIONS, give a region on Redis Cluster as name=cluster://host:port+host:port, not REDIS_CLUSTER_NODES.',
    );
  }
  if (config.REDIS_URL && config.REDIS_URL !== local.url) {
    throw new ConfigError(
      `REDIS_URL (${config.REDIS_URL}) is not region ${config.REGION}'s Redis in REGIONS (${local.url ?? 'a cluster'}).`,
    );
  }
}
