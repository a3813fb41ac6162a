// The hand-written JSON of pull answers and streaming frames: for random messages (any bytes of
// data, any text in attributes and ordering keys, lone surrogates included) it parses back to
// exactly what JSON.stringify of the same answer gives, and it is pure ASCII.

import t from 'tap';
import type { ReceivedMessage } from '../../src/broker/pull.ts';
import { asciiJson, receivedMessagesJson } from '../../src/schemas/received-json.ts';
import { randomFromEnv } from '../helpers/random.ts';

function randomText(random: () => number, maxLength: number): string {
  const alphabet = [
    'a',
    'Z',
    '0',
    ' ',
    '"',
    '\\',
    '\n',
    '\t',
    '\u0000',
    '\u001f',
    '\u007f',
    'é',
    '€',
    '日',
    '\ud83d\ude00',
    '\ud800',
    '\udfff',
    '</script>',
  ];
  let text = '';
  const length = Math.floor(random() * maxLength);
  for (let i = 0; i < length; i++) text += alphabet[Math.floor(random() * alphabet.length)];
  return text;
}

function randomMessage(random: () => number, i: number): ReceivedMessage {
  const message: ReceivedMessage['message'] = {
    messageId: random() < 0.5 ? String(i + 1) : `region-a-${i + 1}`,
    publishTime: '2026-11-30T11:25:14.123456Z',
  };
  if (random() < 0.8) message.data = Buffer.from(randomText(random, 50));
  if (random() < 0.5) {
    message.attributes = {};
    const count = Math.floor(random() * 4);
    for (let a = 0; a < count; a++) message.attributes[randomText(random, 8) || 'k'] = randomText(random, 12);
  }
  if (random() < 0.4) message.orderingKey = randomText(random, 10) || 'key';
  const received: ReceivedMessage = {
    ackId: `region-a.0123456789abcdef-${i.toString(36)}-1-${'A'.repeat(22)}`,
    message,
  };
  if (random() < 0.5) received.deliveryAttempt = 1 + Math.floor(random() * 100);
  return received;
}

t.test('parses back to the same value as JSON.stringify, and is ASCII', async (t) => {
  const random = randomFromEnv(t).next;
  for (let round = 0; round < 300; round++) {
    const received = Array.from({ length: Math.floor(random() * 6) }, (_, i) => randomMessage(random, i));
    const rest =
      random() < 0.3
        ? { subscriptionProperties: { exactlyOnceDeliveryEnabled: true, messageOrderingEnabled: false } }
        : undefined;
    const json = receivedMessagesJson(received, rest);
    // What JSON.stringify makes of the same answer with its data in base64 (proto3 JSON bytes).
    const onWire = received.map(({ ackId, message, deliveryAttempt }) => ({
      ackId,
      message: { ...message, data: message.data?.toString('base64') },
      deliveryAttempt,
    }));
    const expected = received.length > 0 ? { receivedMessages: onWire, ...rest } : { ...rest };
    t.same(JSON.parse(json.toString('utf8')), JSON.parse(JSON.stringify(expected)), `round ${round}`);
    t.ok(
      json.every((byte) => byte < 0x80),
      `round ${round}: ASCII only`,
    );
  }
});

t.test('an empty answer is {}', async (t) => {
  t.equal(receivedMessagesJson([]).toString(), '{}');
  t.equal(receivedMessagesJson([], {}).toString(), '{}');
  t.equal(
    receivedMessagesJson([], { subscriptionProperties: { messageOrderingEnabled: true } }).toString(),
    '{"subscriptionProperties":{"messageOrderingEnabled":true}}',
  );
});

t.test('asciiJson escapes what is not ASCII', async (t) => {
  t.equal(asciiJson({ é: '日\ud83d\ude00\u007f' }), '{"\\u00e9":"\\u65e5\\ud83d\\ude00\\u007f"}');
  t.same(JSON.parse(asciiJson('lone \ud800 surrogate')), 'lone \ud800 surrogate');
});
