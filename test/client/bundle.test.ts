// src/client stays portable (no Node-only APIs), and routes/examples.ts serves the example page
// and an ES module bundle of the client that works on its own.
import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import Fastify from 'fastify';
import ts from 'typescript';
import { exampleRoutes } from '../../routes/examples.ts';

const CLIENT_DIR = new URL('../../src/client/', import.meta.url);

t.test('src/client typechecks with only ES2022 + DOM typings (no @types/node)', async (t) => {
  const program = ts.createProgram([new URL('index.ts', CLIENT_DIR).pathname], {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.ESNext,
    moduleResolution: ts.ModuleResolutionKind.Bundler,
    lib: ['lib.es2022.d.ts', 'lib.dom.d.ts'],
    types: [],
    strict: true,
    noEmit: true,
    allowImportingTsExtensions: true,
    skipLibCheck: true,
  });
  const diagnostics = ts
    .getPreEmitDiagnostics(program)
    .map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
  t.same(diagnostics, [], 'no errors: no Buffer, process, node: imports or other Node-only names');
});

t.test('src/client imports nothing but itself', async (t) => {
  for (const file of readdirSync(CLIENT_DIR).filter((name) => name.endsWith('.ts'))) {
    const source = readFileSync(new URL(file, CLIENT_DIR), 'utf8');
    const imports = [...source.matchAll(/^\s*(?:import|export)\b[^;]*?\bfrom\s+'([^']+)'/gm)].map((match) => match[1]);
    t.same(
      imports.filter((path) => !path.startsWith('./')),
      [],
      `${file} imports only ./ modules`,
    );
  }
});

t.test('the example routes serve the page, its script and the client bundle', async (t) => {
  const app = Fastify();
  await app.register(exampleRoutes);
  t.teardown(() => app.close());

  const page = await app.inject({ url: '/examples/browser' });
  t.equal(page.statusCode, 200);
  t.match(page.headers['content-type'], /^text\/html/);
  t.match(page.body, /<script type="module" src="\/examples\/browser\/app.js">/);

  const script = await app.inject({ url: '/examples/browser/app.js' });
  t.equal(script.statusCode, 200);
  t.match(script.headers['content-type'], /^text\/javascript/);
  t.match(script.body, /from '\/client\/pubsub-client.js'/);

  const started = Date.now();
  const [first, second] = await Promise.all([
    app.inject({ url: '/client/pubsub-client.js' }),
    app.inject({ url: '/client/pubsub-client.js' }),
  ]);
  t.comment(`first build: ${Date.now() - started} ms`);
  t.equal(first.statusCode, 200);
  t.match(first.headers['content-type'], /^text\/javascript/);
  t.equal(second.body, first.body, 'one build for concurrent first requests');
  const again = Date.now();
  const third = await app.inject({ url: '/client/pubsub-client.js' });
  t.equal(third.body, first.body, 'cached');
  t.ok(Date.now() - again < 200, 'served from memory');
  t.notMatch(first.body, /\brequire\(|from ['"]node:/, 'no Node modules in the bundle');

  // The bundle is a self-contained ES module with the client's exports.
  const module = await import(`data:text/javascript;base64,${Buffer.from(first.body).toString('base64')}`);
  t.same(Object.keys(module).sort(), [
    'HandlerError',
    'Message',
    'PubSubClient',
    'PubSubError',
    'Subscriber',
    'isRetryableCloseCode',
  ]);
  const client = new module.PubSubClient({ endpoint: 'http://example.test/', projectId: 'p', fetch: async () => ({}) });
  t.equal(client.topicName('t1'), 'projects/p/topics/t1');
});
