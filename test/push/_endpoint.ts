// A push endpoint for tests: a node:http server on a free port that records every request and
// answers as the test's `answer` decides (a status, 'hang' to never answer, or 'processing' to
// answer 102 Processing and nothing after it).

import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface PushedRequest {
  headers: IncomingHttpHeaders;
  body: Buffer;
  /** The wrapped envelope, when the body is JSON. */
  json?: any;
  receivedAt: number;
  /** Settles when the request's response is closed: answered, or its connection ended by the broker. */
  closed: Promise<void>;
}

type Reply = number | 'hang' | 'processing';
export type Answer = (request: PushedRequest, index: number) => Reply | Promise<Reply>;

export interface Endpoint {
  url: string;
  requests: PushedRequest[];
  /** Requests received and not yet answered. */
  open: Set<PushedRequest>;
  answer: Answer;
}

export async function startEndpoint(t: { teardown(fn: () => unknown): void }, answer: Answer = () => 204) {
  const hanging = new Set<ServerResponse>();
  const endpoint: Endpoint = { url: '', requests: [], open: new Set(), answer };
  const server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', async () => {
      const body = Buffer.concat(chunks);
      const closed = new Promise<void>((resolve) => response.on('close', resolve));
      const pushed: PushedRequest = { headers: request.headers, body, receivedAt: Date.now(), closed };
      try {
        pushed.json = JSON.parse(body.toString());
      } catch {}
      endpoint.requests.push(pushed);
      endpoint.open.add(pushed);
      const status = await endpoint.answer(pushed, endpoint.requests.length - 1);
      if (status === 'hang' || status === 'processing') {
        if (status === 'processing') response.writeProcessing();
        hanging.add(response);
        response.on('close', () => endpoint.open.delete(pushed));
        return;
      }
      endpoint.open.delete(pushed);
      response.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  endpoint.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/push`;
  t.teardown(async () => {
    for (const response of hanging) response.destroy();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return endpoint;
}

/** The data of a wrapped push, as text. */
export const pushedText = (request: PushedRequest) =>
  Buffer.from(request.json?.message?.data ?? '', 'base64').toString();
