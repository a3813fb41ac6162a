import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Server as TlsServer, TLSSocket } from 'node:tls';

/**
 * gRPC and HTTP/1.1 on one port. gRPC clients open cleartext HTTP/2 "with prior knowledge": the
 * first bytes of their connections are the HTTP/2 preface (RFC 9113 §3.4), with which no HTTP/1
 * request line starts. So each new connection of the HTTP server is read until its first bytes
 * tell the two apart; the bytes read go back into the socket, and it is handed to the gRPC
 * server or to the HTTP server's own connection handling.
 *
 * With TLS, the protocol the client and the broker agree on in the handshake (ALPN) tells them
 * apart instead: see chooseProtocol.
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
      if (opensHttp2) return handOver(socket, grpc);
      for (const handler of httpHandlers) handler.call(http, socket);
      // The HTTP server reads from a paused socket only once it flows again.
      socket.resume();
    };
    socket.on('data', onData);
    socket.on('error', dropSilent);
    if (http.headersTimeout > 0) socket.setTimeout(http.headersTimeout, dropSilent);
  });
}

/**
 * Gives a connection to the gRPC server. The HTTP server accepts its sockets half-open (a client
 * that ends its side may still read an answer), and an HTTP/2 session never ends its side by
 * itself: a gRPC client that went away with a plain FIN, without a GOAWAY (a crash, a dropped
 * flood), would keep its socket open for ever. A gRPC connection closes when its peer's side
 * ends.
 */
function handOver(socket: Socket, grpc: ConnectionTaker): void {
  socket.allowHalfOpen = false;
  grpc.injectConnection(socket);
}

/**
 * The ALPN answer of a TLS server shared with gRPC. gRPC clients offer only `h2`; curl, browsers
 * and other HTTP clients offer `http/1.1` too, and get it, so that REST and the WebSocket upgrade
 * reach the HTTP server (which speaks HTTP/1.1 only). A client that offers neither is refused in
 * the handshake; one that offers no ALPN at all (Node's https) speaks HTTP/1.1.
 */
export function chooseProtocol({ protocols }: { protocols: string[] }): string | undefined {
  if (protocols.includes('http/1.1')) return 'http/1.1';
  return protocols.includes('h2') ? 'h2' : undefined;
}

/** Routes the TLS connections of an HTTPS server that agreed on `h2` (chooseProtocol) to `grpc`, decrypted. */
export function shareTlsWithGrpc(https: TlsServer, grpc: ConnectionTaker): void {
  const httpHandlers = https.listeners('secureConnection') as ((socket: TLSSocket) => void)[];
  https.removeAllListeners('secureConnection');
  https.on('secureConnection', (socket: TLSSocket) => {
    if (socket.alpnProtocol === 'h2') return handOver(socket, grpc);
    for (const handler of httpHandlers) handler.call(https, socket);
  });
}
