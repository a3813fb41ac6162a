import type { ServerDuplexStream } from '@grpc/grpc-js';
import type { StreamTransport } from '../broker/streaming.ts';
import { parseBody } from '../schemas/common.ts';
import { streamingPullFrameSchema } from '../schemas/streaming.ts';
import { decoded, type GrpcServices, grpcCaller } from './calls.ts';
import { grpcStatusOf } from './status.ts';

/**
 * Subscriber.StreamingPull: a bidirectional stream carrying one streaming session (the broker's
 * streaming.ts, as a WebSocket does). The first request names the subscription; grpc-js calls
 * this before it arrives. Writes that HTTP/2 cannot take yet hold back leasing until the stream
 * drains. The stream ends with an error status only: UNAVAILABLE on shutdown (clients reopen it),
 * or the error that ended it; OK only after the client has half-closed its side.
 */
export function streamingPull(services: GrpcServices, call: ServerDuplexStream<object, object>): void {
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
  const session = broker.streams.open(grpcCaller(broker), undefined, transport);
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
