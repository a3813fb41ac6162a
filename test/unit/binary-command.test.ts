// The one-pass RESP writer of big binary commands (a publish's EVALSHA) writes exactly the bytes
// ioredis's own serialization writes for the same arguments: random strings (any text) and
// Buffers (any size, empty included).

import { Command } from 'ioredis';
import t from 'tap';
import { BinaryArgsCommand, encodeCommand } from '../../src/redis/binary-command.ts';
import { seededRandom } from '../helpers/random.ts';

const TEXTS = ['', '1', '12345678901234567', 'key', '{t0123456789abcdef}:messages', 'é', '日本', '\ud83d\ude00', '\r\n', '$3'];

t.test('same bytes as ioredis for random arguments', async (t) => {
  const seed = Number(process.env.SEED ?? Date.now() % 1_000_000);
  t.comment(`SEED=${seed}`);
  const random = seededRandom(seed);
  for (let i = 0; i < 500; i++) {
    const args = Array.from({ length: random.int(1, 30) }, () =>
      random.chance(0.5) ? random.pick(TEXTS) + random.pick(TEXTS) : Buffer.from(Array.from({ length: random.int(0, 3000) }, () => random.int(0, 255))),
    );
    // RPUSH: ioredis rewrites some HSET argument lists (a key and one object), never RPUSH's.
    const expected = new Command('rpush', args).toWritable(undefined as never);
    const actual = encodeCommand('rpush', args);
    if (!Buffer.from(expected).equals(actual)) {
      t.fail(`arguments ${i} differ`);
      return;
    }
  }
  t.pass('500 random commands, byte for byte');
});

t.test('the command routes by its key and writes the whole payload', async (t) => {
  const command = new BinaryArgsCommand('evalsha', ['0123', '2', '{tag}:a', '{tag}:b', Buffer.from('body')], ['0123', '2', '{tag}:a', '{tag}:b']);
  t.same(command.getKeys(), ['{tag}:a', '{tag}:b'], 'the keys, for Redis Cluster slot routing');
  t.equal(
    command.toWritable().toString(),
    '*6\r\n$7\r\nevalsha\r\n$4\r\n0123\r\n$1\r\n2\r\n$7\r\n{tag}:a\r\n$7\r\n{tag}:b\r\n$4\r\nbody\r\n',
  );
});
