// A raw grpc-js client for the gRPC front end (no Pub/Sub library in between), over the vendored
// protos: Publisher and Subscriber stubs, unary calls as promises, a StreamingPull wrapper that
// keeps every response and how the call ended, and a decoder of the grpc-status-details-bin
// trailer that loads google/rpc on its own (not through the broker's encoder).
//
//   const b = await startGrpcBroker(t);
//   await b.rpc(b.publisher, 'CreateTopic', { name: b.topicName('orders') });
//   const stream = b.stream();
//   stream.write({ subscription: b.subName('s'), streamAckDeadlineSeconds: 60 });

import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { AddressInfo, Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.ts';
import type { Clock } from '../../src/broker/clock.ts';
import type { BrokerLimits } from '../../src/broker/limits.ts';
import { packageDefinition } from '../../src/grpc/protos.ts';
import { packagePath } from '../../src/paths.ts';
import { okApi } from '../helpers/app.ts';
import { redisTargets, type RedisTarget, uniquePrefix } from '../helpers/redis.ts';
import { hasMessages, sleep, StreamResponses, within } from '../helpers/stream-responses.ts';

export { ackIdsOf, hasMessages, isHeartbeat, sleep } from '../helpers/stream-responses.ts';

export const P = 'grpc-project';
export const topicName = (id: string) => `projects/${P}/topics/${id}`;
export const subName = (id: string) => `projects/${P}/subscriptions/${id}`;

interface PubsubPackage {
  google: { pubsub: { v1: Record<'Publisher' | 'Subscriber', grpc.ServiceClientConstructor> } };
}
const pubsub = (grpc.loadPackageDefinition(packageDefinition) as unknown as PubsubPackage).google.pubsub.v1;

/** A unary call as a promise: the response, or a rejection with the grpc-js ServiceError. */
export function rpc<T = any>(
  client: grpc.Client,
  method: string,
  request: object,
  metadata = new grpc.Metadata(),
): Promise<T> {
  return new Promise((resolve, reject) => {
    const call = (client as unknown as Record<string, (...args: unknown[]) => void>)[method];
    if (typeof call !== 'function') throw new Error(`no method ${method}`);
    call.call(client, request, metadata, (error: grpc.ServiceError | null, response: T) =>
      error ? reject(error) : resolve(response),
    );
  });
}

/** The error of a unary call that must fail (a call that succeeds throws). */
export async function rpcError(client: grpc.Client, method: string, request: object): Promise<grpc.ServiceError> {
  try {
    const response = await rpc(client, method, request);
    throw new Error(`${method} succeeded: ${JSON.stringify(response).slice(0, 300)}`);
  } catch (error) {
    if ((error as grpc.ServiceError).code === undefined) throw error;
    return error as grpc.ServiceError;
  }
}

// google.rpc.Status and ErrorInfo, loaded apart from the broker's own definitions, in the
// protos' own (snake_case) field names.
const rpcTypes = protoLoader.loadSync(['google/rpc/status.proto', 'google/rpc/error_details.proto'], {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  includeDirs: [packagePath('proto')],
});
const decoderOf = (name: string) => (rpcTypes[name] as protoLoader.MessageTypeDefinition<object, any>).deserialize;
const decodeStatus = decoderOf('google.rpc.Status');
const decodeErrorInfo = decoderOf('google.rpc.ErrorInfo');

export interface DecodedStatusDetails {
  code: number;
  message: string;
  details: { type_url: string; errorInfo?: { reason: string; domain: string; metadata: Record<string, string> } }[];
}

/** The grpc-status-details-bin trailer of an error, decoded; undefined when there is none. */
export function statusDetails(error: { metadata?: grpc.Metadata }): DecodedStatusDetails | undefined {
  const [raw] = error.metadata?.get('grpc-status-details-bin') ?? [];
  if (raw === undefined) return undefined;
  const status = decodeStatus(Buffer.isBuffer(raw) ? raw : Buffer.from(String(raw), 'base64'));
  return {
    code: status.code,
    message: status.message,
    details: status.details.map((any: { type_url: string; value: Buffer }) => ({
      type_url: any.type_url,
      errorInfo: any.type_url === 'type.googleapis.com/google.rpc.ErrorInfo' ? decodeErrorInfo(any.value) : undefined,
    })),
  };
}

/** The ack ID → failure map of an exactly-once ack failure's ErrorInfo. */
export function ackFailures(error: { metadata?: grpc.Metadata }): Record<string, string> | undefined {
  return statusDetails(error)?.details.find((d) => d.errorInfo?.reason === 'EXACTLY_ONCE_ACKID_FAILURE')?.errorInfo
    ?.metadata;
}

export interface ReceivedMessage {
  ackId: string;
  deliveryAttempt?: number;
  message: {
    data?: Buffer;
    attributes?: Record<string, string>;
    messageId: string;
    publishTime: { seconds: string; nanos?: number };
    orderingKey?: string;
  };
}

export const textOf = (m: ReceivedMessage) => m.message.data?.toString() ?? '';

/** An acknowledgeConfirmation with its empty lists filled in (proto3 leaves them out on the wire). */
export const ackConfirmation = (c: any) => ({
  ackIds: c?.ackIds ?? [],
  invalidAckIds: c?.invalidAckIds ?? [],
  unorderedAckIds: c?.unorderedAckIds ?? [],
  temporaryFailedAckIds: c?.temporaryFailedAckIds ?? [],
});

/** A modifyAckDeadlineConfirmation with its empty lists filled in. */
export const modConfirmation = (c: any) => ({
  ackIds: c?.ackIds ?? [],
  invalidAckIds: c?.invalidAckIds ?? [],
  temporaryFailedAckIds: c?.temporaryFailedAckIds ?? [],
});

/** One StreamingPull call: keeps every response (test/helpers/stream-responses.ts) and how the call ended. */
export class PullStream extends StreamResponses<ReceivedMessage> {
  readonly call: grpc.ClientDuplexStream<object, any>;
  /** How the call ended (set once grpc-js reports its status). */
  status?: grpc.StatusObject;
  readonly ended: Promise<grpc.StatusObject>;

  constructor(subscriber: grpc.Client) {
    super('a response');
    this.call = (subscriber as unknown as { StreamingPull(): grpc.ClientDuplexStream<object, any> }).StreamingPull();
    this.call.on('data', (response: any) => this.arrive(response));
    // Errors end the call; 'status' reports them too.
    this.call.on('error', () => {});
    this.ended = new Promise((resolve) =>
      this.call.on('status', (status: grpc.StatusObject) => {
        this.status = status;
        resolve(status);
        this.notify();
      }),
    );
  }

  /** Every response, in arrival order. */
  get responses(): any[] {
    return this.arrived;
  }

  write(request: object): void {
    this.call.write(request);
  }

  /** Half-closes the client's side. */
  halfClose(): void {
    this.call.end();
  }

  cancel(): void {
    this.call.cancel();
  }

  /** Every message pending, taken at once. */
  takeAllPending(): ReceivedMessage[] {
    const taken = this.pending.filter(hasMessages);
    this.discard(hasMessages);
    return taken.flatMap((r) => r.receivedMessages);
  }

  /** Sends the first request and waits for the subscriptionProperties answer. */
  async start(first: object, timeoutMs = 3000): Promise<any> {
    this.write(first);
    return (await this.take((r) => r?.subscriptionProperties !== undefined, timeoutMs, 'subscriptionProperties'))
      .subscriptionProperties;
  }

  /** Resolves with the final status, or throws after timeoutMs. */
  waitEnd(timeoutMs = 3000): Promise<grpc.StatusObject> {
    return within(this.ended, timeoutMs, 'call not ended');
  }

  protected ending(): string | undefined {
    return this.status && `call ended (${this.status.code} ${this.status.details})`;
  }

  protected sendKeepAlive(): void {
    this.write({});
  }
}

interface Teardown {
  teardown(fn: () => unknown): void;
}

export interface GrpcBrokerOptions {
  target?: RedisTarget;
  clock?: Clock;
  heartbeatMs?: number;
  pullWaitMs?: number;
  limits?: Partial<BrokerLimits>;
}

/** A listening broker (REST, WebSocket and gRPC on one port) and raw gRPC clients of it. */
export async function startGrpcBroker(t: Teardown, options: GrpcBrokerOptions = {}) {
  const target = options.target ?? redisTargets()[0];
  const redis = target.connect();
  const app: FastifyInstance = await buildApp({
    redis,
    keyPrefix: uniquePrefix('grpc'),
    clock: options.clock,
    pullWaitMs: options.pullWaitMs ?? 200,
    streamHeartbeatMs: options.heartbeatMs ?? 300,
    limits: options.limits,
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const port = (app.server.address() as AddressInfo).port;
  const address = `127.0.0.1:${port}`;
  const sockets = new Set<Socket>();
  app.server.on('connection', (socket: Socket) => sockets.add(socket));
  const grpcClients: grpc.Client[] = [];
  const newClients = () => {
    const credentials = grpc.credentials.createInsecure();
    const publisher = new pubsub.Publisher(address, credentials);
    const subscriber = new pubsub.Subscriber(address, credentials);
    grpcClients.push(publisher, subscriber);
    return { publisher, subscriber };
  };
  const { publisher, subscriber } = newClients();
  const streams: PullStream[] = [];
  let closing: Promise<void> | undefined;
  const close = () => (closing ??= app.close());
  t.teardown(async () => {
    for (const stream of streams) if (!stream.status) stream.cancel();
    for (const client of grpcClients) client.close();
    // A close that hangs (a leaked connection) must not hang the file: destroy what is left.
    const closedInTime = await Promise.race([close().then(() => true), sleep(5000).then(() => false)]);
    if (!closedInTime) {
      for (const socket of sockets) socket.destroy();
      await close();
    }
    redis.disconnect();
  });

  /** REST, injected: status and parsed body. */
  const api = async (method: string, url: string, body?: unknown) => {
    const response = await app.inject({
      method: method as 'GET',
      url,
      ...(body === undefined ? {} : { payload: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
    });
    return { status: response.statusCode, body: response.body ? JSON.parse(response.body) : undefined };
  };
  const ok = okApi(api);
  const topic = (id: string) => rpc(publisher, 'CreateTopic', { name: topicName(id) });
  const subscription = (id: string, topicId: string, extra: object = {}) =>
    rpc(subscriber, 'CreateSubscription', { name: subName(id), topic: topicName(topicId), ...extra });
  const publish = async (
    topicId: string,
    messages: { data?: Buffer | string; attributes?: Record<string, string>; orderingKey?: string }[],
  ): Promise<string[]> => {
    const encoded = messages.map(({ data, ...rest }) => ({
      ...rest,
      ...(data === undefined ? {} : { data: Buffer.isBuffer(data) ? data : Buffer.from(data) }),
    }));
    return (await rpc(publisher, 'Publish', { topic: topicName(topicId), messages: encoded })).messageIds;
  };
  /** A new StreamingPull call (on the shared connection, or on `client`). */
  const stream = (client: grpc.Client = subscriber) => {
    const s = new PullStream(client);
    streams.push(s);
    return s;
  };
  /** A stream started on `sub` with `extra` in its first request; waits for subscriptionProperties. */
  const open = async (sub: string, extra: object = {}, client: grpc.Client = subscriber) => {
    const s = stream(client);
    await s.start({ subscription: subName(sub), streamAckDeadlineSeconds: 60, ...extra });
    return s;
  };
  /** How many streaming sessions the broker holds (a cancelled or ended one leaves). */
  const sessions = () => (app.broker.streams as unknown as { sessions: Set<unknown> }).sessions.size;
  return {
    app,
    redis,
    port,
    address,
    publisher,
    subscriber,
    newClients,
    api,
    ok,
    topic,
    subscription,
    publish,
    stream,
    open,
    sessions,
    sockets,
    close,
  };
}

export type GrpcBroker = Awaited<ReturnType<typeof startGrpcBroker>>;
