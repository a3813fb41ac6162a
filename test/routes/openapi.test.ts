// openapi.yaml is valid OpenAPI 3.1 and describes exactly the routes the app registers.
import t from 'tap';
import { access, readFile } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { parse } from 'yaml';
import { validate, compileErrors } from '@readme/openapi-parser';
import { Redis } from 'ioredis';

const SPEC_FILE = new URL('../../openapi.yaml', import.meta.url);
const HTTP_METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

interface OpenApiDoc {
  openapi: string;
  paths: Record<string, Record<string, { operationId?: string; responses?: Record<string, unknown> }>>;
}

/**
 * Turns a fastify route URL into an OpenAPI path, following find-my-way's parsing:
 * `::` is a literal colon; `:name` is a parameter whose name ends at `(`, `-`, `.`, `/` or the
 * end of the URL (not at `:`), optionally followed by a `(regex)`.
 *   /v1/projects/:project/topics/:topic([^:/]+)::publish -> /v1/projects/{project}/topics/{topic}:publish
 */
function fastifyUrlToOpenApiPath(url: string): string {
  let out = '';
  let i = 0;
  while (i < url.length) {
    if (url[i] !== ':') {
      out += url[i++];
    } else if (url[i + 1] === ':') {
      out += ':';
      i += 2;
    } else {
      let j = i + 1;
      while (j < url.length && !'(-./'.includes(url[j])) j++;
      const name = url.slice(i + 1, j);
      if (url[j] === '(') j = closingParen(url, j) + 1;
      out += `{${name}}`;
      i = j;
    }
  }
  return out;
}

function closingParen(url: string, open: number): number {
  let depth = 0;
  for (let k = open; k < url.length; k++) {
    if (url[k] === '\\') k++;
    else if (url[k] === '(') depth++;
    else if (url[k] === ')' && --depth === 0) return k;
  }
  throw new Error(`unbalanced regex in route ${url}`);
}

async function loadSpec(): Promise<OpenApiDoc> {
  return parse(await readFile(SPEC_FILE, 'utf8')) as OpenApiDoc;
}

function specOperations(doc: OpenApiDoc): string[] {
  const ops: string[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of Object.keys(item)) {
      if (HTTP_METHODS.includes(method)) ops.push(`${method.toUpperCase()} ${path}`);
    }
  }
  return ops.sort();
}

function withTimeout(p: PromiseLike<unknown>, ms: number, message: string): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(timer));
}

t.test('fastifyUrlToOpenApiPath', async (t) => {
  t.equal(
    fastifyUrlToOpenApiPath('/v1/projects/:project/topics/:topic([^:/]+)::publish'),
    '/v1/projects/{project}/topics/{topic}:publish',
  );
  t.equal(fastifyUrlToOpenApiPath('/v1/projects/:project/topics'), '/v1/projects/{project}/topics');
  t.equal(
    fastifyUrlToOpenApiPath('/v1/projects/:project/subscriptions/:subscription'),
    '/v1/projects/{project}/subscriptions/{subscription}',
  );
  t.equal(fastifyUrlToOpenApiPath('/a/:id(\\d+(?:\\))?)/b'), '/a/{id}/b', 'nested and escaped parentheses');
  t.equal(fastifyUrlToOpenApiPath('/healthz'), '/healthz');
  t.equal(fastifyUrlToOpenApiPath('/x/static::verb'), '/x/static:verb');
  // Fastify's routing trap: its router ends a parameter name only at `/`, `-`, `.` or `(`, so
  // without a regex the parameter swallows the verb, and such a route can never match the spec.
  t.equal(fastifyUrlToOpenApiPath('/topics/:topic::publish'), '/topics/{topic::publish}');
});

t.test('openapi.yaml is a valid OpenAPI 3.1 document', async (t) => {
  const doc = await loadSpec();
  t.match(doc.openapi, /^3\.1\./, 'declares OpenAPI 3.1');
  // validate() dereferences its argument in place, so give it a copy.
  const result = await validate(structuredClone(doc) as Parameters<typeof validate>[0]);
  if (!result.valid) t.fail(compileErrors(result));
  else t.pass('validates with @readme/openapi-parser');
  for (const w of result.warnings) t.comment(`warning: ${w.message}`);

  for (const [path, item] of Object.entries(doc.paths)) {
    for (const [method, op] of Object.entries(item)) {
      if (!HTTP_METHODS.includes(method)) continue;
      const where = `${method.toUpperCase()} ${path}`;
      t.ok(op.operationId, `${where} has an operationId`);
      if (path.startsWith('/v1/')) {
        for (const code of ['400', '503']) t.ok(op.responses?.[code], `${where} lists ${code}`);
      }
    }
  }
});

t.test('the routes the app registers are exactly the routes in openapi.yaml', async (t) => {
  const doc = await loadSpec();
  const appFile = new URL('../../src/app.ts', import.meta.url);
  if (
    !(await access(appFile).then(
      () => true,
      () => false,
    ))
  ) {
    t.fail('src/app.ts does not exist, so the registered routes cannot be listed');
    return;
  }
  const { buildApp } = await import('../../src/app.ts');
  // Route listing must not need Redis: a lazy client never connects unless a command is sent.
  const redis = new Redis(process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6391', { lazyConnect: true });
  const app = await buildApp({
    redis,
    keyPrefix: `t-openapi-${randomBytes(6).toString('hex')}`,
    firstConnectWaitMs: 0,
  });
  t.teardown(async () => {
    await withTimeout(app.close(), 5000, 'app.close() did not finish within 5 s').finally(() => redis.disconnect());
  });
  await withTimeout(app.ready(), 10_000, 'app.ready() did not finish within 10 s (does buildApp need a live Redis?)');

  const routeList = (app as unknown as { routeList?: Array<{ method: string | string[]; url: string }> }).routeList;
  if (!Array.isArray(routeList)) throw new Error('app.routeList is not an array');
  const registered = new Set<string>();
  for (const route of routeList) {
    for (const method of [route.method].flat()) {
      registered.add(`${method.toUpperCase()} ${fastifyUrlToOpenApiPath(route.url)}`);
    }
  }
  // Drop HEAD routes that fastify derives from GET routes, should any slip through.
  for (const op of registered) {
    if (op.startsWith('HEAD ') && registered.has(`GET ${op.slice(5)}`)) registered.delete(op);
  }
  t.ok(registered.size > 0, 'the app registered routes');

  const inSpec = specOperations(doc);
  const inApp = [...registered].sort();
  t.same(
    inApp.filter((op) => !inSpec.includes(op)),
    [],
    'every registered route is in openapi.yaml',
  );
  t.same(
    inSpec.filter((op) => !registered.has(op)),
    [],
    'every operation in openapi.yaml is registered',
  );

  const res = await app.inject({ method: 'GET', url: '/openapi.yaml' });
  t.equal(res.statusCode, 200, 'GET /openapi.yaml answers 200');
  t.match(res.headers['content-type'], /^text\/yaml/, 'served as text/yaml');
  t.same(parse(res.body), doc, 'GET /openapi.yaml serves this document');
});
