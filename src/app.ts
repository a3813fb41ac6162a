import websocket from '@fastify/websocket';
import Fastify, {
  type ConnectionError,
  type FastifyError,
  type FastifyInstance,
  type FastifyRequest,
  type FastifyServerOptions,
  LogController,
} from 'fastify';
import { isAscii } from 'node:buffer';
import { maxHeaderSize, STATUS_CODES, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Server as TlsServer } from 'node:tls';
import { authenticateRequests, chooseSubprotocol, redactedUrl } from '../routes/authentication.ts';
import { allowOrigins } from '../routes/cors.ts';
import { registerRoutes } from '../routes/index.ts';
import { DEFAULT_BODY_LIMIT, limitBodiesInFlight, limitRequestRate, MAX_STREAM_FRAME_BYTES } from '../routes/limits.ts';
import { type Broker, type BrokerConfig, createBroker } from './broker/broker.ts';
import type { Authentication } from './auth/authentication.ts';
import { ApiError, invalidArgument, invalidJsonBody, unexpectedError } from './errors.ts';
import { createGrpcFrontEnd } from './grpc/front-end.ts';
import { chooseProtocol, shareTlsWithGrpc, shareWithGrpc } from './grpc/one-port.ts';
import { LIFT_ABOVE_BYTES, liftDataStrings, nestsDeeperThan, putBack } from './json-body.ts';
import { MAX_JSON_DEPTH, nestedTooDeep } from './schemas/common.ts';
import type { RedisClient } from './redis/client.ts';

/**
 * The broker's front ends on one port: HTTP (REST and streaming pull over WebSocket) and gRPC
 * (src/grpc/), over a broker: one passed in (its owner closes it), or else one it makes from the
 * broker settings given with these options, and closes when it closes.
 */
export type AppOptions = HttpOptions & ({ broker: Broker } | (BrokerConfig & { broker?: undefined }));

export interface HttpOptions {
  logger?: FastifyServerOptions['logger'];
  /** Log every request (off by default: a broker under load would log thousands per second). */
  logRequests?: boolean;
  /**
   * Authenticates every call of every front end (src/auth/); without it, nothing is asked of
   * callers and their calls carry no principal.
   */
  authentication?: Authentication;
  /** Serve gRPC on the HTTP port too (the default); false serves HTTP alone. */
  grpc?: boolean;
  /** Origins of browser apps served elsewhere that may call the broker (CORS); none by default. */
  corsOrigins?: string[];
  /** A certificate and its key (PEM): HTTPS, and gRPC over TLS, on the one port. */
  tls?: { cert: Buffer; key: Buffer };
  /**
   * Open connections the server keeps at most (HTTP, WebSocket and gRPC alike, MAX_CONNECTIONS);
   * one more is closed as soon as it is accepted. No limit when absent.
   */
  maxConnections?: number;
  /** Bytes of request bodies the server holds at once (MAX_BODY_MIB_IN_FLIGHT); no limit when absent. */
  maxBodyBytesInFlight?: number;
}

export interface RegisteredRoute {
  method: string;
  url: string;
}

declare module 'fastify' {
  interface FastifyInstance {
    broker: Broker;
    routeList: RegisteredRoute[];
  }
  interface FastifyRequest {
    /** The strings lifted out of the body when it was parsed (json-body.ts), else null. */
    liftedMessageData: string[] | null;
  }
  interface FastifyReply {
    /** The Pub/Sub status of the error the reply answers ('' for none), for the request metrics. */
    pubsubStatus: string;
  }
  interface FastifyContextConfig {
    /**
     * Large bodies of this route are parsed with their message "data" strings lifted out
     * (json-body.ts): only for a route that decodes every such string as base64 and, when it
     * fails, answers as JSON.parse would have if refusedByJsonParse says so (publish).
     */
    liftsMessageData?: boolean;
  }
}

/** Builds the app. It never listens: src/server.ts does. */
export async function buildApp(options: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    logger: withoutTokensInUrls(options.logger ?? false),
    logController: new LogController({ disableRequestLogging: !options.logRequests }),
    // Resource IDs may be 255 characters long (fastify's default limit is 100).
    routerOptions: { maxParamLength: 512 },
    bodyLimit: DEFAULT_BODY_LIMIT,
    return503OnClosing: true,
    // Errors the router raises before any route runs (bad percent-encoding, over-long IDs).
    frameworkErrors: (error, _request, reply) => {
      const apiError = invalidArgument(`Invalid request URL: ${error.message}`);
      reply.raw.writeHead(apiError.httpStatus, { 'content-type': 'application/json; charset=utf-8' });
      reply.raw.end(JSON.stringify(apiError.toEnvelope()));
    },
    clientErrorHandler: refuseUnparsableRequest,
    ...(options.tls ? { https: { ...options.tls, ALPNCallback: chooseProtocol } } : {}),
  }) as unknown as FastifyInstance;
  const ownBroker = !options.broker;
  const broker =
    options.broker ??
    (await createBroker({
      ...options,
      // The callers authentication names are the ones authorization tells apart.
      authorization: options.authorization ?? options.authentication?.authorization(),
      log: {
        warn: (message) => app.log.warn(message),
        error: (message) => app.log.error(message),
      },
    }));
  app.decorate('broker', broker);
  const { ctx } = broker;
  // Counts every accepted socket, those handed to the gRPC server too (one-port.ts).
  if (options.maxConnections !== undefined) app.server.maxConnections = options.maxConnections;

  const grpc =
    options.grpc === false
      ? undefined
      : createGrpcFrontEnd(
          broker,
          {
            error: (message) => app.log.error(message),
            call: options.logRequests ? (message) => app.log.info(message) : undefined,
          },
          options.authentication,
        );
  if (grpc && options.tls) shareTlsWithGrpc(app.server as unknown as TlsServer, grpc);
  else if (grpc) shareWithGrpc(app.server, grpc);

  const routeList: RegisteredRoute[] = [];
  app.decorate('routeList', routeList);
  app.addHook('onRoute', (route) => {
    for (const method of [route.method].flat()) {
      if (method !== 'HEAD') routeList.push({ method, url: route.url });
    }
  });

  acceptJsonBodies(app);
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const apiError = toApiError(error, ctx.redis);
    // An outage answers every request with UNAVAILABLE: one line each, not a stack trace each.
    // UNIMPLEMENTED is the answer to what the client asked for, not a failure of the broker.
    if (apiError.status === 'UNAVAILABLE') request.log.warn(`request failed: ${apiError.message}`);
    else if (apiError.httpStatus >= 500 && apiError.status !== 'UNIMPLEMENTED') {
      request.log.error({ err: error }, 'request failed');
    }
    reply.pubsubStatus = apiError.status;
    return reply.code(apiError.httpStatus).send(apiError.toEnvelope());
  });
  // Each answered request in the metrics, by route (never by URL: that would make a series per
  // resource name) and Pub/Sub status.
  app.decorateReply('pubsubStatus', '');
  const methodNames = new Map<string, string>();
  app.addHook('onResponse', (request, reply, done) => {
    const route = `${request.method} ${request.routeOptions.url ?? '(no route)'}`;
    let method = methodNames.get(route);
    // As the route reads in the docs: "/topics/:topic([^:/]+)::publish" is "/topics/:topic:publish".
    if (!method) methodNames.set(route, (method = route.replace(/\([^)]*\)/g, '').replaceAll('::', ':')));
    const status = reply.pubsubStatus || (reply.statusCode < 400 ? 'OK' : `HTTP ${reply.statusCode}`);
    broker.metrics.request(method, status, reply.elapsedTime / 1000);
    done();
  });
  app.setNotFoundHandler((request, reply) => {
    const error = new ApiError(
      'NOT_FOUND',
      `No such method or resource: ${request.method} ${request.url.split('?')[0]}`,
    );
    return reply.code(404).send(error.toEnvelope());
  });

  // Long polls and streams end first, so that closing does not wait for them.
  if (ownBroker) app.addHook('preClose', () => broker.close());
  // Before the HTTP server closes: it waits for every connection it accepted, the gRPC ones too,
  // and those end only once the gRPC server has finished their calls and closed their sessions.
  // After the broker's own close, which ends the streams (a broker passed in ends them when its
  // owner closes it, meanwhile).
  if (grpc) app.addHook('preClose', () => grpc.close());

  // Twice the frame limit, so that the stream itself can answer an oversize frame with a
  // Pub/Sub error; beyond that the WebSocket layer closes with 1009.
  await app.register(websocket, {
    options: { maxPayload: 2 * MAX_STREAM_FRAME_BYTES, handleProtocols: chooseSubprotocol },
  });
  // After the WebSocket plugin: its own hook must see an upgrade first, or a refused upgrade's
  // socket is never cleaned up (and close() waits for it forever).
  // Before authentication: preflights carry no token, and refusals need the CORS headers too.
  await allowOrigins(app, {
    origins: options.corsOrigins ?? [],
    checkUpgrades: (options.corsOrigins ?? []).length > 0 || options.authentication !== undefined,
  });
  if (options.authentication) authenticateRequests(app, options.authentication);
  limitRequestRate(app, broker);
  if (options.maxBodyBytesInFlight !== undefined) limitBodiesInFlight(app, options.maxBodyBytesInFlight);
  await app.register(registerRoutes, { broker: app.broker });
  return app;
}

/** Fastify's logger, its request lines showing URLs without the token a WebSocket upgrade may carry. */
function withoutTokensInUrls(logger: NonNullable<FastifyServerOptions['logger']>): FastifyServerOptions['logger'] {
  if (typeof logger !== 'object') return logger;
  return {
    ...logger,
    serializers: {
      ...logger.serializers,
      req: (request: FastifyRequest) => ({
        method: request.method,
        url: redactedUrl(request.url),
        host: request.host,
        remoteAddress: request.ip,
        remotePort: request.socket?.remotePort,
      }),
    },
  };
}

/**
 * Every body is read as JSON whatever its content type (curl -d sends form encoding), and an
 * empty body counts as `{}`: official clients send `content-type: application/json` with no
 * body on GET and DELETE.
 */
function acceptJsonBodies(app: FastifyInstance): void {
  const parseSafely = app.getDefaultJsonParser('error', 'error');
  /**
   * JSON.parse, through Fastify's guarded parser when `guarded`; undefined when `text` is not
   * valid JSON or poisons a prototype. Fastify's parser scans every text with regular
   * expressions; the substring tests of the callers let nearly every body skip that.
   */
  const parse = (request: FastifyRequest, text: string, guarded: boolean): { value: unknown } | undefined => {
    if (guarded) {
      let result: { value: unknown } | undefined;
      // Fastify's default parser calls back synchronously.
      parseSafely(request, text, (error, parsed) => {
        result = error ? undefined : { value: parsed };
      });
      return result;
    }
    try {
      return { value: JSON.parse(text) };
    } catch {
      return undefined;
    }
  };
  // Prototype poisoning needs a "__proto__" or "constructor" key, possibly spelled with \u escapes.
  const namesPoison = (text: string) => text.includes('__proto__') || text.includes('constructor');
  app.decorateRequest('liftedMessageData', null);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (request, raw, done) => {
    if (!Buffer.isBuffer(raw)) return done(null, {});
    // A UTF-8 byte order mark is ignored (RFC 8259 allows that), on every path alike: Fastify's
    // guarded parser would drop it, plain JSON.parse would refuse it.
    const bytes = raw[0] === 0xef && raw[1] === 0xbb && raw[2] === 0xbf ? raw.subarray(3) : raw;
    // Nearly every body is ASCII (base64 data, ack IDs): that becomes a string by plain copy,
    // where decoding UTF-8 costs a pass over every byte.
    const encoding = isAscii(bytes) ? 'latin1' : 'utf8';
    // A large publish is parsed without ever being one large string: see json-body.ts.
    const lifts = bytes.length > LIFT_ABOVE_BYTES && request.routeOptions.config.liftsMessageData === true;
    const lifted = lifts ? liftDataStrings(bytes, encoding) : undefined;
    if (lifted) {
      if (nestsDeeperThan(lifted.skeleton, MAX_JSON_DEPTH)) return done(nestedTooDeep(), undefined);
      // A skeleton's only \u escapes are its placeholders (json-body.ts): the names are enough.
      const parsed = parse(request, lifted.skeleton, namesPoison(lifted.skeleton));
      if (parsed && putBack(parsed.value, lifted.strings)) {
        request.liftedMessageData = lifted.strings;
        return done(null, parsed.value);
      }
    }
    const body = bytes.toString(encoding);
    // /\S/ stops at the first character of a JSON body; trim() would copy the whole body first.
    if (!/\S/.test(body)) return done(null, {});
    // Small bodies parse fast at any depth; their depth is checked as they are read (schemas/common.ts).
    if (bytes.length > LIFT_ABOVE_BYTES && nestsDeeperThan(body, MAX_JSON_DEPTH)) {
      return done(nestedTooDeep(), undefined);
    }
    const parsed = parse(request, body, namesPoison(body) || body.includes('\\u'));
    // Fastify's own error text names application/json whatever was sent, so one neutral message instead.
    return parsed ? done(null, parsed.value) : done(invalidJsonBody(), undefined);
  });
}

/**
 * Answers a request that Node's HTTP parser refuses (unknown method, broken framing, a raw
 * non-ASCII byte in the path, oversized headers) with the Google error envelope, as every other
 * error is answered, then drops the connection: after a framing error nothing more on it can be
 * read. Fastify calls it bound to the app.
 */
function refuseUnparsableRequest(this: FastifyInstance, error: ConnectionError, socket: Socket): void {
  // A connection the client reset has nobody left to answer.
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  this.log.debug({ err: error }, 'unparsable HTTP request refused');
  // As Node's own answer does, nothing is written once a response on this connection has begun
  // (a pipelined request after it): the bytes would land inside that response.
  const inFlight = (socket as Socket & { _httpMessage?: ServerResponse })._httpMessage;
  if (socket.writable && !inFlight?.headersSent) {
    const apiError = unparsableRequestError(error);
    const body = JSON.stringify(apiError.toEnvelope());
    socket.write(
      `HTTP/1.1 ${apiError.httpStatus} ${STATUS_CODES[apiError.httpStatus]}\r\n` +
        'Content-Type: application/json; charset=utf-8\r\n' +
        `Content-Length: ${Buffer.byteLength(body)}\r\n` +
        `Connection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}

/**
 * The HTTP status Node itself answers each parser error with (431, 413, 408, else 400), with a
 * canonical status beside it. The canonical mapping has no 431 or 413: those go with
 * INVALID_ARGUMENT rather than RESOURCE_EXHAUSTED (429), which means a quota or a resource that
 * ran out, and which the official clients retry (Publish and StreamingPull do); a request too
 * large fails the same way every time, and Pub/Sub answers an oversized publish with
 * INVALID_ARGUMENT too. A request not received in time is DEADLINE_EXCEEDED, answered with 408.
 */
function unparsableRequestError(error: ConnectionError): ApiError {
  switch (error.code) {
    case 'HPE_HEADER_OVERFLOW':
      return new ApiError(
        'INVALID_ARGUMENT',
        `Request header fields too large: the request line and headers may hold at most ${maxHeaderSize} bytes.`,
        undefined,
        431,
      );
    case 'HPE_CHUNK_EXTENSIONS_OVERFLOW':
      return new ApiError('INVALID_ARGUMENT', 'Request chunk extensions too large.', undefined, 413);
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new ApiError('DEADLINE_EXCEEDED', 'The request was not received in time.', undefined, 408);
    default: {
      // llhttp's reason ("Invalid method encountered") names what is wrong with the request itself.
      const reason = (error as ConnectionError & { reason?: unknown }).reason;
      return invalidArgument(`Malformed HTTP request${typeof reason === 'string' ? `: ${reason}` : ''}.`);
    }
  }
}

/** Maps any thrown value to the Pub/Sub error the client sees. Internal details are never echoed. */
export function toApiError(error: unknown, redis: RedisClient): ApiError {
  if (error instanceof ApiError) return error;
  const fastifyError = error as FastifyError;
  if (fastifyError.code === 'FST_ERR_CTP_BODY_TOO_LARGE') {
    return invalidArgument('Request payload size exceeds the limit.');
  }
  if (fastifyError.code?.startsWith('FST_ERR_CTP') || fastifyError.code === 'FST_ERR_VALIDATION') {
    return invalidArgument(fastifyError.message);
  }
  // Node's error for a body whose connection closed before all of it arrived: the client left,
  // or its connection was dropped for broken framing (refuseUnparsableRequest). Nobody is there
  // to read an answer, and nothing went wrong in the broker.
  if (fastifyError.code === 'ECONNRESET' && fastifyError.message === 'aborted') {
    return new ApiError('CANCELLED', 'The connection closed before the request was read.');
  }
  return unexpectedError(error, redis);
}
