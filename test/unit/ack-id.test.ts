// Ack ID codec: what encode issues decodes back to the same delivery; any other spelling, any
// changed character and any other secret's ack ID decodes to nothing.

import { randomBytes } from 'node:crypto';
import t from 'tap';
import { AckIdCodec, type Delivery } from '../../src/broker/ack-id.ts';
import { randomFromEnv } from '../helpers/random.ts';

const codec = new AckIdCodec(randomBytes(32));
const random = randomFromEnv(t);

function randomDelivery(i: number): Delivery {
  return {
    region: ['', 'region-a', 'us-east1', 'x'][i % 4],
    subscriptionUid: randomBytes(8).toString('hex'),
    seq: String(i % 7 === 0 ? Number.MAX_SAFE_INTEGER - i : random.int(0, 1e9 - 1)),
    generation: i % 5 === 0 ? 0 : random.int(0, 1e6 - 1),
  };
}

t.test('round trip', async (t) => {
  for (let i = 0; i < 500; i++) {
    const delivery = randomDelivery(i);
    t.same(codec.decode(codec.encode(delivery)), delivery);
  }
});

t.test('a changed character, another secret or another spelling is refused', async (t) => {
  const other = new AckIdCodec(randomBytes(32));
  const alphabet = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.';
  for (let i = 0; i < 200; i++) {
    const ackId = codec.encode(randomDelivery(i));
    t.equal(other.decode(ackId), undefined, 'another secret');
    const at = i % ackId.length;
    const replacement = alphabet.replace(ackId[at], '')[i % (alphabet.length - 1)];
    t.equal(codec.decode(ackId.slice(0, at) + replacement + ackId.slice(at + 1)), undefined, `character ${at} changed`);
  }
  const ackId = codec.encode({ region: '', subscriptionUid: '0123456789abcdef', seq: '35', generation: 1 });
  t.match(ackId, /^0123456789abcdef-z-1-/);
  const tag = ackId.slice(-22);
  t.equal(codec.decode(`0123456789abcdef-0z-1-${tag}`), undefined, 'leading zero in the sequence');
  t.equal(codec.decode(`0123456789abcdef-z-01-${tag}`), undefined, 'leading zero in the generation');
  t.equal(codec.decode(`${ackId}A`), undefined, 'longer tag');
  t.equal(codec.decode(ackId.slice(0, -1)), undefined, 'shorter tag');
  t.equal(codec.decode(`region-a.${ackId}`), undefined, 'region added');
  t.equal(codec.decode(''), undefined, 'empty');
});
