import {
  type Metadata,
  type sendUnaryData,
  type ServerUnaryCall,
  status as Status,
  type UntypedHandleCall,
} from '@grpc/grpc-js';
import { type Authentication, bearerToken } from '../auth/authentication.ts';
import type { Broker } from '../broker/broker.ts';
import type { CallContext } from '../broker/call-context.ts';
import { invalidArgument, unexpectedError } from '../errors.ts';
import { UndecodableRequest } from './protos.ts';
import { grpcStatusOf } from './status.ts';

/** What the RPC handlers of the gRPC front end share: caller contexts, errors, the unary shape. */
export interface GrpcLog {
  error(message: string): void;
  /** One line per finished call, when the broker logs every request. */
  call?(message: string): void;
}

export interface GrpcServices {
  broker: Broker;
  log: GrpcLog;
  /** Authenticates every call; absent, calls carry no principal. */
  authentication?: Authentication;
}

/**
 * The caller context of a gRPC call, authenticated by its `authorization: Bearer <token>`
 * metadata (UNAUTHENTICATED without a valid one) and counted against the request rate limit
 * (RESOURCE_EXHAUSTED past it); `signal` is aborted when the call is cancelled or its deadline
 * passes.
 */
export async function grpcCaller(
  { broker, authentication }: GrpcServices,
  call: { metadata: Metadata; getPeer(): string },
  signal?: AbortSignal,
): Promise<CallContext> {
  const [authorization] = call.metadata.get('authorization');
  const principal = authentication
    ? await authentication.principalOf(bearerToken(typeof authorization === 'string' ? authorization : undefined))
    : undefined;
  const caller: CallContext = {
    principal,
    address: peerAddress(call.getPeer()),
    endpoint: 'grpc',
    region: broker.regions.local.name,
    signal,
  };
  broker.admit(caller);
  return caller;
}

/** The address of a grpc-js peer (`127.0.0.1:5000`, `[::1]:5000`), without its port. */
export function peerAddress(peer: string): string {
  return peer.replace(/:\d+$/, '').replace(/^\[(.*)\]$/, '$1');
}

/** The gRPC status for anything a handler threw; internal failures are logged, never echoed. */
export function statusOf({ broker, log }: GrpcServices, error: unknown) {
  const apiError = unexpectedError(error, broker.ctx.redis);
  if (apiError.status === 'INTERNAL') log.error(`gRPC call failed: ${(error as Error)?.stack ?? String(error)}`);
  return grpcStatusOf(apiError);
}

/** A unary RPC handler that runs `run` on the decoded request and answers its result or its error. */
export function unary<Request, Response>(
  services: GrpcServices,
  run: (request: Request, caller: CallContext) => Promise<Response>,
): UntypedHandleCall {
  return (call: ServerUnaryCall<Request, Response>, callback: sendUnaryData<Response>) => {
    const cancelled = new AbortController();
    call.on('cancelled', () => cancelled.abort());
    const startedAt = performance.now();
    const logCall = (code: Status) => {
      const elapsedMs = performance.now() - startedAt;
      services.broker.metrics.request(call.getPath(), Status[code], elapsedMs / 1000);
      services.log.call?.(`gRPC ${call.getPath()} ${code} ${Math.round(elapsedMs)} ms`);
    };
    // A handler that throws before its first await (a missing name) is answered like one that
    // rejects: it runs inside then().
    grpcCaller(services, call, cancelled.signal)
      .then((caller) => run(decoded(call.request), caller))
      .then(
        (response) => {
          logCall(0);
          callback(null, response);
        },
        (error: unknown) => {
          const status = statusOf(services, error);
          logCall(status.code);
          callback(status);
        },
      );
  };
}

/** A decoded request, or INVALID_ARGUMENT for bytes that were not one (protos.ts). */
export function decoded<Request>(request: Request | UndecodableRequest): Request {
  if (request instanceof UndecodableRequest) throw invalidArgument(request.message);
  return request;
}
