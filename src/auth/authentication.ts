import { readFileSync, unwatchFile, watchFile } from 'node:fs';
import { authenticates, type Config } from '../config.ts';
import { unauthenticated } from '../errors.ts';
import type { AuthorizationSettings } from '../broker/authorization.ts';
import { jwtPrincipal, type JwtSettings, type KeySet, looksLikeJwt, parseJwks } from './jwt.ts';
import { AUTHENTICATED_ARE_ADMINS, type ConfiguredBindings, parsePolicyFile } from './policy-file.ts';
import { parseTokenFile, type TokenHashes, tokenHash } from './token-file.ts';

/**
 * Who is calling: every front end hands the bearer credential of a call, taken from its own wire
 * format (an Authorization header, a WebSocket subprotocol, gRPC metadata), to the one
 * `Authentication` of the process, and puts the principal it answers into the call's
 * CallContext. Without any authentication setting there is no `Authentication` at all, and
 * calls carry no principal.
 */
export interface AuthenticationLog {
  info(message: string): void;
  warn(message: string): void;
}

/** How often the credential files are checked for a change (they are also re-read on SIGHUP). */
const WATCH_INTERVAL_MS = 1_000;

/** A credential file: the setting that names it, its path, and what the broker makes of its text. */
interface CredentialFile<T> {
  setting: string;
  path: string;
  parse(text: string): T;
  /** What it holds, as the log says it. */
  describe(value: T): string;
}

/** What watching and reloading need of a loaded file, whatever it holds. */
interface Reloadable {
  readonly file: { path: string };
  reload(log: AuthenticationLog): void;
}

/** A credential file's current contents, re-read on demand. */
class Loaded<T> {
  value: T;

  constructor(readonly file: CredentialFile<T>) {
    try {
      this.value = file.parse(readFileSync(file.path, 'utf8'));
    } catch (error) {
      throw new AuthenticationSetupError(`${file.setting} ${file.path}: ${(error as Error).message}`);
    }
  }

  /**
   * Reads the file again. One that cannot be read or parsed leaves the credentials as they were
   * (a half-written file must not lock every caller out), and says so in the log.
   */
  reload(log: AuthenticationLog): void {
    const { setting, path } = this.file;
    try {
      this.value = this.file.parse(readFileSync(path, 'utf8'));
      log.info(`${setting} reloaded: ${this.file.describe(this.value)}`);
    } catch (error) {
      log.warn(`${setting} ${path} not reloaded, the previous credentials stay: ${(error as Error).message}`);
    }
  }
}

export class Authentication {
  private readonly tokens?: Loaded<TokenHashes>;
  private readonly jwt?: { keys: Loaded<KeySet>; settings: JwtSettings };
  private readonly policies?: Loaded<ConfiguredBindings>;

  private constructor(
    config: Config,
    /** Routes that answer without a credential (AUTH_OPEN_PATHS). */
    readonly openPaths: ReadonlySet<string>,
    private readonly log: AuthenticationLog,
  ) {
    if (config.AUTH_TOKENS_FILE) {
      this.tokens = new Loaded({
        setting: 'AUTH_TOKENS_FILE',
        path: config.AUTH_TOKENS_FILE,
        parse: parseTokenFile,
        describe: (hashes) => `${hashes.size} token(s)`,
      });
    }
    if (config.AUTH_JWKS_FILE && config.AUTH_JWT_ISSUER && config.AUTH_JWT_AUDIENCE) {
      const keys = new Loaded({
        setting: 'AUTH_JWKS_FILE',
        path: config.AUTH_JWKS_FILE,
        parse: parseJwks,
        describe: () => 'its keys',
      });
      this.jwt = { keys, settings: { issuer: config.AUTH_JWT_ISSUER, audience: config.AUTH_JWT_AUDIENCE } };
    }
    if (config.IAM_POLICY_FILE) {
      this.policies = new Loaded({
        setting: 'IAM_POLICY_FILE',
        path: config.IAM_POLICY_FILE,
        parse: parsePolicyFile,
        describe: (bindings) => `bindings for ${bindings.size} project(s)`,
      });
    }
  }

  /**
   * What authorization needs of it: calls are checked, against the policy file's bindings as
   * they are now (every authenticated principal an admin without the file).
   */
  authorization(): AuthorizationSettings {
    return { enforce: true, configured: () => this.policies?.value ?? AUTHENTICATED_ARE_ADMINS };
  }

  /**
   * The authentication the settings ask for, its files read (an unreadable or malformed one
   * throws, naming the setting); undefined when no mode is configured.
   */
  static fromConfig(config: Config, log: AuthenticationLog): Authentication | undefined {
    if (!authenticates(config)) return undefined;
    return new Authentication(config, new Set(config.AUTH_OPEN_PATHS), log);
  }

  /**
   * The principal a bearer token names: a JWT's when JWTs are configured and it is one, else the
   * tokens file's. UNAUTHENTICATED when it is missing or names none.
   */
  async principalOf(token: string | undefined): Promise<string> {
    if (token === undefined) throw missingCredential();
    if (this.jwt && looksLikeJwt(token)) return jwtPrincipal(token, this.jwt.keys.value, this.jwt.settings);
    const principal = this.tokens?.value.get(tokenHash(token));
    if (principal === undefined) throw unauthenticated('Request had invalid authentication credentials.');
    return principal;
  }

  private files(): Reloadable[] {
    const files: Reloadable[] = [];
    if (this.tokens) files.push(this.tokens);
    if (this.jwt) files.push(this.jwt.keys);
    if (this.policies) files.push(this.policies);
    return files;
  }

  /** Reads every credential file again (SIGHUP). */
  reload(): void {
    for (const file of this.files()) file.reload(this.log);
  }

  /** Reloads a file whenever it changes (also when it is replaced, as editors and secret mounts do). */
  watch(): void {
    for (const file of this.files()) {
      watchFile(file.file.path, { interval: WATCH_INTERVAL_MS, persistent: false }, (now, before) => {
        if (now.mtimeMs !== before.mtimeMs || now.ino !== before.ino || now.size !== before.size) {
          file.reload(this.log);
        }
      });
    }
  }

  close(): void {
    for (const file of this.files()) unwatchFile(file.file.path);
  }
}

export class AuthenticationSetupError extends Error {}

const missingCredential = () =>
  unauthenticated(
    'Request is missing required authentication credential. Expected a bearer token: Authorization: Bearer <token>.',
  );

/**
 * The token of an Authorization header (or gRPC `authorization` metadata) value: undefined when
 * there is none; UNAUTHENTICATED for another scheme than Bearer.
 */
export function bearerToken(authorization: string | undefined): string | undefined {
  if (authorization === undefined) return undefined;
  const match = /^Bearer +(\S+) *$/i.exec(authorization);
  if (!match)
    throw unauthenticated('Request had invalid authentication credentials. Expected Authorization: Bearer <token>.');
  return match[1];
}
