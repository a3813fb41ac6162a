// CORS (CORS_ORIGINS) through @fastify/cors: preflights of listed origins allowed, others refused,
// CORS headers on refusals too; and the Origin of a WebSocket upgrade checked against the same
// list (with a list, or with authentication), the broker's own origin always allowed. Without
// either, as before: no CORS, and upgrades from any origin. Standalone Redis.

import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import WebSocket from 'ws';
import { buildApp, type AppOptions } from '../../src/app.ts';
import { loadConfig } from '../../src/config.ts';
import { ALICE_TOKEN, bearer, tokenAuthentication } from '../helpers/auth.ts';
import { redisTargets, uniquePrefix } from '../helpers/redis.ts';

const APP_ORIGIN = 'https://app.example.com';
const EVIL_ORIGIN = 'https://evil.example.com';
const P = 'cors-project';

async function listening(t: Test, options: Partial<AppOptions>) {
  const redis = redisTargets()[0].connect();
  const app = await buildApp({ redis, keyPrefix: uniquePrefix('cors'), pullWaitMs: 200, ...options } as AppOptions);
  await app.listen({ port: 0, host: '127.0.0.1' });
  const address = `127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const sockets: WebSocket[] = [];
  t.teardown(async () => {
    for (const socket of sockets) socket.terminate();
    await app.close();
    redis.disconnect();
  });
  /** The HTTP status of a refused upgrade, or 101 once the socket opens. */
  const upgradeStatus = (headers: Record<string, string>) =>
    new Promise<number>((resolve) => {
      const socket = new WebSocket(`ws://${address}/v1/projects/${P}/subscriptions/sub1:streamingPull`, { headers });
      sockets.push(socket);
      socket.on('open', () => resolve(101));
      socket.on('unexpected-response', (_request, response) => resolve(response.statusCode ?? 0));
      socket.on('error', () => resolve(0));
    });
  return { app, address, upgradeStatus };
}

const preflight = (origin: string) => ({
  method: 'OPTIONS' as const,
  url: `/v1/projects/${P}/topics/topic1:publish`,
  headers: {
    origin,
    'access-control-request-method': 'POST',
    'access-control-request-headers': 'authorization,content-type',
  },
});

t.test('listed origins: preflights allowed, refusals readable, upgrades checked', async (t) => {
  const b = await listening(t, { corsOrigins: [APP_ORIGIN], authentication: tokenAuthentication(t) });

  const allowed = await b.app.inject(preflight(APP_ORIGIN));
  t.equal(allowed.statusCode, 204, 'a preflight of a listed origin is answered, without a token');
  t.equal(allowed.headers['access-control-allow-origin'], APP_ORIGIN, 'allowing that origin');
  t.match(allowed.headers['access-control-allow-methods'], /POST/, 'and the method');
  t.match(allowed.headers['access-control-allow-headers'], /authorization/, 'and the Authorization header');

  const refused = await b.app.inject(preflight(EVIL_ORIGIN));
  t.equal(refused.headers['access-control-allow-origin'], undefined, 'an unlisted origin is not allowed');

  const created = await b.app.inject({
    method: 'PUT',
    url: `/v1/projects/${P}/topics/topic1`,
    headers: { origin: APP_ORIGIN, ...bearer(ALICE_TOKEN) },
  });
  t.equal(created.statusCode, 200, 'the call itself, with a token');
  t.equal(created.headers['access-control-allow-origin'], APP_ORIGIN, 'carries the CORS header');
  const unauthenticated = await b.app.inject({
    method: 'GET',
    url: `/v1/projects/${P}/topics`,
    headers: { origin: APP_ORIGIN },
  });
  t.equal(unauthenticated.statusCode, 401);
  t.equal(unauthenticated.headers['access-control-allow-origin'], APP_ORIGIN, 'a 401 too, so that the app can read it');
  t.match(unauthenticated.headers['access-control-expose-headers'], /www-authenticate/);

  t.equal(
    await b.upgradeStatus({ origin: EVIL_ORIGIN, ...bearer(ALICE_TOKEN) }),
    403,
    'an upgrade from an unlisted origin: 403',
  );
  t.equal(await b.upgradeStatus({ origin: APP_ORIGIN, ...bearer(ALICE_TOKEN) }), 101, 'from a listed one it opens');
  t.equal(await b.upgradeStatus({ origin: `http://${b.address}`, ...bearer(ALICE_TOKEN) }), 101, 'and from its own');
  t.equal(await b.upgradeStatus(bearer(ALICE_TOKEN)), 101, 'and without an Origin (not a browser)');
});

t.test("authentication without a list: upgrades only from the broker's own origin", async (t) => {
  const b = await listening(t, { authentication: tokenAuthentication(t) });
  t.equal(await b.upgradeStatus({ origin: APP_ORIGIN, ...bearer(ALICE_TOKEN) }), 403, 'another origin: 403');
  t.equal(await b.upgradeStatus({ origin: `http://${b.address}`, ...bearer(ALICE_TOKEN) }), 101, 'its own: opens');
  t.equal((await b.app.inject(preflight(APP_ORIGIN))).headers['access-control-allow-origin'], undefined, 'no CORS');
});

t.test('the default (no list, no authentication): no CORS, upgrades from any origin as before', async (t) => {
  const b = await listening(t, {});
  t.equal((await b.app.inject(preflight(APP_ORIGIN))).headers['access-control-allow-origin'], undefined, 'no CORS');
  t.equal(await b.upgradeStatus({ origin: EVIL_ORIGIN }), 101, 'an upgrade from another origin opens');
});

t.test('CORS_ORIGINS lists origins', async (t) => {
  t.same(loadConfig({}).CORS_ORIGINS, [], 'none by default');
  t.same(loadConfig({ CORS_ORIGINS: 'https://App.example.com, http://localhost:3000' }).CORS_ORIGINS, [
    'https://app.example.com',
    'http://localhost:3000',
  ]);
  t.throws(
    () => loadConfig({ CORS_ORIGINS: 'https://app.example.com/' }),
    /CORS_ORIGINS: "https:\/\/app\.example\.com\/": is not an origin/,
  );
  t.throws(() => loadConfig({ CORS_ORIGINS: 'app.example.com' }), /is not an origin/);
});
