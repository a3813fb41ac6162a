import type { FastifyInstance } from 'fastify';
import type { WebSocket } from 'ws';
import { resourceName } from '../src/broker/names.ts';
import {
  closeCodeFor,
  closeReason,
  type StreamingPullRequest,
  type StreamingSession,
} from '../src/broker/streaming.ts';
import { ApiError, failedPrecondition, invalidArgument } from '../src/errors.ts';
import { parseBody } from '../src/schemas/common.ts';
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
 * every onRequest hook the other routes run (authentication included) before the upgrade.
 */
export async function streamingRoutes(app: FastifyInstance, { broker }: RouteOptions): Promise<void> {
  app.route<{ Params: SubscriptionParams }>({
    method: 'GET',
    url: `${SUBSCRIPTION_PATH}::streamingPull`,
    handler: async () => {
      throw failedPrecondition('streamingPull needs a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket).');
    },
    wsHandler: (socket: WebSocket, request) => {
      const transport = {
        send: (json: string | Buffer) => {
          if (socket.readyState !== socket.OPEN) return false;
          socket.send(json, { binary: false });
          return true;
        },
        close: (code: number, reason: string) => socket.close(code, reason),
      };
      let session: StreamingSession;
      try {
        const name = resourceName('subscriptions', request.params.project, request.params.subscription);
        session = broker.streams.open(httpCaller(broker, 'websocket'), name, transport);
      } catch (error) {
        const apiError = error instanceof ApiError ? error : invalidArgument(String(error));
        socket.send(JSON.stringify(apiError.toEnvelope()));
        socket.close(closeCodeFor(apiError), closeReason(apiError));
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
