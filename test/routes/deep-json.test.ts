// Request bodies nested deeper than 100 levels of JSON arrays or objects (the body itself is
// level 1) answer 400 INVALID_ARGUMENT and change nothing, wherever the nesting sits: inside a
// message field, in a field the broker refuses as unimplemented, in an unknown field, in a small
// body or a large one (parsed with its data strings lifted out, src/json-body.ts). 100 levels are
// still walked: they get the error the body would get anyway. A walk by recursion without a
// bound overflowed the stack at a few thousand levels and answered 500 INTERNAL.

import t from 'tap';
import { LIFT_ABOVE_BYTES } from '../../src/json-body.ts';
import { redisTargets } from '../helpers/redis.ts';
import {
  b64,
  checkMessageIds,
  invalid,
  invalidValue,
  notFound,
  openClient,
  subscriptionBody,
  topicBody,
  unknownField,
} from './_support.ts';

const P = 'deep-project';
const T = `/v1/projects/${P}/topics`;
const S = `/v1/projects/${P}/subscriptions`;
const TOPIC = `projects/${P}/topics/deep-topic`;
const TOO_DEEP = invalid('Invalid JSON payload received. The JSON nesting exceeds 100 levels.');

/** JSON text of `levels` arrays nested in each other around `inner`. */
const arrays = (levels: number, inner = '1') => `${'['.repeat(levels)}${inner}${']'.repeat(levels)}`;
/** JSON text of `levels` objects nested in each other, each holding the next at key "a". */
const objects = (levels: number, inner = '1') => `${'{"a":'.repeat(levels)}${inner}${'}'.repeat(levels)}`;

t.test('bodies nested too deep', async (t) => {
  const { api, raw } = await openClient(t, redisTargets()[0], 'deep-json');
  const post = (url: string, payload: string) => raw({ method: 'POST', url, payload });
  t.strictSame(await api('PUT', `${T}/deep-topic`, {}), { status: 200, body: topicBody(P, 'deep-topic') }, 'topic');
  t.strictSame(
    await api('PUT', `${S}/deep-sub`, { topic: TOPIC, labels: { v: '1' } }),
    { status: 200, body: subscriptionBody(P, 'deep-sub', TOPIC, { labels: { v: '1' } }) },
    'subscription',
  );
  const nothingToPull = async (what: string) =>
    t.strictSame(
      await api('POST', `${S}/deep-sub:pull`, { maxMessages: 10, returnImmediately: true }),
      { status: 200, body: {} },
      `${what}: nothing to pull`,
    );

  await t.test('publish', async (t) => {
    const cases: [string, string, unknown][] = [
      ['5,000 arrays as a message data', `{"messages":[{"data":${arrays(5000)}}]}`, TOO_DEEP],
      ['5,000 objects as a message data', `{"messages":[{"data":${objects(5000)}}]}`, TOO_DEEP],
      ['5,000 arrays in an unknown field', `{"messages":[{"data":"eA=="}],"x":${arrays(5000)}}`, TOO_DEEP],
      ['5,000 objects in an unknown field', `{"messages":[{"data":"eA=="}],"x":${objects(5000)}}`, TOO_DEEP],
      ['5,000 objects in an unknown message field', `{"messages":[{"data":"eA==","x":${objects(5000)}}]}`, TOO_DEEP],
      ['100,000 arrays as the messages', `{"messages":${arrays(100_000)}}`, TOO_DEEP],
      // The values of attributes are checked as strings, never walked.
      [
        '5,000 objects as an attribute value',
        `{"messages":[{"attributes":{"k":${objects(5000)}}}]}`,
        invalidValue('messages.0.attributes.k', 'Invalid input: expected string, received object'),
      ],
      // The bound is exact: 100 levels are walked (the body, then 99 arrays), 101 are not.
      ['100 levels in an unknown field', `{"messages":[{"data":"eA=="}],"x":${arrays(99)}}`, unknownField('x')],
      ['101 levels in an unknown field', `{"messages":[{"data":"eA=="}],"x":${arrays(100)}}`, TOO_DEEP],
      [
        '100 levels in a message field',
        `{"messages":[{"data":${objects(97, '"eA=="')}}]}`,
        invalidValue('messages.0.data', 'Invalid input: expected string, received object'),
      ],
      ['101 levels in a message field', `{"messages":[{"data":${objects(98, '"eA=="')}}]}`, TOO_DEEP],
    ];
    for (const [what, payload, expected] of cases) {
      t.strictSame(await post(`${T}/deep-topic:publish`, payload), { status: 400, body: expected }, what);
    }
    // A large body takes the lifted path first; the nesting is refused all the same.
    const data = b64('x'.repeat(1000));
    const many = Array.from({ length: 200 }, () => `{"data":"${data}"}`).join(',');
    const large = `{"messages":[${many}],"x":${arrays(5000)}}`;
    t.ok(large.length > LIFT_ABOVE_BYTES, 'the large body is lifted');
    t.strictSame(await post(`${T}/deep-topic:publish`, large), { status: 400, body: TOO_DEEP }, 'a large body');
    // A large body is measured before it is parsed (JSON.parse takes seconds over millions of
    // levels): one that is too deep and, further on, not JSON at all is refused for its depth.
    const deepThenBroken = `{"messages":${'['.repeat(2 * LIFT_ABOVE_BYTES)}x`;
    t.strictSame(
      await post(`${T}/deep-topic:publish`, deepThenBroken),
      { status: 400, body: TOO_DEEP },
      'a large body too deep is not parsed',
    );
    t.strictSame(
      await post(`${T}/deep-topic:publish`, `{"messages":[${many}],"x":${arrays(5000, 'x')}}`),
      { status: 400, body: TOO_DEEP },
      'a large lifted body too deep is not parsed',
    );
    t.strictSame(
      await post(
        `${S}/deep-sub:acknowledge`,
        `{"ackIds":["${'a'.repeat(LIFT_ABOVE_BYTES)}"],"x":"[[[[${'['.repeat(200)}"}`,
      ),
      { status: 400, body: unknownField('x') },
      'brackets inside strings do not count',
    );
    await nothingToPull('after the refused publishes');
    checkMessageIds(await api('POST', `${T}/deep-topic:publish`, { messages: [{ data: 'eA==' }] }), 1);
    const pulled = await api('POST', `${S}/deep-sub:pull`, { maxMessages: 10, returnImmediately: true });
    t.equal(pulled.body.receivedMessages?.length, 1, 'a plain publish still goes through');
    await api('POST', `${S}/deep-sub:acknowledge`, { ackIds: [pulled.body.receivedMessages[0].ackId] });
  });

  await t.test('create', async (t) => {
    const cases: [string, string, string, unknown][] = [
      ['topic, unknown field', `${T}/deep-new`, `{"x":${arrays(5000)}}`, TOO_DEEP],
      ['topic, unimplemented field', `${T}/deep-new`, `{"messageTransforms":${objects(5000)}}`, TOO_DEEP],
      [
        'subscription, unimplemented field',
        `${S}/deep-new`,
        `{"topic":"${TOPIC}","deadLetterPolicy":${arrays(5000)}}`,
        TOO_DEEP,
      ],
      ['subscription, pushConfig', `${S}/deep-new`, `{"topic":"${TOPIC}","pushConfig":${objects(5000)}}`, TOO_DEEP],
      [
        'subscription, snake_case unknown field',
        `${S}/deep-new`,
        `{"topic":"${TOPIC}","no_such_field":${arrays(5000)}}`,
        TOO_DEEP,
      ],
      [
        'subscription, 100 levels in pushConfig',
        `${S}/deep-new`,
        `{"topic":"${TOPIC}","pushConfig":${objects(99)}}`,
        unknownField('a', 'pushConfig'),
      ],
      [
        'subscription, 101 levels in pushConfig',
        `${S}/deep-new`,
        `{"topic":"${TOPIC}","pushConfig":${objects(100)}}`,
        TOO_DEEP,
      ],
    ];
    for (const [what, url, payload, expected] of cases) {
      const reply = await raw({ method: 'PUT', url, payload });
      t.strictSame(reply, { status: (expected as any).error.code, body: expected }, what);
    }
    t.strictSame(await api('GET', `${T}/deep-new`), { status: 404, body: notFound('deep-new') }, 'no topic created');
    t.strictSame(
      await api('GET', `${S}/deep-new`),
      { status: 404, body: notFound('deep-new') },
      'no subscription created',
    );
  });

  await t.test('patch', async (t) => {
    const topicPatch = `{"topic":{"labels":{"v":"2"},"schemaSettings":${arrays(5000)}},"updateMask":"labels"}`;
    t.strictSame(
      await raw({ method: 'PATCH', url: `${T}/deep-topic`, payload: topicPatch }),
      { status: 400, body: TOO_DEEP },
      'topic',
    );
    t.strictSame(await api('GET', `${T}/deep-topic`), { status: 200, body: topicBody(P, 'deep-topic') }, 'unchanged');
    const subscriptionPatches = [
      `{"subscription":{"labels":{"v":"2"},"retryPolicy":${objects(5000)}},"updateMask":"labels"}`,
      `{"subscription":{"labels":{"v":"2"}},"updateMask":"labels","x":${arrays(5000)}}`,
    ];
    for (const payload of subscriptionPatches) {
      t.strictSame(
        await raw({ method: 'PATCH', url: `${S}/deep-sub`, payload }),
        { status: 400, body: TOO_DEEP },
        `subscription ${payload.slice(0, 60)}`,
      );
    }
    t.strictSame(
      await api('GET', `${S}/deep-sub`),
      { status: 200, body: subscriptionBody(P, 'deep-sub', TOPIC, { labels: { v: '1' } }) },
      'subscription unchanged',
    );
  });

  await t.test('pull, acknowledge, modifyAckDeadline', async (t) => {
    checkMessageIds(await api('POST', `${T}/deep-topic:publish`, { messages: [{ data: 'eA==' }] }), 1);
    const leased = await api('POST', `${S}/deep-sub:pull`, { maxMessages: 10, returnImmediately: true });
    const ackId = leased.body.receivedMessages[0].ackId;
    const cases: [string, string][] = [
      ['pull', `{"maxMessages":10,"returnImmediately":true,"x":${arrays(5000)}}`],
      ['acknowledge', `{"ackIds":["${ackId}"],"x":${objects(5000)}}`],
      ['modifyAckDeadline', `{"ackIds":["${ackId}"],"ackDeadlineSeconds":0,"x":${arrays(5000)}}`],
    ];
    for (const [verb, payload] of cases) {
      t.strictSame(await post(`${S}/deep-sub:${verb}`, payload), { status: 400, body: TOO_DEEP }, verb);
    }
    // Neither acked nor nacked: still leased, so another pull gets nothing.
    await nothingToPull('after the refused requests');
    t.strictSame(
      await api('POST', `${S}/deep-sub:modifyAckDeadline`, { ackIds: [ackId], ackDeadlineSeconds: 0 }),
      { status: 200, body: {} },
      'nack',
    );
    const again = await api('POST', `${S}/deep-sub:pull`, { maxMessages: 10, returnImmediately: true });
    t.equal(again.body.receivedMessages?.length, 1, 'the message was not acknowledged by the refused request');
  });
});
