// Publishing sends its script as EVALSHA written by the broker itself (Scripts.runEncoded). When
// Redis's script cache is emptied (a restart, SCRIPT FLUSH), the next publish loads the scripts
// again and still stores each message exactly once.

import t from 'tap';
import { b64, startBroker, unb64 } from '../helpers/app.ts';
import { masterNodes, redisTargets } from '../helpers/redis.ts';

for (const target of redisTargets()) {
  t.test(`${target.name}: a publish after SCRIPT FLUSH is stored once`, async (t) => {
    const broker = await startBroker(t, { target, name: 'script-cache' });
    await broker.api('PUT', '/v1/projects/p/topics/cache', {});
    await broker.api('PUT', '/v1/projects/p/subscriptions/cache', { topic: 'projects/p/topics/cache' });
    const publish = (...texts: string[]) =>
      broker.api('POST', '/v1/projects/p/topics/cache:publish', { messages: texts.map((text) => ({ data: b64(text) })) });
    t.same((await publish('before')).body, { messageIds: ['1'] });
    const nodes = masterNodes(broker.redis);
    await Promise.all(nodes.map((node) => node.script('FLUSH')));
    t.same((await publish('after-1', 'after-2')).body, { messageIds: ['2', '3'] }, 'accepted after the flush');
    const { body } = await broker.api('POST', '/v1/projects/p/subscriptions/cache:pull', { maxMessages: 10, returnImmediately: true });
    t.same(body.receivedMessages.map((m: any) => unb64(m.message.data)), ['before', 'after-1', 'after-2'], 'each message delivered once');
  });
}
