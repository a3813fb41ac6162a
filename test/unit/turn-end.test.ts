// The end of a turn (src/redis/turn-end.ts): its tasks run once the turn's callbacks are done, in
// order, and a task added by one of them runs in the same pass, before any later setImmediate:
// a socket corked by a batch of publishes sent there is uncorked in that same turn.
import t from 'tap';
import { atTurnEnd } from '../../src/redis/turn-end.ts';

t.test('tasks run in order after the turn, those they add in the same pass', async (t) => {
  const order: string[] = [];
  atTurnEnd(() => {
    order.push('first');
    atTurnEnd(() => order.push('added by the first'));
  });
  atTurnEnd(() => order.push('second'));
  setImmediate(() => order.push('a later setImmediate'));
  order.push('the rest of the turn');
  await new Promise((resolve) => setTimeout(resolve, 20));
  t.same(order, ['the rest of the turn', 'first', 'second', 'added by the first', 'a later setImmediate']);
});

t.test('the next turn has a pass of its own', async (t) => {
  const order: string[] = [];
  atTurnEnd(() => order.push('one'));
  await new Promise((resolve) => setTimeout(resolve, 5));
  atTurnEnd(() => order.push('two'));
  await new Promise((resolve) => setTimeout(resolve, 5));
  t.same(order, ['one', 'two']);
});
