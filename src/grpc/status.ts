import { Metadata, type ServiceError, type status as GrpcStatus } from '@grpc/grpc-js';
import { type ApiError, GRPC_CODES } from '../errors.ts';
import { serializerOf } from './protos.ts';

const encodeStatus = serializerOf('google.rpc.Status');
const encodeErrorInfo = serializerOf('google.rpc.ErrorInfo');

/**
 * An ApiError as a gRPC status: the canonical code and message, and its details (the ErrorInfo
 * of exactly-once ack failures) as the `grpc-status-details-bin` trailer, a serialized
 * google.rpc.Status, which is where the official clients look for them.
 */
export function grpcStatusOf(error: ApiError): Partial<ServiceError> & { code: GrpcStatus } {
  const code = GRPC_CODES[error.status] as GrpcStatus;
  const metadata = new Metadata();
  if (error.details?.length) {
    // google.protobuf.Any is one of protobufjs's built-in types, whose fields keep their
    // snake_case names (the loader's camelCase applies to the vendored protos only).
    const details = error.details.map(({ '@type': typeUrl, reason, domain, metadata: entries }) => ({
      type_url: typeUrl,
      value: encodeErrorInfo({ reason, domain, metadata: entries }),
    }));
    // grpc-js base64-encodes -bin metadata itself.
    metadata.set('grpc-status-details-bin', encodeStatus({ code, message: error.message, details }));
  }
  return { code, details: error.message, metadata };
}
