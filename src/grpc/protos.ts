import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { packagePath } from '../paths.ts';

/**
 * The google.pubsub.v1 services as the gRPC front end serves them, from the vendored protos
 * (proto/README.md). Messages are plain objects: fields in lowerCamelCase, int64 as strings,
 * enums by name, bytes as Buffers, and a field that is not set is absent (proto3's zero values
 * are not filled in), which is how the broker services' inputs leave a field out.
 */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [packagePath('proto')],
};

export const packageDefinition = protoLoader.loadSync(
  ['google/pubsub/v1/pubsub.proto', 'google/rpc/status.proto', 'google/rpc/error_details.proto'],
  LOADER_OPTIONS,
);

interface PubsubPackage {
  google: { pubsub: { v1: Record<'Publisher' | 'Subscriber', grpc.ServiceClientConstructor> } };
}

const pubsub = (grpc.loadPackageDefinition(packageDefinition) as unknown as PubsubPackage).google.pubsub.v1;

export const PUBLISHER_SERVICE = pubsub.Publisher.service;
export const SUBSCRIBER_SERVICE = pubsub.Subscriber.service;

/** A message type's encoder, for what goes into metadata rather than a response (status details). */
export function serializerOf(typeName: string): (value: object) => Buffer {
  const type = packageDefinition[typeName] as protoLoader.MessageTypeDefinition<object, object>;
  return (value) => type.serialize(value);
}
