import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import protobuf from 'protobufjs';
import type { ReceivedMessage } from '../broker/pull.ts';
import type { StreamingPullResponse } from '../broker/streaming.ts';
import { packagePath } from '../paths.ts';
import { receivedMessagesProto } from './received-proto.ts';

/**
 * The google.pubsub.v1 services (and google.iam.v1.IAMPolicy) as the gRPC front end serves them, from the vendored protos
 * (proto/README.md). Messages are plain objects: fields in lowerCamelCase, int64 as strings,
 * enums by name, bytes as Buffers, and a field that is not set is absent (proto3's zero values
 * are not filled in), which is how the broker services' inputs leave a field out.
 */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: false,
  includeDirs: [packagePath('proto')],
};

export const packageDefinition = protoLoader.loadSync(
  [
    'google/pubsub/v1/pubsub.proto',
    'google/iam/v1/iam_policy.proto',
    'google/rpc/status.proto',
    'google/rpc/error_details.proto',
  ],
  LOADER_OPTIONS,
);

interface GooglePackages {
  google: {
    pubsub: { v1: Record<'Publisher' | 'Subscriber', grpc.ServiceClientConstructor> };
    iam: { v1: Record<'IAMPolicy', grpc.ServiceClientConstructor> };
  };
}

const { google } = grpc.loadPackageDefinition(packageDefinition) as unknown as GooglePackages;
const pubsub = google.pubsub.v1;

/**
 * The same protos as protobufjs types, for the fields of a StreamingPullResponse besides its
 * messages, encoded straight from the broker's objects, which have protobufjs's shape.
 */
const root = new protobuf.Root();
root.resolvePath = (_origin, target) => (target.startsWith('google/protobuf/') ? target : packagePath('proto', target));
root.loadSync('google/pubsub/v1/pubsub.proto');
const StreamingPullResponseType = root.lookupType('google.pubsub.v1.StreamingPullResponse');

/**
 * The responses that carry messages are written from the broker's own objects, without the
 * proto-loader conversion of every message into objects of its own: the messages by
 * received-proto.ts, the other fields by protobufjs.
 */
function encodeStreamingPullResponse({ receivedMessages, ...rest }: StreamingPullResponse): Buffer {
  const others = Object.keys(rest).length > 0 ? StreamingPullResponseType.encode(rest).finish() : undefined;
  if (receivedMessages) return receivedMessagesProto(receivedMessages, others);
  return others ? Buffer.from(others.buffer, others.byteOffset, others.length) : Buffer.alloc(0);
}

/**
 * A request whose bytes are not the method's message. grpc-js answers a request that does not
 * decode with INTERNAL, which clients take for a server fault (and retry); the decoders give this
 * instead, and the handlers answer INVALID_ARGUMENT (calls.ts, streaming-pull.ts).
 */
export class UndecodableRequest {
  constructor(readonly message: string) {}
}

function decodingSafely(service: grpc.ServiceDefinition, protoPackage = 'google.pubsub.v1'): grpc.ServiceDefinition {
  return Object.fromEntries(
    Object.entries(service).map(([name, method]) => {
      const decode = method.requestDeserialize;
      const type = (method as { requestType?: { type?: { name?: string } } }).requestType?.type?.name ?? 'request';
      const requestDeserialize = (bytes: Buffer) => {
        try {
          return decode(bytes);
        } catch {
          return new UndecodableRequest(`Invalid request: the bytes are not a ${protoPackage}.${type} message.`);
        }
      };
      return [name, { ...method, requestDeserialize }];
    }),
  );
}

const subscriber = pubsub.Subscriber.service;

export const PUBLISHER_SERVICE = decodingSafely(pubsub.Publisher.service);
export const IAM_POLICY_SERVICE = decodingSafely(google.iam.v1.IAMPolicy.service, 'google.iam.v1');
export const SUBSCRIBER_SERVICE: grpc.ServiceDefinition = decodingSafely({
  ...subscriber,
  Pull: {
    ...subscriber.Pull,
    responseSerialize: (response: { receivedMessages: ReceivedMessage[] }) =>
      receivedMessagesProto(response.receivedMessages),
  },
  StreamingPull: { ...subscriber.StreamingPull, responseSerialize: encodeStreamingPullResponse },
});

/** A message type's encoder, for what goes into metadata rather than a response (status details). */
export function serializerOf(typeName: string): (value: object) => Buffer {
  const type = packageDefinition[typeName] as protoLoader.MessageTypeDefinition<object, object>;
  return (value) => type.serialize(value);
}
