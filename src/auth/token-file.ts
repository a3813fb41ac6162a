import { createHash } from 'node:crypto';

/**
 * The bearer tokens file (AUTH_TOKENS_FILE): one token per line, `<principal> <credential>`,
 * where the principal is `user:<email>` or `serviceAccount:<email>` and the credential is either
 * `sha256:<64 hex digits>` (the SHA-256 of the token, e.g. `printf %s "$TOKEN" | sha256sum`), so
 * that the file never holds a token, or the token itself (letters, digits and `-._~+/`, ending in
 * `=` padding if any; at least 16 characters). Blank lines and lines starting with `#` are
 * ignored. Only hashes are kept in memory: a token read from the file is hashed and dropped.
 */
export type TokenHashes = ReadonlyMap<string, string>;

const PRINCIPAL = /^(user|serviceAccount):[^\s:]+$/;
const HASHED = /^sha256:([0-9a-fA-F]{64})$/;
/** RFC 6750's token68: what an Authorization: Bearer header can carry. */
export const BEARER_TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;
const MIN_TOKEN_LENGTH = 16;

export class TokenFileError extends Error {}

/** The hex SHA-256 of a token: how tokens are stored and looked up. */
export const tokenHash = (token: string): string => createHash('sha256').update(token).digest('hex');

/** Token hash → principal, from the file's text; throws TokenFileError naming the first bad line. */
export function parseTokenFile(text: string): TokenHashes {
  const hashes = new Map<string, string>();
  text.split('\n').forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const fail = (problem: string) => {
      throw new TokenFileError(`line ${index + 1}: ${problem}`);
    };
    const [principal, credential, ...rest] = line.split(/\s+/);
    if (credential === undefined || rest.length > 0) fail('expected "<principal> <token or sha256:hash>"');
    if (!PRINCIPAL.test(principal)) fail(`"${principal}" is not user:<email> or serviceAccount:<email>`);
    const hashed = HASHED.exec(credential);
    if (!hashed && credential.startsWith('sha256:')) fail('a sha256: hash is 64 hex digits');
    // The message never quotes the credential: the file may hold plain tokens.
    if (!hashed && !BEARER_TOKEN.test(credential)) fail('the token has characters a bearer token cannot carry');
    if (!hashed && credential.length < MIN_TOKEN_LENGTH)
      fail(`the token is shorter than ${MIN_TOKEN_LENGTH} characters`);
    const hash = hashed ? hashed[1].toLowerCase() : tokenHash(credential);
    if (hashes.has(hash)) fail('the same token is listed twice');
    hashes.set(hash, principal);
  });
  return hashes;
}
