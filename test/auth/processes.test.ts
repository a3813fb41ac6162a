// Authentication settings of a broker process (src/server.ts): the refusal to listen beyond
// loopback without authentication, and the tokens file re-read on SIGHUP and when it changes
// (a malformed file keeps the previous tokens), and TLS from its two settings. Standalone Redis.

import { spawn } from 'node:child_process';
import { get } from 'node:https';
import { statSync, utimesSync, writeFileSync } from 'node:fs';
import t from 'tap';
import { ALICE, ALICE_TOKEN, bearer, ROBOT, ROBOT_TOKEN, writeTokensFile } from '../helpers/auth.ts';
import { freePort, startBrokerProcess, stopProcess } from '../helpers/processes.ts';
import { testRedisUrl, uniquePrefix } from '../helpers/redis.ts';
import { makeCertificate } from '../helpers/tls.ts';
import { waitUntil } from '../helpers/wait.ts';

const REPO = new URL('../../', import.meta.url).pathname;
const env = () => ({ REDIS_URL: testRedisUrl(), KEY_PREFIX: uniquePrefix('auth-process') });

/** Starts the broker; its process and everything it has written so far. */
function spawnBroker(settings: Record<string, string>) {
  const child = spawn(process.execPath, ['--import=tsx', 'src/server.ts'], {
    cwd: REPO,
    env: { ...process.env, LOG_LEVEL: 'warn', ...settings },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  return { child, output: () => output };
}

/** Runs the broker until it exits; its exit code and output. */
function runToExit(settings: Record<string, string>): Promise<{ code: number | null; output: string }> {
  const { child, output } = spawnBroker(settings);
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, output: output() })));
}

t.test('beyond loopback without authentication the broker refuses to start, and says how', async (t) => {
  const { code, output } = await runToExit({ ...env(), HOST: '0.0.0.0', PORT: String(await freePort()) });
  t.equal(code, 1, 'it exits with code 1');
  t.match(output, /Refusing to listen on 0\.0\.0\.0 without authentication/, 'naming the address');
  t.match(output, /AUTH_TOKENS_FILE/, 'naming the setting that authenticates');
  t.match(output, /ALLOW_UNAUTHENTICATED=true/, 'and the one that serves it open on purpose');
});

t.test('with ALLOW_UNAUTHENTICATED=true, or with authentication, it starts beyond loopback', async (t) => {
  const open = await startBrokerProcess({ ...env(), HOST: '0.0.0.0', ALLOW_UNAUTHENTICATED: 'true' });
  t.teardown(() => stopProcess(open.child));
  t.equal((await fetch(`${open.url}/v1/projects/p/topics`)).status, 200, 'open: it answers without a token');

  const authed = await startBrokerProcess({ ...env(), HOST: '0.0.0.0', AUTH_TOKENS_FILE: writeTokensFile(t) });
  t.teardown(() => stopProcess(authed.child));
  t.equal((await fetch(`${authed.url}/v1/projects/p/topics`)).status, 401, 'authenticated: refused without a token');
  t.equal((await fetch(`${authed.url}/v1/projects/p/topics`, { headers: bearer(ALICE_TOKEN) })).status, 200);
});

t.test('a tokens file that cannot be read stops the broker before it listens', async (t) => {
  const missing = await runToExit({
    ...env(),
    PORT: String(await freePort()),
    AUTH_TOKENS_FILE: '/nonexistent/tokens',
  });
  t.equal(missing.code, 1);
  t.match(missing.output, /AUTH_TOKENS_FILE \/nonexistent\/tokens: ENOENT/);
  const malformed = writeTokensFile(t, `${ALICE} short\n`);
  const bad = await runToExit({ ...env(), PORT: String(await freePort()), AUTH_TOKENS_FILE: malformed });
  t.equal(bad.code, 1);
  t.match(bad.output, /line 1: the token is shorter than 16 characters/);
});

t.test('the tokens file is re-read when it changes and on SIGHUP', async (t) => {
  const file = writeTokensFile(t, `${ALICE} ${ALICE_TOKEN}\n`);
  const broker = await startBrokerProcess({ ...env(), AUTH_TOKENS_FILE: file });
  t.teardown(() => stopProcess(broker.child));
  const statusWith = async (token: string) =>
    (await fetch(`${broker.url}/v1/projects/p/topics`, { headers: bearer(token) })).status;
  t.equal(await statusWith(ALICE_TOKEN), 200);
  t.equal(await statusWith(ROBOT_TOKEN), 401);

  // A change: the watcher picks it up.
  writeFileSync(file, `${ALICE} ${ALICE_TOKEN}\n${ROBOT} ${ROBOT_TOKEN}\n`);
  t.ok(await waitUntil(async () => (await statusWith(ROBOT_TOKEN)) === 200, 20_000), 'an added token is taken');

  // A malformed file: the previous tokens stay, and the log says why.
  const warnings = () => broker.output().split('not reloaded, the previous credentials stay: line 2').length - 1;
  writeFileSync(file, `${ALICE} ${ALICE_TOKEN}\n${'nonsense '.repeat(10)}\n`);
  t.ok(await waitUntil(() => warnings() === 1, 20_000), 'the log says the file was not taken');
  t.equal(await statusWith(ROBOT_TOKEN), 200, 'and the tokens before it still work');

  // A change the watcher cannot see (same size, same modification time): SIGHUP re-reads it.
  // First a modification time of whole seconds, which a file written later can be given exactly;
  // the watcher sees that change (a second warning), so it compares with that time from then on.
  const fixedTime = Math.floor(Date.now() / 1000) - 60;
  utimesSync(file, fixedTime, fixedTime);
  t.ok(await waitUntil(() => warnings() === 2, 20_000), 'the watcher saw the new modification time');
  const size = statSync(file).size;
  writeFileSync(file, `${ROBOT} ${ROBOT_TOKEN}\n`.padEnd(size - 1, '#').concat('\n'));
  utimesSync(file, fixedTime, fixedTime);
  t.equal(statSync(file).size, size, 'the file keeps its size');
  broker.child.kill('SIGHUP');
  t.ok(
    await waitUntil(async () => (await statusWith(ALICE_TOKEN)) === 401, 20_000),
    'after SIGHUP a removed token is refused',
  );
  t.equal(await statusWith(ROBOT_TOKEN), 200, 'and the listed one still works');
});

t.test('with TLS_CERT_FILE and TLS_KEY_FILE the broker serves HTTPS', async (t) => {
  const certificate = makeCertificate(t);
  const port = await freePort();
  const broker = spawnBroker({
    ...env(),
    PORT: String(port),
    TLS_CERT_FILE: certificate.certFile,
    TLS_KEY_FILE: certificate.keyFile,
  });
  t.teardown(() => stopProcess(broker.child));
  const readyStatus = () =>
    new Promise<number>((resolve) =>
      get({ host: 'localhost', port, path: '/readyz', ca: certificate.cert }, (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      }).on('error', () => resolve(0)),
    );
  t.ok(await waitUntil(async () => (await readyStatus()) === 200, 30_000), `/readyz over HTTPS: ${broker.output()}`);

  const missing = await runToExit({
    ...env(),
    TLS_CERT_FILE: '/nonexistent/cert.pem',
    TLS_KEY_FILE: certificate.keyFile,
  });
  t.equal(missing.code, 1, 'a certificate file that cannot be read stops the broker');
  t.match(missing.output, /TLS_CERT_FILE \/nonexistent\/cert\.pem: ENOENT/);
});
