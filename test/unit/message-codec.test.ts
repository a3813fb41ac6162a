// Messages packed for storage (layoutMessage, packMessages, stampMessages) come back from
// unpackMessage as published: random data in both base64 alphabets, with and without padding,
// attributes and ordering keys. Data that is not base64 is found at its index.

import t from 'tap';
import {
  layoutMessage,
  packMessages,
  stampMessages,
  unpackMessage,
  type MessageLayout,
} from '../../src/broker/message-codec.ts';
import { BulkStrings } from '../../src/redis/binary-command.ts';
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
    const layouts = sent.map((m) => layoutMessage(m.base64, m.attributes, m.orderingKey)) as MessageLayout[];
    if (layouts.some((layout) => !layout)) return t.fail(`round ${round}: valid data refused`);
    const packed = packMessages(layouts, { asBlockFields: random.chance(0.5) });
    if (!(packed instanceof BulkStrings)) return t.fail(`round ${round}: valid data refused at ${packed.invalidData}`);
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
  t.equal(layoutMessage('QUJDR'), undefined, 'a length no base64 has');
  t.equal(layoutMessage('QUJ=R'), undefined, 'padding before the end');
  for (const bad of ['QU\nD', 'QU D', 'QU*D', 'QU=D', '!!!!']) {
    const layouts = ['QUJD', bad, 'QUJD'].map((data) => layoutMessage(data)!);
    const packed = packMessages(layouts);
    t.same(packed, { invalidData: 1 }, JSON.stringify(bad));
  }
});
