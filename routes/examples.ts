import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { ApiError } from '../src/errors.ts';
import { packagePath } from '../src/paths.ts';

const BROWSER_EXAMPLE = packagePath('examples', 'browser');
const CLIENT_ENTRY = packagePath('src', 'client', 'index.ts');

let bundle: Promise<string> | undefined;

/**
 * src/client as one ES module for browsers, built with esbuild in memory on first use and kept
 * for the life of the process (a failed build is tried again on the next request).
 */
function clientBundle(): Promise<string> {
  bundle ??= buildClientBundle().catch((error: unknown) => {
    bundle = undefined;
    throw error;
  });
  return bundle;
}

async function buildClientBundle(): Promise<string> {
  const { build } = await import('esbuild');
  const result = await build({
    entryPoints: [CLIENT_ENTRY],
    bundle: true,
    format: 'esm',
    platform: 'browser', // fails the build if the client ever imports a Node module
    target: 'es2022',
    write: false,
    legalComments: 'none',
    logLevel: 'silent',
  });
  return result.outputFiles[0].text;
}

/**
 * The browser example (GET /examples/browser, and its script) and the client bundle it imports
 * (GET /client/pubsub-client.js). Same origin as the broker, so the page needs no CORS.
 */
export async function exampleRoutes(app: FastifyInstance): Promise<void> {
  const exampleFile = (file: string, type: string) => async (_request: unknown, reply: FastifyReply) =>
    reply
      .type(`${type}; charset=utf-8`)
      .header('cache-control', 'no-cache')
      .send(await readFile(join(BROWSER_EXAMPLE, file), 'utf8'));
  app.get('/examples/browser', exampleFile('index.html', 'text/html'));
  app.get('/examples/browser/app.js', exampleFile('app.js', 'text/javascript'));

  app.get('/client/pubsub-client.js', async (request, reply) => {
    let code: string;
    try {
      code = await clientBundle();
    } catch (error) {
      request.log.error({ err: error }, 'the client bundle could not be built');
      throw new ApiError('INTERNAL', 'The client bundle could not be built.');
    }
    return reply.type('text/javascript; charset=utf-8').header('cache-control', 'no-cache').send(code);
  });
}
