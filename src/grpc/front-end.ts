import { Server, ServerCredentials } from '@grpc/grpc-js';
import { ReflectionService } from '@grpc/reflection';
import type { Socket } from 'node:net';
import type { Authentication } from '../auth/authentication.ts';
import type { Broker } from '../broker/broker.ts';
import { PUBLISH_BODY_LIMIT } from '../../routes/limits.ts';
import type { GrpcLog } from './calls.ts';
import { iamPolicyService } from './iam.ts';
import { IAM_POLICY_SERVICE, packageDefinition, PUBLISHER_SERVICE, SUBSCRIBER_SERVICE } from './protos.ts';
import { publisherService } from './publisher.ts';
import { subscriberService } from './subscriber.ts';

/**
 * The gRPC front end: google.pubsub.v1 Publisher and Subscriber, and google.iam.v1.IAMPolicy
 * (and server reflection, for grpcurl) over a broker. It does not listen: connections are handed
 * to it (one-port.ts shares the HTTP port with it).
 */
export interface GrpcFrontEnd {
  injectConnection(socket: Socket): void;
  /** Finishes the calls under way (streams end when the broker closes them), then closes. */
  close(): Promise<void>;
}

/** Calls still running this long after close() began are cancelled. */
const SHUTDOWN_GRACE_MS = 10_000;
/**
 * A connection without a call for this long is closed (GOAWAY; clients reconnect when they next
 * call), so that idle connections do not pile up against MAX_CONNECTIONS.
 */
const IDLE_CONNECTION_MS = 5 * 60_000;

export function createGrpcFrontEnd(broker: Broker, log: GrpcLog, authentication?: Authentication): GrpcFrontEnd {
  const server = new Server({
    // A publish may carry 10 MB of data, as over REST (grpc-js takes 4 MiB by default).
    'grpc.max_receive_message_length': PUBLISH_BODY_LIMIT,
    'grpc.max_connection_idle_ms': IDLE_CONNECTION_MS,
  });
  const services = { broker, log, authentication };
  server.addService(PUBLISHER_SERVICE, publisherService(services));
  server.addService(SUBSCRIBER_SERVICE, subscriberService(services));
  server.addService(IAM_POLICY_SERVICE, iamPolicyService(services));
  new ReflectionService(packageDefinition, {
    services: ['google.pubsub.v1.Publisher', 'google.pubsub.v1.Subscriber', 'google.iam.v1.IAMPolicy'],
  }).addToServer(server);
  const injector = server.createConnectionInjector(ServerCredentials.createInsecure());
  let closing = false;
  return {
    // A connection that comes once closing began is refused: the server would no longer track
    // it, and its calls would keep the process from ending. Its client retries elsewhere or later.
    injectConnection: (socket) => (closing ? socket.destroy() : injector.injectConnection(socket)),
    close: () =>
      new Promise((resolve) => {
        closing = true;
        const force = setTimeout(() => server.forceShutdown(), SHUTDOWN_GRACE_MS);
        server.tryShutdown(() => {
          clearTimeout(force);
          resolve();
        });
      }),
  };
}
