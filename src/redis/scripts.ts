import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import type { RedisClient } from './client.ts';
import { packagePath } from '../paths.ts';
import { BinaryArgsCommand, type BulkStrings } from './binary-command.ts';
import { masterNodes } from './nodes.ts';
import { preludeFor } from './prelude.ts';

/**
 * Loads every script in src/lua, prepends what it uses of the shared prelude, and registers each with
 * ioredis (EVALSHA, falling back to EVAL after a Redis restart empties the script cache).
 * `Scripts.run` / `runEncoded` / `runStaged` pass KEYS and ARGV explicitly: every key a script
 * touches is declared in KEYS. Their only callers are the wrappers in calls/, one per script:
 * each builds its script's KEYS from the key builders (keys.ts), takes its ARGV as named
 * parameters, and decodes the reply into a named result.
 */

const LUA_DIR = `${packagePath('src', 'lua')}/`;
const PRELUDE_FILE = 'prelude.lua';

export const SCRIPT_NAMES = [
  'publish',
  'pull',
  'acknowledge',
  'acknowledge-ordered',
  'modify-ack-deadline',
  'finish-forwarding',
  'cancel-forwarding',
  'attach-subscription',
  'touch-subscription',
  'drop-subscription',
  'delete-topic-data',
  'put-topic',
  'put-data-owner',
  'put-project-policy',
  'reschedule-expiry',
  'mark-cleanup',
  'finish-cleanup',
  'seek',
  'expire-log',
  'settle-log',
  'mark-log',
  'create-snapshot',
  'drop-snapshot',
  'read-backlog',
  'count-backlog',
  'index-holds',
  'acknowledge-and-publish',
  'publish-batch',
] as const;
export type ScriptName = (typeof SCRIPT_NAMES)[number];

export function readScriptSource(name: ScriptName): string {
  return readFileSync(`${LUA_DIR}${name}.lua`, 'utf8');
}

export function listScriptFiles(): string[] {
  return readdirSync(LUA_DIR).filter((file) => file.endsWith('.lua') && file !== PRELUDE_FILE);
}

/**
 * Scripts that run others as steps, and those steps: each step's source goes ahead of the script
 * as a function `step_<name>(KEYS, ARGV)`, whose parameters stand for the globals the step reads,
 * so that it does exactly what it does alone on the KEYS and ARGV given. The prelude definitions
 * the steps use are the script's, made once per call however many times a step runs (a
 * definition that reads KEYS or ARGV itself would read the script's, so none may be used).
 */
const STEPS: Partial<Record<ScriptName, readonly ScriptName[]>> = {
  'acknowledge-and-publish': ['publish', 'acknowledge', 'acknowledge-ordered'],
  'publish-batch': ['publish'],
};

/** How long a staging hash outlives a publish whose script never ran (see runStaged). */
const STAGING_TTL_SECONDS = 60;

const commandName = (name: ScriptName) => `pubsub_${name.replaceAll('-', '_')}`;

type Arg = string | number | Buffer;
type ScriptCaller = (numberOfKeys: number, ...args: Arg[]) => Promise<unknown>;

/**
 * Every script as sent to Redis: the part of the prelude it uses (prelude.ts), its steps
 * (STEPS), then the script. Read from disk once per process.
 */
let scriptSources: Map<ScriptName, string> | undefined;
function loadScriptSources(): Map<ScriptName, string> {
  if (!scriptSources) {
    const prelude = readFileSync(`${LUA_DIR}${PRELUDE_FILE}`, 'utf8');
    const step = (name: ScriptName) =>
      `local function step_${name.replaceAll('-', '_')}(KEYS, ARGV)\n${readScriptSource(name)}\nend\n`;
    scriptSources = new Map(
      SCRIPT_NAMES.map((name) => {
        const source = `${(STEPS[name] ?? []).map(step).join('')}${readScriptSource(name)}`;
        const definitions = preludeFor(prelude, source);
        if (STEPS[name] && /\b(KEYS|ARGV)\b/.test(definitions)) {
          throw new Error(`${name}: its steps use a prelude definition that reads KEYS or ARGV`);
        }
        return [name, `${definitions}\n${source}`];
      }),
    );
  }
  return scriptSources;
}

export class Scripts {
  private readonly sources = loadScriptSources();
  private readonly shas = new Map(
    [...this.sources].map(([name, lua]) => [name, createHash('sha1').update(lua).digest('hex')]),
  );

  constructor(private readonly redis: RedisClient) {
    for (const [name, lua] of this.sources) {
      if (typeof (redis as unknown as Record<string, unknown>)[commandName(name)] === 'function') continue;
      redis.defineCommand(commandName(name), { lua });
    }
  }

  /** Runs a script; bulk replies come back as strings. */
  run(name: ScriptName, keys: string[], args: Arg[]): Promise<unknown> {
    return this.caller(commandName(name))(keys.length, ...keys, ...args);
  }

  /** As run, but bulk replies come back as Buffers: for a script that answers binary data. */
  runForBuffers(name: ScriptName, keys: string[], args: Arg[]): Promise<unknown> {
    return this.caller(`${commandName(name)}Buffer`)(keys.length, ...keys, ...args);
  }

  /**
   * Runs a script whose arguments end in many large binary ones (publish's message bodies),
   * written in one pass (binary-command.ts) instead of by ioredis's per-argument serialization:
   * ~1 µs less broker CPU per published message. It sends EVALSHA; when the script cache was
   * emptied (NOSCRIPT: a Redis restart, SCRIPT FLUSH) it loads every script and sends the call again.
   */
  async runEncoded(name: ScriptName, keys: string[], args: string[], trailing: BulkStrings): Promise<unknown> {
    const routing = this.evalshaHead(name, keys);
    return this.loadingScriptsOnNoscript(
      () =>
        this.redis.sendCommand(
          new BinaryArgsCommand('evalsha', [...routing, ...args], trailing, routing),
        ) as Promise<unknown>,
    );
  }

  /**
   * Runs a script whose large binary input (publish's message bodies) is first written to a
   * staging hash under a key nobody else knows: `HSET stagingKey 000 b0 001 b1 ...`, `EXPIRE
   * stagingKey`, then the script, which takes the hash over (RENAME) or deletes it. Redis never
   * makes Lua strings of the bodies this way (see publish.lua).
   *
   * The three go out together on the staging key's connection, so Redis normally runs them in
   * this order; other clients' commands may run in between, but the staging key means nothing to
   * them, so the state change is still the script alone. Not a MULTI: ioredis's transactions cost
   * the broker ~100 µs per call (a pipeline copies the whole payload again). When the order breaks
   * (ioredis Cluster retries each command on its own after a failover, so the script may come
   * first: it then finds the bodies missing and writes nothing) or the script fails, the staging
   * key is deleted once all three have answered; the TTL covers a broker that stops before that.
   * On NOSCRIPT every script is loaded and all three are sent again.
   */
  async runStaged(
    name: ScriptName,
    keys: string[],
    args: string[],
    stagingKey: string,
    trailing: BulkStrings,
  ): Promise<unknown> {
    const routing = this.evalshaHead(name, keys);
    return this.loadingScriptsOnNoscript(async () => {
      const [staged, , script] = await Promise.allSettled([
        this.redis.sendCommand(new BinaryArgsCommand('hset', [stagingKey], trailing, [stagingKey])),
        this.redis.expire(stagingKey, STAGING_TTL_SECONDS),
        this.redis.evalsha(...routing, ...args),
      ]);
      // The script's answer is what happened, whatever the other two said (an HSET whose reply
      // came after its timeout still wrote the bodies the script took over).
      if (script.status === 'fulfilled') return script.value;
      await this.redis.del(stagingKey).catch(() => undefined); // best effort: the TTL is the fallback
      // A failed HSET (say, out of memory) is why the script found no bodies.
      throw staged.status === 'rejected' ? staged.reason : script.reason;
    });
  }

  /** EVALSHA's arguments up to the script's own ARGV: all ioredis needs for routing. */
  private evalshaHead(name: ScriptName, keys: string[]): [string, string, ...string[]] {
    return [this.shas.get(name)!, String(keys.length), ...keys];
  }

  /** Sends again after loading every script when the script cache was emptied (NOSCRIPT). */
  private async loadingScriptsOnNoscript(send: () => Promise<unknown>): Promise<unknown> {
    try {
      return await send();
    } catch (error) {
      if (!(error instanceof Error) || !error.message.startsWith('NOSCRIPT')) throw error;
      await this.loadAll();
      return send();
    }
  }

  /** Loads every script into the Redis script cache (used by readiness checks). */
  async loadAll(): Promise<void> {
    await Promise.all(
      masterNodes(this.redis).flatMap((node) => [...this.sources.values()].map((lua) => node.script('LOAD', lua))),
    );
  }

  private caller(command: string): ScriptCaller {
    const fn = (this.redis as unknown as Record<string, ScriptCaller>)[command];
    return fn.bind(this.redis);
  }
}
