import { z } from 'zod';

/**
 * Broker configuration, read once from the environment. Defaults give a working
 * first run: the broker listens on 8085 (like the Pub/Sub emulator) and, without
 * REDIS_URL or REDIS_CLUSTER_NODES, starts and owns a local redis-server.
 */
const portNumber = z.coerce.number().int().min(1).max(65535);

const clusterNodes = z
  .string()
  .transform((value, ctx) => {
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
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
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
  if (parsed.data.REDIS_URL && parsed.data.REDIS_CLUSTER_NODES) {
    throw new ConfigError('Set REDIS_URL or REDIS_CLUSTER_NODES, not both.');
  }
  return parsed.data;
}
