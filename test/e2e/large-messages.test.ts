// Large messages: a pull returns at most MAX_PULL_BYTES of message data (always at least one
// message), so a backlog of big messages never makes one pull too large for Redis or JSON; what
// does not fit stays available, in order.

import t from 'tap';
import { MAX_PULL_BYTES } from '../../src/broker/pull.ts';
import { startBroker } from '../helpers/app.ts';
import { redisTargets } from '../helpers/redis.ts';

const SIZE = 4_000_000; // 3 of these reach the 10 MB budget
const big = (n: number) => Buffer.alloc(SIZE, 48 + n).toString('base64');

for (const target of redisTargets()) {
  for (const ordered of [false, true]) {
    t.test(`${target.name}${ordered ? ', ordered' : ''}: pulls stop at the byte budget`, async (t) => {
      t.ok(2 * SIZE < MAX_PULL_BYTES && 3 * SIZE >= MAX_PULL_BYTES, 'the sizes straddle the budget');
      const broker = await startBroker(t, { target, name: 'large' });
      const sub = '/v1/projects/p/subscriptions/large-sub';
      await broker.api('PUT', '/v1/projects/p/topics/large', {});
      await broker.api('PUT', sub, { topic: 'projects/p/topics/large', enableMessageOrdering: ordered });
      const ids: string[] = [];
      for (let n = 0; n < 4; n++) {
        const published = await broker.api('POST', '/v1/projects/p/topics/large:publish', {
          messages: [{ data: big(n), ...(ordered ? { orderingKey: 'k' } : {}) }],
        });
        t.equal(published.status, 200);
        ids.push(...published.body.messageIds);
      }
      const first = await broker.api('POST', `${sub}:pull`, { maxMessages: 10, returnImmediately: true });
      t.same(
        first.body.receivedMessages.map((m: any) => m.message.messageId),
        ids.slice(0, 3),
        'three fit the budget',
      );
      t.equal(first.body.receivedMessages[2].message.data, big(2), 'bodies arrive whole');
      if (ordered) {
        const busy = await broker.api('POST', `${sub}:pull`, { maxMessages: 10, returnImmediately: true });
        t.same(busy.body, {}, 'the rest of the key waits while its first messages are outstanding');
        await broker.api('POST', `${sub}:acknowledge`, {
          ackIds: first.body.receivedMessages.map((m: any) => m.ackId),
        });
      }
      const second = await broker.api('POST', `${sub}:pull`, { maxMessages: 10, returnImmediately: true });
      t.same(
        second.body.receivedMessages.map((m: any) => m.message.messageId),
        [ids[3]],
        'the fourth comes next',
      );
    });
  }
}
