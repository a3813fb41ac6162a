// Messages decoded from their JSON form (decodeMessageData) and packed for storage
// (layoutMessage, packMessages, stampMessages) come back from unpackMessage as published: random
// data in both base64 alphabets, with and without padding, attributes and ordering keys. Data that
// is not base64 is found at its index.

import t from 'tap';
import { layoutMessage, packMessages, stampMessages, unpackMessage } from '../../src/broker/message-codec.ts';
import { decodeMessageData } from '../../src/schemas/message-data.ts';
import { randomFromEnv } from '../helpers/random.ts';

const random = randomFromEnv(t);

interface Sent {
  data: Buffer;
  base64: string;
  attributes?: Record<string, string>;
  orderingKey?: string;
}

function randomMessage(): Sent {
  const data = Buffer.from(Array.from({ length: random.int(0, 40) }, () => random.int(0, 255)));
  let base64 = random.chance(0.5) ? data.toString('base64') : data.toString('base64url');
  if (random.chance(0.3)) base64 = base64.replace(/=+$/, '');
  const attributes = random.chance(0.5)
    ? { kind: random.pick(['a', 'é', '日本']), n: String(random.int(0, 9)) }
    : undefined;
  const orderingKey = random.chance(0.5) ? random.pick(['k', 'ключ', 'key-1']) : undefined;
  return { data, base64, attributes, orderingKey };
}

t.test('packed messages unpack as sent, with the stamped publish time', async (t) => {
  for (let round = 0; round < 300; round++) {
    const sent = Array.from({ length: random.int(1, 20) }, randomMessage);
    const data = decodeMessageData(sent.map((m) => (m.base64 === '' && random.chance(0.5) ? undefined : m.base64)));
    if (!Array.isArray(data)) return t.fail(`round ${round}: valid data refused at ${data.invalidData}`);
    const layouts = sent.map((m, i) => layoutMessage(data[i], m.attributes, m.orderingKey));
    const packed = packMessages(layouts, { asBlockFields: random.chance(0.5) });
    const publishTimeUs = 1_764_000_000_000_000 + random.int(0, 1_000_000);
    stampMessages(packed, publishTimeUs);
    const unpacked = sent.map((_, i) => {
      const stored = unpackMessage(Buffer.from(packed.at(i)));
      return { ...stored, data: stored.data.toString('hex') };
    });
    const expected = sent.map((message) => ({
      data: message.data.toString('hex'),
      publishTimeUs,
      ...(message.attributes ? { attributes: message.attributes } : {}),
      ...(message.orderingKey ? { orderingKey: message.orderingKey } : {}),
    }));
    t.same(unpacked, expected, `round ${round}: ${sent.length} messages`);
  }
});

t.test('data that is not base64 is refused at its index', async (t) => {
  t.same(decodeMessageData(['QUJD', 'QUJDR']), { invalidData: 1 }, 'a length no base64 has');
  t.same(decodeMessageData(['QUJ=R']), { invalidData: 0 }, 'padding before the end');
  for (const bad of ['QU\nD', 'QU D', 'QU*D', 'QU=D', '!!!!']) {
    t.same(decodeMessageData(['QUJD', bad, 'QUJD']), { invalidData: 1 }, JSON.stringify(bad));
  }
});
