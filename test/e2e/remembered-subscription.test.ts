// A broker on a single region remembers subscription records for its unary pulls
// (returnImmediately), acknowledgements and deadline changes (DeliveryService withRecord), and
// their scripts check the remembered record's version. Two brokers share one Redis here; the
// second changes the subscription behind the first one's back, and the first, remembering for
// a minute, must still answer every call as the current record says. On standalone and cluster:
//   - calls within the time read no record after the first;
//   - a push configuration set through the other broker refuses the next pull, and removed
//     again, lets it through;
//   - exactly-once delivery turned on through the other broker makes the next acknowledgement of
//     an acknowledged ack ID fail, as it must on an exactly-once subscription;
//   - deleted and created again, the subscription's new messages are pulled, its new ack IDs
//     acknowledged, and the old incarnation's refused, through the first broker;
//   - detached, pulls and acknowledgements through the first broker fail with FAILED_PRECONDITION.
import type { FastifyInstance } from 'fastify';
import t, { type Test } from 'tap';
import { buildApp } from '../../src/app.ts';
import { b64, jsonApi, type JsonApi, unb64 } from '../helpers/app.ts';
import { redisTargets, type RedisTarget, uniquePrefix } from '../helpers/redis.ts';

const P = '/v1/projects/p';
const SUB = `${P}/subscriptions/orders-sub`;

/**
 * Two brokers on one Redis and one key prefix; the first remembers subscription records for a
 * minute, and `recordReads()` counts the records it reads for delivery calls.
 */
async function twoBrokers(t: Test, target: RedisTarget) {
  const prefix = uniquePrefix('remembered-subscription');
  const redis = target.connect();
  const apps: FastifyInstance[] = [];
  for (const rememberSubscriptionMs of [60_000, 1000]) {
    apps.push(await buildApp({ redis, keyPrefix: prefix, pullWaitMs: 100, rememberSubscriptionMs }));
  }
  t.teardown(async () => {
    await Promise.all(apps.map((app) => app.close()));
    redis.disconnect();
  });
  const subscriptions = apps[0].broker.subscriptions;
  const readForDelivery = subscriptions.readForDelivery.bind(subscriptions);
  let reads = 0;
  subscriptions.readForDelivery = (...args) => {
    reads++;
    return readForDelivery(...args);
  };
  const [first, second] = apps.map((app) => jsonApi(app));
  t.equal((await second('PUT', `${P}/topics/orders`, {})).status, 200);
  t.equal((await second('PUT', SUB, { topic: 'projects/p/topics/orders', ackDeadlineSeconds: 60 })).status, 200);
  return { first, second, recordReads: () => reads };
}

async function publish(api: JsonApi, ...texts: string[]): Promise<void> {
  const { status } = await api('POST', `${P}/topics/orders:publish`, {
    messages: texts.map((text) => ({ data: b64(text) })),
  });
  if (status !== 200) throw new Error(`publish answered ${status}`);
}

const pull = (api: JsonApi) => api('POST', `${SUB}:pull`, { maxMessages: 10, returnImmediately: true });

async function pulled(api: JsonApi): Promise<{ texts: string[]; ackIds: string[] }> {
  const { status, body } = await pull(api);
  if (status !== 200) throw new Error(`pull answered ${status}: ${JSON.stringify(body)}`);
  const received: any[] = body.receivedMessages ?? [];
  return { texts: received.map((m) => unb64(m.message.data)), ackIds: received.map((m) => m.ackId) };
}

const acknowledge = (api: JsonApi, ackIds: string[]) => api('POST', `${SUB}:acknowledge`, { ackIds });
const patch = (api: JsonApi, subscription: object, updateMask: string) =>
  api('PATCH', SUB, { subscription, updateMask });

for (const target of redisTargets()) {
  t.test(`${target.name}: calls from a remembered record read none`, async (t) => {
    const { first, second, recordReads } = await twoBrokers(t, target);
    await publish(second, 'one', 'two');
    const { texts, ackIds } = await pulled(first);
    t.same(texts, ['one', 'two']);
    t.equal(recordReads(), 1, 'the first pull read the record');
    t.equal((await first('POST', `${SUB}:modifyAckDeadline`, { ackIds, ackDeadlineSeconds: 30 })).status, 200);
    t.equal((await acknowledge(first, ackIds)).status, 200);
    t.same((await pulled(first)).texts, [], 'acknowledged');
    t.equal(recordReads(), 1, 'the deadline change, the acknowledgement and the next pull read none');
  });

  t.test(`${target.name}: a push configuration set and removed through the other broker`, async (t) => {
    const { first, second, recordReads } = await twoBrokers(t, target);
    await publish(second, 'one');
    t.same((await pulled(first)).texts, ['one']);
    const pushConfig = { pushEndpoint: 'https://example.com/push' };
    t.equal((await patch(second, { pushConfig }, 'pushConfig')).status, 200);
    const refused = await pull(first);
    t.equal(refused.status, 400, 'refused');
    t.equal(refused.body.error.status, 'FAILED_PRECONDITION');
    t.equal(recordReads(), 2, 'the script found newer settings, and the record was read again');
    t.equal((await patch(second, { pushConfig: {} }, 'pushConfig')).status, 200);
    // Nothing is published meanwhile: push delivery may not have stopped yet.
    t.equal((await pull(first)).status, 200, 'pulled again');
  });

  t.test(`${target.name}: exactly-once delivery turned on through the other broker`, async (t) => {
    const { first, second } = await twoBrokers(t, target);
    await publish(second, 'one');
    const { ackIds } = await pulled(first);
    t.equal((await acknowledge(first, ackIds)).status, 200);
    t.equal((await acknowledge(first, ackIds)).status, 200, 'acknowledged again: ignored without exactly-once');
    t.equal((await patch(second, { enableExactlyOnceDelivery: true }, 'enableExactlyOnceDelivery')).status, 200);
    const again = await acknowledge(first, ackIds);
    t.equal(again.status, 400, 'with exactly-once, an acknowledged ack ID fails');
    t.equal(again.body.error.status, 'INVALID_ARGUMENT');
    t.match(JSON.stringify(again.body.error.details), /PERMANENT_FAILURE_INVALID_ACK_ID/);
  });

  t.test(`${target.name}: deleted and created again through the other broker`, async (t) => {
    const { first, second } = await twoBrokers(t, target);
    const recreate = async () => {
      t.equal((await second('DELETE', SUB)).status, 200);
      t.equal((await second('PUT', SUB, { topic: 'projects/p/topics/orders', ackDeadlineSeconds: 60 })).status, 200);
    };
    await publish(second, 'old');
    const old = await pulled(first);
    t.same(old.texts, ['old']);
    await recreate();
    await publish(second, 'new');
    const renewed = await pulled(first);
    t.same(renewed.texts, ['new'], 'pulled from the new subscription');

    await recreate();
    const stale = await acknowledge(first, renewed.ackIds);
    t.equal(stale.status, 400, "the old incarnation's ack IDs are not the new one's");
    t.equal(stale.body.error.status, 'INVALID_ARGUMENT');

    await recreate();
    await publish(second, 'newer one', 'newer two');
    const newer = await pulled(second);
    t.same(newer.texts, ['newer one', 'newer two']);
    t.equal((await acknowledge(first, newer.ackIds)).status, 200, 'the new ack IDs are acknowledged');
    const nack = { ackIds: newer.ackIds, ackDeadlineSeconds: 0 };
    t.equal((await second('POST', `${SUB}:modifyAckDeadline`, nack)).status, 200);
    t.same((await pulled(second)).texts, [], 'so a nack of them gives back nothing');
  });

  t.test(`${target.name}: detached through the other broker`, async (t) => {
    const { first, second } = await twoBrokers(t, target);
    await publish(second, 'one');
    const { ackIds } = await pulled(first);
    t.equal((await second('POST', `${SUB}:detach`, {})).status, 200);
    for (const [what, answer] of [
      ['pull', await pull(first)],
      ['acknowledge', await acknowledge(first, ackIds)],
    ] as const) {
      t.equal(answer.status, 400, `${what} refused`);
      t.equal(answer.body.error.status, 'FAILED_PRECONDITION', what);
    }
  });
}
