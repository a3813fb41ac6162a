// How partly failed exactly-once acks and nacks are answered over gRPC: the applied ack IDs are
// named as transient failures (so that the Node client retries them instead of reporting them
// failed), and a retry of one within the retry horizon answers success without the broker.

import t from 'tap';
import type { SettleOutcome } from '../../src/broker/settlement.ts';
import type { ApiError } from '../../src/errors.ts';
import { SettledInFailedBatch } from '../../src/grpc/settled-in-failed-batch.ts';

const outcome = (applied: string[], failed: string[]): SettleOutcome => ({
  applied,
  failures: new Map(failed.map((ackId) => [ackId, 'PERMANENT_FAILURE_INVALID_ACK_ID'])),
});

function thrown(fn: () => void): ApiError {
  try {
    fn();
  } catch (error) {
    return error as ApiError;
  }
  throw new Error('nothing thrown');
}

t.test('an outcome without failures answers success and remembers nothing', async (t) => {
  const memory = new SettledInFailedBatch();
  memory.throwFailures(outcome(['a', 'b'], []), 'ack');
  t.same(memory.unsettled('ack', ['a', 'b']), ['a', 'b']);
});

t.test('applied IDs of a failed batch are named as transient and answered on retry', async (t) => {
  let now = 1_000;
  const memory = new SettledInFailedBatch(() => now);
  const error = thrown(() => memory.throwFailures(outcome(['a', 'b'], ['x']), 'ack'));
  t.equal(error.status, 'INVALID_ARGUMENT');
  t.same(error.details?.[0].metadata, {
    x: 'PERMANENT_FAILURE_INVALID_ACK_ID',
    a: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID',
    b: 'TRANSIENT_FAILURE_UNORDERED_ACK_ID',
  });
  t.same(memory.unsettled('ack', ['a', 'b', 'x', 'c']), ['x', 'c'], 'the retried applied IDs need nothing more');
  t.same(memory.unsettled('nack', ['a', 'b']), ['a', 'b'], 'an ack is not a nack');
  now += 10 * 60_000 - 1;
  t.same(memory.unsettled('ack', ['a']), [], 'remembered for the retry horizon');
  now += 1;
  t.same(memory.unsettled('ack', ['a']), ['a'], 'then forgotten');
});

t.test('deadline extensions are named as transient but not remembered', async (t) => {
  const memory = new SettledInFailedBatch();
  const error = thrown(() => memory.throwFailures(outcome(['a'], ['x'])));
  t.equal(error.details?.[0].metadata.a, 'TRANSIENT_FAILURE_UNORDERED_ACK_ID');
  t.same(memory.unsettled('ack', ['a']), ['a']);
  t.same(memory.unsettled('nack', ['a']), ['a']);
});

t.test('memory is bounded: the oldest are forgotten first', async (t) => {
  const memory = new SettledInFailedBatch(() => 0);
  const applied = Array.from({ length: 100_001 }, (_, i) => `id-${i}`);
  thrown(() => memory.throwFailures(outcome(applied, ['x']), 'ack'));
  t.same(memory.unsettled('ack', ['id-0', 'id-1', 'id-100000']), ['id-0'], 'the first one was forgotten');
});
