// Authentication for tests: a bearer tokens file written in a temporary directory, and the
// Authentication the broker makes of it, exactly as AUTH_TOKENS_FILE would.

import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Authentication } from '../../src/auth/authentication.ts';
import { loadConfig } from '../../src/config.ts';
import { tempDir } from './processes.ts';

export const ALICE = 'user:alice@example.com';
export const ALICE_TOKEN = 'alice-token-0123456789';
export const ROBOT = 'serviceAccount:robot@p.iam.gserviceaccount.com';
export const ROBOT_TOKEN = 'robot-token-0123456789';

/** A tokens file naming ALICE (a plain token) and ROBOT (its SHA-256 only). */
export const TOKENS_FILE_TEXT = [
  '# principal  token (or sha256:<hex> of it)',
  `${ALICE} ${ALICE_TOKEN}`,
  '',
  `${ROBOT} sha256:${createHash('sha256').update(ROBOT_TOKEN).digest('hex')}`,
].join('\n');

/** Writes `text` as a tokens file in a fresh directory; its path. */
export function writeTokensFile(t: { teardown(fn: () => unknown): void }, text = TOKENS_FILE_TEXT): string {
  const path = join(tempDir(t, 'tokens'), 'tokens');
  writeFileSync(path, text);
  return path;
}

/** The Authentication of a tokens file (TOKENS_FILE_TEXT unless given), with `env` settings beside it. */
export function tokenAuthentication(
  t: { teardown(fn: () => unknown): void },
  { text, env = {} }: { text?: string; env?: Record<string, string> } = {},
): Authentication {
  const log = { info: () => {}, warn: () => {} };
  return Authentication.fromConfig(loadConfig({ AUTH_TOKENS_FILE: writeTokensFile(t, text), ...env }), log)!;
}

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
