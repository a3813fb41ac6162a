import type { Server } from 'node:http';
import type { Socket } from 'node:net';

/**
 * gRPC and HTTP/1.1 on one port. gRPC clients open cleartext HTTP/2 "with prior knowledge": the
 * first bytes of their connections are the HTTP/2 preface (RFC 9113 §3.4), with which no HTTP/1
 * request line starts. So each new connection of the HTTP server is read until its first bytes
 * tell the two apart; the bytes read go back into the socket, and it is handed to the gRPC
 * server or to the HTTP server's own connection handling.
 */
const HTTP2_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export interface ConnectionTaker {
  injectConnection(socket: Socket): void;
}

/**
 * Routes the HTTP server's connections that open with the HTTP/2 preface to `grpc`. A connection
 * that sends nothing within the server's headersTimeout is closed, as the HTTP server would.
 */
export function shareWithGrpc(http: Server, grpc: ConnectionTaker): void {
  const httpHandlers = http.listeners('connection') as ((socket: Socket) => void)[];
  http.removeAllListeners('connection');
  http.on('connection', (socket: Socket) => {
    let seen: Buffer = Buffer.alloc(0);
    const dropSilent = () => socket.destroy();
    const onData = (chunk: Buffer) => {
      seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
      const compared = Math.min(seen.length, HTTP2_PREFACE.length);
      const opensHttp2 = seen.subarray(0, compared).equals(HTTP2_PREFACE.subarray(0, compared));
      if (opensHttp2 && seen.length < HTTP2_PREFACE.length) return;
      socket.off('data', onData);
      socket.off('error', dropSilent);
      socket.setTimeout(0);
      socket.pause();
      socket.unshift(seen);
      if (opensHttp2) return grpc.injectConnection(socket);
      for (const handler of httpHandlers) handler.call(http, socket);
      // The HTTP server reads from a paused socket only once it flows again.
      socket.resume();
    };
    socket.on('data', onData);
    socket.on('error', dropSilent);
    if (http.headersTimeout > 0) socket.setTimeout(http.headersTimeout, dropSilent);
  });
}
