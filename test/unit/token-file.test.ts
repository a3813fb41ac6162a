// The bearer tokens file (src/auth/token-file.ts): what a line may hold, hashes only in memory,
// and every malformed line refused with its number, never quoting a token.

import { createHash } from 'node:crypto';
import t from 'tap';
import { parseTokenFile, TokenFileError } from '../../src/auth/token-file.ts';

function thrown(fn: () => unknown): Error | undefined {
  try {
    fn();
  } catch (error) {
    return error as Error;
  }
  return undefined;
}

const sha256 = (token: string) => createHash('sha256').update(token).digest('hex');

t.test('plain and hashed tokens map their SHA-256 to a principal; comments and blanks are skipped', async (t) => {
  const hashes = parseTokenFile(
    [
      '# a comment',
      '',
      '  user:alice@example.com   alice-token-0123456789  ',
      `serviceAccount:ci@p.iam.gserviceaccount.com sha256:${sha256('ci-token-0123456789').toUpperCase()}`,
      'user:jwt-like@example.com eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl',
      'user:padded@example.com YWxpY2UtdG9rZW4tMDEyMzQ1Njc4OQ==',
    ].join('\n'),
  );
  t.same(
    [...hashes],
    [
      [sha256('alice-token-0123456789'), 'user:alice@example.com'],
      [sha256('ci-token-0123456789'), 'serviceAccount:ci@p.iam.gserviceaccount.com'],
      [sha256('eyJhbGciOi.eyJzdWIiOi.c2lnbmF0dXJl'), 'user:jwt-like@example.com'],
      [sha256('YWxpY2UtdG9rZW4tMDEyMzQ1Njc4OQ=='), 'user:padded@example.com'],
    ],
  );
  t.notOk(
    [...hashes.keys(), ...hashes.values()].some((entry) => entry.includes('alice-token')),
    'no token is kept, only its hash',
  );
});

t.test('a malformed line is refused with its number, and the message never quotes a token', async (t) => {
  const secret = 'very-secret-token-0123456789';
  const refused: [string, RegExp][] = [
    ['user:a@example.com', /line 1: expected "<principal> <token or sha256:hash>"/],
    [`user:a@example.com ${secret} extra`, /line 1: expected/],
    [`group:a@example.com ${secret}`, /line 1: "group:a@example.com" is not user:<email> or serviceAccount:<email>/],
    [`alice ${secret}`, /is not user:<email> or serviceAccount:<email>/],
    [`user:a@example.com ${secret}"`, /line 1: the token has characters a bearer token cannot carry/],
    ['user:a@example.com short', /line 1: the token is shorter than 16 characters/],
    ['user:a@example.com sha256:abc', /line 1: a sha256: hash is 64 hex digits/],
    [`# ok\nuser:a@example.com ${secret}\nuser:b@example.com ${secret}`, /line 3: the same token is listed twice/],
    [`user:a@example.com ${secret}\nuser:b@example.com sha256:${sha256(secret)}`, /line 2: the same token/],
  ];
  for (const [text, message] of refused) {
    const error = thrown(() => parseTokenFile(text));
    t.ok(error instanceof TokenFileError, `${text}: refused`);
    t.match(error?.message, message, text);
    t.notOk(error?.message.includes(secret), 'the message does not quote the token');
  }
});
