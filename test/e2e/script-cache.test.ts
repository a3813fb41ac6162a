// Publishing sends its script as EVALSHA written by the broker itself (Scripts.runEncoded), or,
// for large publishes, right after the staged bodies (Scripts.runStaged). When
// Redis's script cache is emptied (a restart, SCRIPT FLUSH), the next publish loads the scripts
// again and still stores each message exactly once; the staged bodies of the transaction whose
// script was missing are taken over by the retry, so no staging key is left behind.

import t from 'tap';
import { b64, startBroker, unb64 } from '../helpers/app.ts';
import { masterNodes, redisTargets, scanKeys } from '../helpers/redis.ts';
import { topicData } from '../helpers/topic.ts';

for (const target of redisTargets()) {
  for (const staged of [false, true]) {
    t.test(
      `${target.name}, ${staged ? 'staged bodies' : 'bodies in the call'}: a publish after SCRIPT FLUSH is stored once`,
      async (t) => {
        const broker = await startBroker(t, {
          target,
          name: 'script-cache',
          stageBodiesFromBytes: staged ? 0 : Infinity,
        });
        await broker.api('PUT', '/v1/projects/p/topics/cache', {});
        await broker.api('PUT', '/v1/projects/p/subscriptions/cache', { topic: 'projects/p/topics/cache' });
        const publish = async (...texts: string[]): Promise<string[]> => {
          const { status, body } = await broker.api('POST', '/v1/projects/p/topics/cache:publish', {
            messages: texts.map((text) => ({ data: b64(text) })),
          });
          t.equal(status, 200, `${texts.join(', ')}: accepted`);
          return body.messageIds;
        };
        const [before] = await publish('before');
        const nodes = masterNodes(broker.redis);
        await Promise.all(nodes.map((node) => node.script('FLUSH')));
        const after = await publish('after-1', 'after-2');
        t.ok(
          Number(after[0]) > Number(before) && Number(after[1]) === Number(after[0]) + 1,
          `new IDs after the flush: ${after}`,
        );
        const { body } = await broker.api('POST', '/v1/projects/p/subscriptions/cache:pull', {
          maxMessages: 10,
          returnImmediately: true,
        });
        t.same(
          body.receivedMessages.map((m: any) => unb64(m.message.data)),
          ['before', 'after-1', 'after-2'],
          'each message delivered once',
        );
        t.same(
          body.receivedMessages.map((m: any) => m.message.messageId),
          [before, ...after],
          'under the IDs the publishes answered',
        );
        const { data } = await topicData(broker, 'cache');
        t.same(await scanKeys(broker.redis, data.staging('*')), [], 'no staging key is left');
      },
    );
  }
}
