import type { FastifyInstance } from 'fastify';
import type { WebSocket } from 'ws';
import { type ResourceName, resourceName } from '../src/broker/names.ts';
import type {
  StreamingPullRequest,
  StreamingPullResponse,
  StreamingSession,
  StreamTransport,
} from '../src/broker/streaming.ts';
import { ApiError, failedPrecondition, GRPC_CODES, invalidArgument } from '../src/errors.ts';
import { parseBody } from '../src/schemas/common.ts';
import { receivedMessagesJson } from '../src/schemas/received-json.ts';
import { streamingPullFrameSchema } from '../src/schemas/streaming.ts';
import { SUBSCRIPTION_PATH, type RouteOptions } from './options.ts';
import { httpCaller } from './caller.ts';
import { MAX_STREAM_FRAME_BYTES } from './limits.ts';

interface SubscriptionParams {
  project: string;
  subscription: string;
}

/**
 * Streaming pull over WebSocket: GET .../subscriptions/{s}:streamingPull, upgraded. It runs
 * every onRequest hook the other routes run (authentication included) before the upgrade, and a
 * caller who may not consume the subscription is refused there, with an HTTP answer (403) that
 * browsers and clients see, rather than a stream that opens only to close.
 */
export async function streamingRoutes(app: FastifyInstance, { broker }: RouteOptions): Promise<void> {
  app.route<{ Params: SubscriptionParams }>({
    method: 'GET',
    url: `${SUBSCRIPTION_PATH}::streamingPull`,
    preValidation: async (request) => {
      let name: ResourceName;
      try {
        name = resourceName('subscriptions', request.params.project, request.params.subscription);
      } catch {
        return; // An invalid name is refused on the stream, with its error frame, as always (below).
      }
      await broker.delivery.requireConsume(httpCaller(broker, 'websocket', request), name);
    },
    handler: async () => {
      throw failedPrecondition('streamingPull needs a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket).');
    },
    wsHandler: (socket: WebSocket, request) => {
      const transport: StreamTransport = {
        send: (response) => {
          if (socket.readyState !== socket.OPEN) return false;
          socket.send(encodeResponse(response), { binary: false });
          return true;
        },
        close: (error) => closeWithError(socket, error),
      };
      let session: StreamingSession;
      try {
        const name = resourceName('subscriptions', request.params.project, request.params.subscription);
        session = broker.streams.open(httpCaller(broker, 'websocket', request), name, transport);
      } catch (error) {
        closeWithError(socket, error instanceof ApiError ? error : invalidArgument(String(error)));
        return;
      }
      // Dead peers: a ping every heartbeat; no pong by the next one ends the stream. Its
      // outstanding leases then run out and the messages are delivered again.
      let alive = true;
      socket.on('pong', () => (alive = true));
      const pinger = setInterval(() => {
        if (!alive) return socket.terminate();
        alive = false;
        socket.ping();
      }, broker.streams.heartbeatMs);
      socket.on('message', (data: Buffer, isBinary: boolean) => {
        if (data.length > MAX_STREAM_FRAME_BYTES) {
          return session.fail(
            invalidArgument(`A streaming pull frame may be at most ${MAX_STREAM_FRAME_BYTES} bytes.`),
          );
        }
        if (isBinary) return session.fail(invalidArgument('Streaming pull frames are JSON text frames.'));
        const text = data.toString('utf8');
        session.receive(() => decodeFrame(text));
      });
      socket.on('close', () => {
        clearInterval(pinger);
        broker.streams.closed(session);
      });
      socket.on('error', () => socket.terminate());
    },
  });
}

/** A client frame: a StreamingPullRequest in JSON text. */
function decodeFrame(text: string): StreamingPullRequest {
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw invalidArgument('Invalid JSON payload received in a streaming pull frame.');
  }
  return parseBody(streamingPullFrameSchema, json, 'streaming pull frame');
}

/**
 * A response frame in JSON text. Frames with messages are written straight into one Buffer
 * (received-json.ts); the others are small.
 */
function encodeResponse(response: StreamingPullResponse): string | Buffer {
  const { receivedMessages, ...rest } = response;
  return receivedMessages ? receivedMessagesJson(receivedMessages, rest) : JSON.stringify(response);
}

/** A WebSocket close reason holds at most 123 bytes; the full error goes out as a frame first. */
const MAX_CLOSE_REASON_BYTES = 123;

/**
 * Ends a stream with an error: a frame `{"error":{code,message,status}}`, then a close whose code
 * is 4000 + the gRPC code (so that clients can tell the retryable ones) and whose reason is the
 * same error, its message shortened to fit.
 */
function closeWithError(socket: WebSocket, error: ApiError): void {
  if (socket.readyState === socket.OPEN) socket.send(JSON.stringify(error.toEnvelope()));
  socket.close(4000 + GRPC_CODES[error.status], closeReason(error));
}

function closeReason(error: ApiError): string {
  let message = error.message;
  for (;;) {
    const reason = JSON.stringify({ error: { code: error.httpStatus, message, status: error.status } });
    if (Buffer.byteLength(reason) <= MAX_CLOSE_REASON_BYTES || message.length === 0) return reason;
    message = message.slice(0, Math.max(0, message.length - 8));
  }
}
