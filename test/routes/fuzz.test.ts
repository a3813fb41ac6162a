// Randomized bad input against every route: whatever the body, the broker answers with a
// Pub/Sub error envelope or a normal response, never a 5xx, and keeps serving.

import t from 'tap';
import { startBroker } from '../helpers/app.ts';
import { seededRandom } from '../helpers/random.ts';

const SEED = Number(process.env.SEED ?? Date.now() % 100000);
const ROUNDS = 600;

t.test(`random bodies on every route (SEED=${SEED})`, async (t) => {
  const broker = await startBroker(t, { name: 'fuzz' });
  const rnd = seededRandom(SEED);
  await broker.api('PUT', '/v1/projects/p/topics/fuzz-topic', {});
  await broker.api('PUT', '/v1/projects/p/subscriptions/fuzz-sub', { topic: 'projects/p/topics/fuzz-topic' });
  await broker.api('PUT', '/v1/projects/p/subscriptions/fuzz-eod', {
    topic: 'projects/p/topics/fuzz-topic',
    enableExactlyOnceDelivery: true,
  });

  const FIELDS = [
    'messages',
    'data',
    'attributes',
    'orderingKey',
    'maxMessages',
    'returnImmediately',
    'ackIds',
    'ackDeadlineSeconds',
    'topic',
    'labels',
    'updateMask',
    'subscription',
    'enableMessageOrdering',
    'enableExactlyOnceDelivery',
    'messageRetentionDuration',
    'expirationPolicy',
    'ttl',
    'pushConfig',
    '__proto__',
    'constructor',
  ];
  const value = (depth: number): unknown => {
    switch (rnd.int(0, depth > 2 ? 5 : 8)) {
      case 0:
        return null;
      case 1:
        return rnd.chance(0.5);
      case 2:
        return rnd.pick([0, -1, 1, 1.5, 1e308, -1e308, 2 ** 53, 600, 601, 1000, 1001]);
      case 3:
        return rnd.pick([
          '',
          'x',
          'aGk=',
          '!!!',
          '600s',
          'goog',
          'projects/p/topics/fuzz-topic',
          '\u0000',
          'é'.repeat(300),
        ]);
      case 4:
        return 'y'.repeat(rnd.int(0, 3000));
      case 5:
        return rnd.pick([[], {}]);
      case 6:
        return Array.from({ length: rnd.int(0, 5) }, () => value(depth + 1));
      default: {
        const object: Record<string, unknown> = {};
        for (let i = rnd.int(0, 4); i > 0; i--) object[rnd.pick(FIELDS)] = value(depth + 1);
        return object;
      }
    }
  };
  const routes: [string, string][] = [
    ['PUT', '/v1/projects/p/topics/fuzz-new'],
    ['PATCH', '/v1/projects/p/topics/fuzz-topic'],
    ['POST', '/v1/projects/p/topics/fuzz-topic:publish'],
    ['PUT', '/v1/projects/p/subscriptions/fuzz-new-sub'],
    ['PATCH', '/v1/projects/p/subscriptions/fuzz-sub'],
    ['POST', '/v1/projects/p/subscriptions/fuzz-sub:pull'],
    ['POST', '/v1/projects/p/subscriptions/fuzz-sub:acknowledge'],
    ['POST', '/v1/projects/p/subscriptions/fuzz-eod:acknowledge'],
    ['POST', '/v1/projects/p/subscriptions/fuzz-eod:modifyAckDeadline'],
    ['GET', '/v1/projects/p/topics?pageSize=x&pageToken=%%%'],
  ];
  const problems: string[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const [method, url] = rnd.pick(routes);
    const raw = rnd.chance(0.15)
      ? rnd.pick(['{', '[1,', 'null', '"x"', '{"a":}', '\u0000', '{"messages":[{"data":"aGk="}]}x'])
      : JSON.stringify(value(0));
    const response = await broker.app.inject({
      method: method as 'GET',
      url,
      payload: raw,
      headers: { 'content-type': 'application/json' },
    });
    const body = response.body ? JSON.parse(response.body) : undefined;
    const envelopeOk =
      response.statusCode === 200 ||
      (body?.error?.code === response.statusCode &&
        typeof body.error.status === 'string' &&
        typeof body.error.message === 'string');
    if (response.statusCode >= 500 || !envelopeOk || body === undefined) {
      problems.push(`${method} ${url} ${raw.slice(0, 120)} -> ${response.statusCode} ${response.body.slice(0, 200)}`);
    }
  }
  t.same(problems.slice(0, 5), [], 'no 5xx, and every error is a Pub/Sub error envelope');
  t.equal((await broker.api('GET', '/healthz')).status, 200, 'still serving');
  t.equal((await broker.api('GET', '/v1/projects/p/topics/fuzz-topic')).status, 200, 'the topic is intact');
});
