import type { ServerDuplexStream } from '@grpc/grpc-js';
import type { CallContext } from '../broker/call-context.ts';
import type { StreamingSession, StreamTransport } from '../broker/streaming.ts';
import { parseBody } from '../schemas/common.ts';
import { streamingPullFrameSchema } from '../schemas/streaming.ts';
import { decoded, type GrpcServices, grpcCaller, statusOf } from './calls.ts';
import { grpcStatusOf } from './status.ts';

/**
 * Subscriber.StreamingPull: a bidirectional stream carrying one streaming session (the broker's
 * streaming.ts, as a WebSocket does). The first request names the subscription; grpc-js calls
 * this before it arrives. Writes that HTTP/2 cannot take yet hold back leasing until the stream
 * drains. The stream ends with an error status only: UNAVAILABLE on shutdown (clients reopen it),
 * or the error that ended it; OK only after the client has half-closed its side.
 */
export function streamingPull(services: GrpcServices, call: ServerDuplexStream<object, object>): void {
  // Requests that come meanwhile wait in the call's buffer: nothing reads it before the caller is known.
  let cancelled = false;
  call.on('cancelled', () => (cancelled = true));
  grpcCaller(services, call).then(
    (caller) => {
      if (!cancelled) serve(services, call, caller);
    },
    (error: unknown) => call.emit('error', statusOf(services, error)),
  );
}

/** The stream of an authenticated caller. */
function serve(services: GrpcServices, call: ServerDuplexStream<object, object>, caller: CallContext): void {
  const { broker } = services;
  let ended = false;
  let drained: Promise<void> | undefined;
  const transport: StreamTransport = {
    send: (response) => {
      if (ended) return false;
      // Encoded by the method's serializer (protos.ts).
      if (!call.write(response)) {
        drained ??= new Promise((resolve) =>
          call.once('drain', () => {
            drained = undefined;
            resolve();
          }),
        );
      }
      return true;
    },
    close: (error) => {
      if (ended) return;
      ended = true;
      services.log.call?.(`gRPC ${call.getPath()} ended: ${error.status} ${error.message}`);
      // grpc-js ends a server stream with the status of an 'error' it is given.
      call.emit('error', grpcStatusOf(error));
      broker.streams.closed(session);
    },
    blocked: () => drained,
  };
  let session: StreamingSession;
  try {
    session = broker.streams.open(caller, undefined, transport);
  } catch (error) {
    // Refused (too many streams): ended with its status, which the official clients retry.
    ended = true;
    call.emit('error', statusOf(services, error));
    return;
  }
  call.on('data', (request: object) =>
    session.receive(() => parseBody(streamingPullFrameSchema, decoded(request), 'streaming pull request')),
  );
  call.on('end', () => {
    broker.streams.closed(session);
    void session.drained().then(() => {
      if (ended) return;
      ended = true;
      call.end();
    });
  });
  call.on('cancelled', () => {
    ended = true;
    broker.streams.closed(session);
  });
}
