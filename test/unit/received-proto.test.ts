// The gRPC front end writes received messages into protobuf by hand (src/grpc/received-proto.ts):
// its bytes must decode to what protobufjs's own encoding of the same response decodes to, for
// any message (random data, attributes and ordering keys in any Unicode, any publish time), and be
// the very same bytes when every field has a value.

import t from 'tap';
import type { ReceivedMessage } from '../../src/broker/pull.ts';
import { formatTimestampUs } from '../../src/broker/durations.ts';
import { timestampFromJson } from '../../src/grpc/convert.ts';
import { packageDefinition } from '../../src/grpc/protos.ts';
import { receivedMessagesProto } from '../../src/grpc/received-proto.ts';
import { randomFromEnv } from '../helpers/random.ts';

type Codec = { serialize(value: object): Buffer; deserialize(bytes: Buffer): object };
const response = packageDefinition['google.pubsub.v1.StreamingPullResponse'] as unknown as Codec;

const rnd = randomFromEnv(t);
const ALPHABET = ['a', 'Z', '0', '-', ' ', 'é', 'ß', '€', '中', '😀', '\u0000', '"'];
const text = (max: number, min = 0) => Array.from({ length: rnd.int(min, max) }, () => rnd.pick(ALPHABET)).join('');

function randomMessage(full: boolean): ReceivedMessage {
  const data =
    full || rnd.chance(0.8) ? Buffer.from(Array.from({ length: rnd.int(1, 3000) }, () => rnd.int(0, 255))) : undefined;
  const attributes =
    full || rnd.chance(0.5)
      ? Object.fromEntries(
          Array.from({ length: rnd.int(1, 5) }, (_, i) => [`${text(8, 1)}${i}`, text(20, full ? 1 : 0)]),
        )
      : undefined;
  const publishTime = formatTimestampUs(rnd.int(1, 4_102_444_800) * 1_000_000 + rnd.int(full ? 1 : 0, 999_999));
  return {
    ackId: `0123456789abcdef-${rnd.int(0, 1e9).toString(36)}-${rnd.int(0, 99).toString(36)}-${'A'.repeat(22)}`,
    deliveryAttempt: full || rnd.chance(0.5) ? rnd.int(1, 300) : undefined,
    message: {
      data,
      attributes,
      messageId: String(rnd.int(1000, 1e12)),
      publishTime,
      orderingKey: full || rnd.chance(0.3) ? text(30, 1) : undefined,
    },
  };
}

/** The same response in the form proto-loader encodes (Timestamps as objects). */
const protoLoaderForm = (received: ReceivedMessage[], rest: object = {}) => ({
  receivedMessages: received.map(({ ackId, message, deliveryAttempt }) => ({
    ackId,
    message: { ...message, publishTime: timestampFromJson(message.publishTime) },
    deliveryAttempt,
  })),
  ...rest,
});

t.test('random messages decode alike', async (t) => {
  for (let round = 0; round < 200; round++) {
    const received = Array.from({ length: rnd.int(1, 20) }, () => randomMessage(false));
    const mine = response.deserialize(receivedMessagesProto(received));
    const theirs = response.deserialize(response.serialize(protoLoaderForm(received)));
    if (!t.same(mine, theirs, `round ${round}`)) break;
  }
});

t.test('messages with every field set are the same bytes', async (t) => {
  for (let round = 0; round < 100; round++) {
    const received = Array.from({ length: rnd.int(1, 10) }, () => randomMessage(true));
    const same = receivedMessagesProto(received).equals(response.serialize(protoLoaderForm(received)));
    if (!t.ok(same, `round ${round}`)) break;
  }
});

t.test('the response fields after the messages', async (t) => {
  const received = [randomMessage(true)];
  const properties = { subscriptionProperties: { exactlyOnceDeliveryEnabled: true, messageOrderingEnabled: true } };
  const rest = response.serialize(properties);
  t.same(
    response.deserialize(receivedMessagesProto(received, rest)),
    response.deserialize(response.serialize(protoLoaderForm(received, properties))),
  );
});
