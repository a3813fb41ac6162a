import type { FastifyInstance, FastifyRequest } from 'fastify';
import { type Authentication, bearerToken } from '../src/auth/authentication.ts';

declare module 'fastify' {
  interface FastifyRequest {
    /** The authenticated caller (authentication.ts), undefined when the broker authenticates no one. */
    principal?: string;
  }
}

/**
 * Browsers cannot set headers on a WebSocket: they offer the token as a subprotocol
 * `bearer.<token>` beside the subprotocol they speak (`new WebSocket(url, ['pubsub',
 * 'bearer.' + token])`), or put it in the query (`?access_token=<token>`, RFC 6750 §2.3).
 */
const TOKEN_SUBPROTOCOL = 'bearer.';
const TOKEN_QUERY_PARAMETER = 'access_token';

/**
 * Authenticates every HTTP request, the WebSocket upgrade of streaming pull included, before its
 * route runs (but for the open paths), and records the principal on the request for the routes'
 * caller contexts (caller.ts). Registered after the WebSocket plugin's own hook, which marks
 * upgrades.
 */
export function authenticateRequests(app: FastifyInstance, authentication: Authentication): void {
  app.decorateRequest('principal', undefined);
  app.addHook('onRequest', async (request, reply) => {
    if (authentication.openPaths.has(request.routeOptions.url ?? '')) return;
    try {
      request.principal = await authentication.principalOf(requestToken(request));
    } catch (error) {
      // RFC 6750 §3: a 401 names the scheme the client should use.
      reply.header('www-authenticate', 'Bearer realm="pubsub"');
      throw error;
    }
  });
}

/** The bearer token of a request: its Authorization header, or on an upgrade the browser forms. */
function requestToken(request: FastifyRequest): string | undefined {
  const header = bearerToken(request.headers.authorization);
  if (header !== undefined || !request.ws) return header;
  const offered = request.headers['sec-websocket-protocol'];
  const fromSubprotocol = offered
    ?.split(',')
    .map((protocol) => protocol.trim())
    .find((protocol) => protocol.startsWith(TOKEN_SUBPROTOCOL));
  if (fromSubprotocol) return fromSubprotocol.slice(TOKEN_SUBPROTOCOL.length);
  const fromQuery = (request.query as Record<string, unknown>)[TOKEN_QUERY_PARAMETER];
  return typeof fromQuery === 'string' ? fromQuery : undefined;
}

/**
 * The subprotocol the broker answers a WebSocket upgrade with: the first one offered that is not
 * a token (a browser fails a handshake whose answer names none of those it offered; the token
 * is never echoed back).
 */
export function chooseSubprotocol(offered: Set<string>): string | false {
  for (const protocol of offered) if (!protocol.startsWith(TOKEN_SUBPROTOCOL)) return protocol;
  return false;
}

/** A request URL as logs may show it: without a token in its query. */
export function redactedUrl(url: string): string {
  return url.replace(new RegExp(`([?&]${TOKEN_QUERY_PARAMETER}=)[^&#]*`, 'g'), '$1<redacted>');
}
