// JWTs (AUTH_JWKS_FILE, AUTH_JWT_ISSUER, AUTH_JWT_AUDIENCE) verified with jose: valid tokens and
// the principal their claims name; expired, wrong audience, wrong issuer, bad signature, unknown
// key; the JWKS file re-read; the tokens file beside it. Keys are made by the test. REST through
// app.inject (every front end asks the same Authentication: tokens.test.ts). Standalone Redis.

import { exportJWK, generateKeyPair, SignJWT, type JWTPayload } from 'jose';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { buildApp } from '../../src/app.ts';
import { Authentication } from '../../src/auth/authentication.ts';
import type { CallContext } from '../../src/broker/call-context.ts';
import { loadConfig } from '../../src/config.ts';
import { ALICE, ALICE_TOKEN, bearer, writeTokensFile } from '../helpers/auth.ts';
import { tempDir } from '../helpers/processes.ts';
import { redisTargets, uniquePrefix } from '../helpers/redis.ts';

const ISSUER = 'https://issuer.example.com';
const AUDIENCE = 'pubsub-broker';

async function signingKey(kid: string) {
  const { privateKey, publicKey } = await generateKeyPair('ES256');
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: 'ES256', use: 'sig' } };
}
type SigningKey = Awaited<ReturnType<typeof signingKey>>;

function sign(
  key: SigningKey,
  claims: JWTPayload,
  options: { issuer?: string; audience?: string; expires?: string | number } = {},
) {
  return new SignJWT(claims)
    .setProtectedHeader({ alg: 'ES256', kid: key.kid })
    .setIssuer(options.issuer ?? ISSUER)
    .setAudience(options.audience ?? AUDIENCE)
    .setIssuedAt()
    .setExpirationTime(options.expires ?? '5m')
    .sign(key.privateKey);
}

const key = await signingKey('key-1');
const otherKey = await signingKey('key-1'); // the same kid: only its signature tells it apart
const unlistedKey = await signingKey('key-9');

t.test('JWTs over REST: the principal of valid ones, and each way one is refused', async (t) => {
  const dir = tempDir(t, 'jwks');
  const jwksFile = join(dir, 'jwks.json');
  writeFileSync(jwksFile, JSON.stringify({ keys: [key.jwk] }));
  const authentication = Authentication.fromConfig(
    loadConfig({
      AUTH_JWKS_FILE: jwksFile,
      AUTH_JWT_ISSUER: ISSUER,
      AUTH_JWT_AUDIENCE: AUDIENCE,
      AUTH_TOKENS_FILE: writeTokensFile(t),
    }),
    { info: () => {}, warn: () => {} },
  )!;
  const redis = redisTargets()[0].connect();
  const app = await buildApp({ redis, keyPrefix: uniquePrefix('jwt'), authentication });
  t.teardown(async () => {
    await app.close();
    redis.disconnect();
  });
  const callers: CallContext[] = [];
  const list = app.broker.topics.list.bind(app.broker.topics);
  app.broker.topics.list = (caller, ...rest) => {
    callers.push(caller);
    return list(caller, ...rest);
  };
  const listTopics = async (token: string) => {
    const response = await app.inject({ method: 'GET', url: '/v1/projects/p/topics', headers: bearer(token) });
    return { status: response.statusCode, body: response.json() };
  };

  const accepted: [string, Promise<string>, string][] = [
    ['an email', sign(key, { email: 'bob@example.com', sub: '1234' }), 'user:bob@example.com'],
    [
      "a service account's email",
      sign(key, { email: 'ci@proj.iam.gserviceaccount.com' }),
      'serviceAccount:ci@proj.iam.gserviceaccount.com',
    ],
    ['no email, a subject', sign(key, { sub: 'billing-worker' }), 'serviceAccount:billing-worker'],
    [
      'an unverified email: the subject',
      sign(key, { email: 'eve@example.com', email_verified: false, sub: 'eve-id' }),
      'serviceAccount:eve-id',
    ],
  ];
  for (const [what, token, principal] of accepted) {
    callers.length = 0;
    t.equal((await listTopics(await token)).status, 200, `${what}: accepted`);
    t.equal(callers[0]?.principal, principal, `${what}: the principal is ${principal}`);
  }
  t.equal((await listTopics(ALICE_TOKEN)).status, 200, 'an opaque token of the tokens file still works beside JWTs');
  t.equal(callers.at(-1)?.principal, ALICE);

  const refused: [string, Promise<string>, RegExp][] = [
    ['expired', sign(key, { sub: 'w' }, { expires: Math.floor(Date.now() / 1000) - 3600 }), /has expired/],
    ['for another audience', sign(key, { sub: 'w' }, { audience: 'someone-else' }), /another audience/],
    ['from another issuer', sign(key, { sub: 'w' }, { issuer: 'https://evil.example.com' }), /another issuer/],
    ['signed by another key with the same kid', sign(otherKey, { sub: 'w' }), /signature does not verify/],
    ['signed by a key not in the JWKS', sign(unlistedKey, { sub: 'w' }), /no configured key signed it/],
    ['naming no principal', sign(key, {}), /names no principal/],
    ['not a JWT at all, though shaped like one', Promise.resolve('abc.def.ghi'), /not a valid JWT/],
  ];
  for (const [what, token, message] of refused) {
    t.match(
      await listTopics(await token),
      { status: 401, body: { error: { code: 401, status: 'UNAUTHENTICATED', message } } },
      `${what}: 401`,
    );
  }

  // The keys rotate: the file names only the new key, and a reload takes it.
  const rotated = await signingKey('key-2');
  writeFileSync(jwksFile, JSON.stringify({ keys: [rotated.jwk] }));
  authentication.reload();
  t.equal(
    (await listTopics(await sign(rotated, { sub: 'w' }))).status,
    200,
    "after a reload, the new key's tokens work",
  );
  t.equal((await listTopics(await sign(key, { sub: 'w' }))).status, 401, "and the old key's are refused");
  writeFileSync(jwksFile, '{"keys": "nope"}');
  authentication.reload();
  t.equal(
    (await listTopics(await sign(rotated, { sub: 'w' }))).status,
    200,
    'a malformed JWKS leaves the keys as they were',
  );
});

t.test('the JWT settings go together', async (t) => {
  t.throws(
    () => loadConfig({ AUTH_JWKS_FILE: '/jwks.json' }),
    /Set AUTH_JWKS_FILE, AUTH_JWT_ISSUER and AUTH_JWT_AUDIENCE together/,
  );
  t.throws(() => loadConfig({ AUTH_JWT_ISSUER: ISSUER, AUTH_JWT_AUDIENCE: AUDIENCE }), /together/);
  t.equal(
    loadConfig({ HOST: '0.0.0.0', AUTH_JWKS_FILE: '/jwks.json', AUTH_JWT_ISSUER: ISSUER, AUTH_JWT_AUDIENCE: AUDIENCE })
      .HOST,
    '0.0.0.0',
    'JWTs are authentication enough to listen beyond loopback',
  );
});
