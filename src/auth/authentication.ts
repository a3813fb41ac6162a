import { readFileSync, unwatchFile, watchFile } from 'node:fs';
import type { Config } from '../config.ts';
import { unauthenticated } from '../errors.ts';
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

export class Authentication {
  private tokens: TokenHashes;

  private constructor(
    private readonly tokensFile: string,
    /** Routes that answer without a credential (AUTH_OPEN_PATHS). */
    readonly openPaths: ReadonlySet<string>,
    private readonly log: AuthenticationLog,
  ) {
    this.tokens = parseTokenFile(readFileSync(tokensFile, 'utf8'));
  }

  /**
   * The authentication the settings ask for, its files read (an unreadable or malformed one
   * throws, naming the setting); undefined when no mode is configured.
   */
  static fromConfig(config: Config, log: AuthenticationLog): Authentication | undefined {
    if (!config.AUTH_TOKENS_FILE) return undefined;
    try {
      return new Authentication(config.AUTH_TOKENS_FILE, new Set(config.AUTH_OPEN_PATHS), log);
    } catch (error) {
      throw new AuthenticationSetupError(`AUTH_TOKENS_FILE ${config.AUTH_TOKENS_FILE}: ${(error as Error).message}`);
    }
  }

  /** The principal a bearer token names; UNAUTHENTICATED when it is missing or names none. */
  async principalOf(token: string | undefined): Promise<string> {
    if (token === undefined) throw missingCredential();
    const principal = this.tokens.get(tokenHash(token));
    if (principal === undefined) throw unauthenticated('Request had invalid authentication credentials.');
    return principal;
  }

  /**
   * Reads the files again. A file that cannot be read or parsed leaves the credentials as they
   * were (a half-written file must not lock every caller out), and says so in the log.
   */
  reload(): void {
    try {
      this.tokens = parseTokenFile(readFileSync(this.tokensFile, 'utf8'));
      this.log.info(`AUTH_TOKENS_FILE reloaded: ${this.tokens.size} token(s)`);
    } catch (error) {
      this.log.warn(
        `AUTH_TOKENS_FILE ${this.tokensFile} not reloaded, the previous tokens stay: ${(error as Error).message}`,
      );
    }
  }

  /** Reloads whenever a file changes (also when it is replaced, as editors and secret mounts do). */
  watch(): void {
    watchFile(this.tokensFile, { interval: WATCH_INTERVAL_MS, persistent: false }, (now, before) => {
      if (now.mtimeMs !== before.mtimeMs || now.ino !== before.ino || now.size !== before.size) this.reload();
    });
  }

  close(): void {
    unwatchFile(this.tokensFile);
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
