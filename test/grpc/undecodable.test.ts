// Bytes that are not the method's protobuf message are the client's fault: they are answered
// INVALID_ARGUMENT (grpc-js alone would answer INTERNAL, which clients take for a server fault
// and retry), on unary calls and on a stream, and the broker goes on serving.

import * as grpc from '@grpc/grpc-js';
import { Redis } from 'ioredis';
import t from 'tap';
import { buildApp } from '../../src/app.ts';
import { testRedisUrl, uniquePrefix } from '../helpers/redis.ts';

const redis = new Redis(testRedisUrl());
const app = await buildApp({ redis, keyPrefix: uniquePrefix('grpc-undecodable') });
const address = await app.listen({ port: 0, host: '127.0.0.1' });
const client = new grpc.Client(new URL(address).host, grpc.credentials.createInsecure());
t.teardown(async () => {
  client.close();
  await app.close();
  redis.disconnect();
});

const raw = (bytes: Buffer) => bytes;
/** A field cut short: tag 1 (length-delimited), then a length whose varint never ends. */
const TRUNCATED = Buffer.from([0x0a, 0xff]);
const INVALID_WIRE_TYPE = Buffer.from([0xff, 0xff, 0xff]);

function unary(path: string, bytes: Buffer): Promise<grpc.ServiceError | Buffer> {
  return new Promise((resolve) =>
    client.makeUnaryRequest(path, raw, raw, bytes, (error, value) => resolve(error ?? value!)),
  );
}

t.test('unary calls', async (t) => {
  for (const path of [
    '/google.pubsub.v1.Publisher/CreateTopic',
    '/google.pubsub.v1.Publisher/Publish',
    '/google.pubsub.v1.Subscriber/Pull',
    '/google.pubsub.v1.Subscriber/Acknowledge',
    '/google.pubsub.v1.Subscriber/ModifyAckDeadline',
  ]) {
    for (const bytes of [TRUNCATED, INVALID_WIRE_TYPE]) {
      const answer = (await unary(path, bytes)) as grpc.ServiceError;
      t.equal(answer.code, grpc.status.INVALID_ARGUMENT, `${path}: INVALID_ARGUMENT`);
      t.match(answer.details, /^Invalid request: the bytes are not a google\.pubsub\.v1\.\w+ message\.$/);
    }
  }
});

t.test('a stream', async (t) => {
  const stream = client.makeBidiStreamRequest('/google.pubsub.v1.Subscriber/StreamingPull', raw, raw);
  stream.on('data', () => {});
  const ended = new Promise<grpc.ServiceError>((resolve) => stream.on('error', resolve));
  stream.write(TRUNCATED);
  const error = await ended;
  t.equal(error.code, grpc.status.INVALID_ARGUMENT);
  t.match(error.details, /StreamingPullRequest/);
});

t.test('the broker still serves', async (t) => {
  const answer = await unary(
    '/google.pubsub.v1.Publisher/ListTopics',
    Buffer.from([0x0a, 0x0a, ...Buffer.from('projects/p')]),
  );
  t.ok(Buffer.isBuffer(answer), 'ListTopics answers');
});
