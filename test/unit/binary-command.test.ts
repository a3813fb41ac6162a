// The one-pass RESP writer of big binary commands (a publish's EVALSHA) writes exactly the bytes
// ioredis's own serialization writes for the same arguments: random strings (any text), then
// Buffers (any size, empty included) laid out as BulkStrings, with or without index fields.

import { Command } from 'ioredis';
import t from 'tap';
import { BinaryArgsCommand, BulkStrings, encodeCommand } from '../../src/redis/binary-command.ts';
import { randomFromEnv } from '../helpers/random.ts';

const TEXTS = [
  '',
  '1',
  '12345678901234567',
  'key',
  '{t0123456789abcdef}:messages',
  'é',
  '日本',
  '\ud83d\ude00',
  '\r\n',
  '$3',
];

/** Bulk strings holding copies of `buffers`. */
function bulkStrings(buffers: Buffer[], indexWidth?: number): BulkStrings {
  const strings = new BulkStrings(
    buffers.map((buffer) => buffer.length),
    { indexWidth },
  );
  buffers.forEach((buffer, i) => {
    buffer.copy(strings.bytes, strings.starts[i]);
  });
  return strings;
}

t.test('same bytes as ioredis for random arguments', async (t) => {
  const random = randomFromEnv(t);
  const written = { inPlace: 0, copied: 0 };
  for (let i = 0; i < 500; i++) {
    // Sometimes more leading text than the room a BulkStrings keeps for it: then it is copied.
    const texts = Array.from(
      { length: random.chance(0.3) ? random.int(40, 80) : random.int(0, 20) },
      () => random.pick(TEXTS) + random.pick(TEXTS),
    );
    const many = random.chance(0.05); // index fields of 3 digits
    const buffers = Array.from({ length: many ? random.int(101, 1000) : random.int(0, 20) }, () =>
      many
        ? Buffer.from(Array.from({ length: random.int(0, 10) }, () => random.int(0, 255)))
        : random.chance(0.01)
          ? Buffer.alloc(random.int(10_000, 2_000_000), random.int(0, 255)) // lengths of 5 to 7 digits
          : Buffer.from(Array.from({ length: random.int(0, 3000) }, () => random.int(0, 255))),
    );
    // With index fields each buffer follows its index, zero-padded: HSET's field/value pairs.
    const indexWidth = random.chance(0.5) ? random.int(1, 5) : undefined;
    const trailing = indexWidth
      ? buffers.flatMap((buffer, j) => [String(j).padStart(indexWidth, '0'), buffer])
      : buffers;
    // RPUSH: ioredis rewrites some HSET argument lists (a key and one object), never RPUSH's.
    const expected = new Command('rpush', [...texts, ...trailing]).toWritable(undefined as never);
    const strings = bulkStrings(buffers, indexWidth);
    // Twice, as a retry does: the second command rewrites the room in front of the strings.
    const first = encodeCommand('rpush', texts.slice(1), strings);
    const actual = encodeCommand('rpush', texts, strings);
    written[actual.buffer === strings.bytes.buffer ? 'inPlace' : 'copied']++;
    if (!Buffer.from(expected).equals(actual)) {
      t.fail(`arguments ${i} differ`);
      return;
    }
    const firstExpected = new Command('rpush', [...texts.slice(1), ...trailing]).toWritable(undefined as never);
    if (first.buffer !== actual.buffer && !Buffer.from(firstExpected).equals(first)) {
      t.fail(`arguments ${i}: a command made earlier changed`);
      return;
    }
    if (strings.count !== buffers.length || !buffers.every((buffer, j) => strings.at(j).equals(buffer))) {
      t.fail(`bulk strings ${i}: at() does not give back each string`);
      return;
    }
  }
  t.pass('500 random commands, byte for byte');
  t.ok(
    written.inPlace > 50 && written.copied > 50,
    `leading parts written in place (${written.inPlace}) and, too long for the room, copied (${written.copied})`,
  );
});

t.test('the command routes by its key and writes the whole payload', async (t) => {
  const routing = ['0123', '2', '{tag}:a', '{tag}:b'];
  const command = new BinaryArgsCommand('evalsha', [...routing, 'x'], bulkStrings([Buffer.from('body')]), routing);
  t.same(command.getKeys(), ['{tag}:a', '{tag}:b'], 'the keys, for Redis Cluster slot routing');
  t.equal(
    command.toWritable().toString(),
    '*7\r\n$7\r\nevalsha\r\n$4\r\n0123\r\n$1\r\n2\r\n$7\r\n{tag}:a\r\n$7\r\n{tag}:b\r\n$1\r\nx\r\n$4\r\nbody\r\n',
  );
});
