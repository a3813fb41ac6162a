// Publish request validation and limits (README.md, Semantics, "Publish";
// https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.topics/publish and the resource
// limits of https://cloud.google.com/pubsub/quotas): every rejected request answers the whole
// expected error body and stores nothing; the exactly-at-limit cases are accepted and delivered
// intact. Runs against standalone Redis and Redis Cluster.

import t from 'tap';
import { createHash } from 'node:crypto';
import { redisTargets } from '../helpers/redis.ts';
import {
  b64,
  checkMessageIds,
  failedPrecondition,
  invalid,
  invalidValue,
  MIXED_ORDERING_KEYS,
  normalisePull,
  notFound,
  openClient,
  received,
  subscriptionBody,
  unknownField,
  type Client,
} from './_support.ts';

const P = 'pv-project';
const T = `/v1/projects/${P}/topics`;
const S = `/v1/projects/${P}/subscriptions`;
const EMPTY_MESSAGE =
  'One or more messages in the publish request is empty. Each message must contain either non-empty data, or at least one attribute.';

const repeat = (char: string, n: number) => char.repeat(n);
const attrs = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`a${i}`, 'v']));
const many = (n: number, make: (i: number) => Record<string, unknown>) => Array.from({ length: n }, (_, i) => make(i));

async function setup(api: Client['api'], id: string): Promise<{ topic: string; sub: string }> {
  const topic = `${T}/${id}`;
  const sub = `${S}/${id}-sub`;
  await api('PUT', topic, {});
  const created = await api('PUT', sub, { topic: `projects/${P}/topics/${id}` });
  if (created.status !== 200) throw new Error(`fixture failed: ${JSON.stringify(created)}`);
  return { topic, sub };
}

async function pullAll(api: Client['api'], sub: string, max = 1000) {
  const reply = await api('POST', `${sub}:pull`, { maxMessages: max, returnImmediately: true });
  return { status: reply.status, ...normalisePull(reply.body) };
}

for (const target of redisTargets()) {
  t.test(`publish validation (${target.name})`, async (t) => {
    const { api, raw } = await openClient(t, target, `publish-${target.name}`);

    await t.test('rejected requests: whole error body, nothing stored', async (t) => {
      const { topic, sub } = await setup(api, 'rejects');
      const url = `${topic}:publish`;
      const msg0 = (text: string) => invalid(`Message 0: ${text}`);
      const cases: [string, unknown, unknown][] = [
        ['0 messages', { messages: [] }, invalid('The publish request must contain at least one message.')],
        ['no messages field', {}, invalidValue('messages', 'messages must be a list')],
        ['messages not a list', { messages: { data: b64('x') } }, invalidValue('messages', 'messages must be a list')],
        [
          'a message that is null',
          { messages: [null] },
          invalidValue('messages.0', 'Invalid input: expected object, received null'),
        ],
        [
          '1001 messages',
          { messages: many(1001, (i) => ({ data: b64(`m${i}`) })) },
          invalid('The publish request has 1001 messages; at most 1000 are allowed.'),
        ],
        ['message {}', { messages: [{}] }, invalid(EMPTY_MESSAGE)],
        ['empty data', { messages: [{ data: '' }] }, invalid(EMPTY_MESSAGE)],
        ['empty attributes', { messages: [{ attributes: {} }] }, invalid(EMPTY_MESSAGE)],
        ['empty data and attributes', { messages: [{ data: '', attributes: {} }] }, invalid(EMPTY_MESSAGE)],
        [
          'one empty message among good ones',
          { messages: [{ data: b64('ok') }, { orderingKey: '' }] },
          invalid(EMPTY_MESSAGE),
        ],
        ['invalid base64', { messages: [{ data: 'not base64!' }] }, msg0('"data" is not valid base64.')],
        ['base64 with a space', { messages: [{ data: 'YW Jj' }] }, msg0('"data" is not valid base64.')],
        ['base64 with broken padding', { messages: [{ data: 'YQ=' }] }, msg0('"data" is not valid base64.')],
        [
          'base64 of impossible length',
          { messages: [{ data: b64('ok') }, { data: 'abcde' }] },
          invalid('Message 1: "data" is not valid base64.'),
        ],
        [
          'data not a string',
          { messages: [{ data: 12 }] },
          invalidValue('messages.0.data', 'Invalid input: expected string, received number'),
        ],
        [
          '101 attributes',
          { messages: [{ attributes: attrs(101) }] },
          invalid('Message 0 has 101 attributes; at most 100 are allowed.'),
        ],
        [
          'attribute key of 257 bytes',
          { messages: [{ attributes: { [repeat('k', 257)]: 'v' } }] },
          msg0('attribute keys must be 1 to 256 bytes long.'),
        ],
        [
          'attribute key of 258 bytes in 129 characters',
          { messages: [{ attributes: { [repeat('é', 129)]: 'v' } }] },
          msg0('attribute keys must be 1 to 256 bytes long.'),
        ],
        [
          'empty attribute key',
          { messages: [{ attributes: { '': 'v' } }] },
          msg0('attribute keys must be 1 to 256 bytes long.'),
        ],
        [
          'attribute value of 1025 bytes',
          { messages: [{ attributes: { k: repeat('v', 1025) } }] },
          msg0('the value of attribute "k" exceeds 1024 bytes.'),
        ],
        [
          'attribute value of 1026 bytes in 513 characters',
          { messages: [{ attributes: { k: repeat('é', 513) } }] },
          msg0('the value of attribute "k" exceeds 1024 bytes.'),
        ],
        // Strings must be UTF-8 text: a lone surrogate cannot be encoded (JSON escapes it).
        [
          'attribute value with a lone surrogate',
          { messages: [{ data: b64('x'), attributes: { k: 'x\ud800' } }] },
          msg0('attribute "k" is not valid UTF-8 text (it holds a lone surrogate).'),
        ],
        [
          'attribute key with a lone surrogate',
          { messages: [{ data: b64('x'), attributes: { '\udc00k': 'v' } }] },
          msg0('attribute "\udc00k" is not valid UTF-8 text (it holds a lone surrogate).'),
        ],
        [
          'ordering key with a lone surrogate',
          { messages: [{ data: b64('x'), orderingKey: '\ud83d' }] },
          msg0('the ordering key is not valid UTF-8 text (it holds a lone surrogate).'),
        ],
        [
          'attribute key starting with goog',
          { messages: [{ attributes: { googKey: 'v' } }] },
          msg0('attribute key "googKey" uses the reserved prefix "goog".'),
        ],
        [
          'attribute key goog',
          { messages: [{ data: b64('x'), attributes: { goog: 'v' } }] },
          msg0('attribute key "goog" uses the reserved prefix "goog".'),
        ],
        // The prefix is reserved in any case.
        ...['GOOGfoo', 'Goog-x', 'gOoG', 'GOOGCLIENT_TRACEPARENT'].map((key): [string, unknown, unknown] => [
          `attribute key ${key}`,
          { messages: [{ data: b64('x'), attributes: { [key]: 'v' } }] },
          msg0(`attribute key "${key}" uses the reserved prefix "goog".`),
        ]),
        // Only the tracing attribute of the official clients is let through, not its neighbours.
        ...['googclient_tracestate', 'googclient_traceparentx', 'googclient_'].map(
          (key): [string, unknown, unknown] => [
            `attribute key ${key}`,
            { messages: [{ attributes: { googclient_traceparent: 'ok', [key]: 'v' } }] },
            msg0(`attribute key "${key}" uses the reserved prefix "goog".`),
          ],
        ),
        [
          'attribute value not a string',
          { messages: [{ attributes: { n: 1 } }] },
          invalidValue('messages.0.attributes.n', 'Invalid input: expected string, received number'),
        ],
        [
          'ordering key of 1025 bytes',
          { messages: [{ data: b64('x'), orderingKey: repeat('o', 1025) }] },
          msg0('the ordering key exceeds 1024 bytes.'),
        ],
        [
          'two different ordering keys',
          {
            messages: [
              { data: b64('a'), orderingKey: 'k1' },
              { data: b64('b'), orderingKey: 'k2' },
            ],
          },
          failedPrecondition(MIXED_ORDERING_KEYS),
        ],
        [
          'keyed then unkeyed',
          { messages: [{ data: b64('a'), orderingKey: 'k1' }, { data: b64('b') }] },
          failedPrecondition(MIXED_ORDERING_KEYS),
        ],
        [
          'unkeyed then keyed',
          { messages: [{ data: b64('a') }, { data: b64('b'), orderingKey: 'k1' }] },
          failedPrecondition(MIXED_ORDERING_KEYS),
        ],
        ['unknown message field', { messages: [{ data: b64('a'), bogus: 1 }] }, unknownField('bogus', 'messages.0')],
        ['unknown request field', { messages: [{ data: b64('a') }], topic: 'x' }, unknownField('topic')],
        [
          'request over 10 MB (one message of 10,000,001 bytes)',
          { messages: [{ data: Buffer.alloc(10_000_001, 7).toString('base64') }] },
          invalid('The publish request is 10000001 bytes; the limit is 10000000 bytes.'),
        ],
        [
          'request over 10 MB (two messages and an attribute)',
          {
            messages: [
              { data: Buffer.alloc(5_000_000, 1).toString('base64') },
              { data: Buffer.alloc(5_000_000, 2).toString('base64'), attributes: { k: 'v' } },
            ],
          },
          invalid('The publish request is 10000002 bytes; the limit is 10000000 bytes.'),
        ],
      ];
      for (const [why, body, expected] of cases) {
        const reply = await api('POST', url, body);
        t.strictSame(reply, { status: (expected as { error: { code: number } }).error.code, body: expected }, why);
      }
      const huge = `{"messages":[{"data":"${'A'.repeat(17 * 1024 * 1024)}"}]}`;
      t.strictSame(
        await raw({ method: 'POST', url, payload: huge, headers: { 'content-type': 'application/json' } }),
        { status: 400, body: invalid('Request payload size exceeds the limit.') },
        'body over the 16 MiB transport limit',
      );
      t.strictSame(
        await api('POST', `${sub}:pull`, { maxMessages: 1000, returnImmediately: true }),
        { status: 200, body: {} },
        'no rejected request stored a message',
      );
      t.strictSame(
        await api('POST', `${T}/absent:publish`, { messages: [{ data: b64('x') }] }),
        { status: 404, body: notFound('absent') },
        'unknown topic -> 404',
      );
    });

    await t.test('at the limits: accepted and delivered intact', async (t) => {
      const { topic, sub } = await setup(api, 'limits');
      const url = `${topic}:publish`;
      const cases: [string, Record<string, unknown>[], Record<string, unknown>[]][] = [
        ['100 attributes', [{ attributes: attrs(100) }], [{ attributes: attrs(100) }]],
        [
          'attribute key of 256 bytes',
          [{ attributes: { [repeat('k', 256)]: 'v' } }],
          [{ attributes: { [repeat('k', 256)]: 'v' } }],
        ],
        [
          'attribute key of 256 bytes in 128 characters',
          [{ attributes: { [repeat('é', 128)]: 'v' } }],
          [{ attributes: { [repeat('é', 128)]: 'v' } }],
        ],
        [
          'attribute value of 1024 bytes',
          [{ attributes: { k: repeat('v', 1024) } }],
          [{ attributes: { k: repeat('v', 1024) } }],
        ],
        [
          'attribute value of 1024 bytes in 512 characters',
          [{ attributes: { k: repeat('é', 512) } }],
          [{ attributes: { k: repeat('é', 512) } }],
        ],
        ['empty attribute value', [{ attributes: { k: '' } }], [{ attributes: { k: '' } }]],
        [
          'attribute key containing goog later',
          [{ attributes: { xgoog: 'v', xGOOG: 'w', gog: 'x' } }],
          [{ attributes: { xgoog: 'v', xGOOG: 'w', gog: 'x' } }],
        ],
        [
          // What the official clients' OpenTelemetry tracing adds to every message it publishes.
          'the tracing attribute googclient_traceparent',
          [
            {
              data: b64('traced'),
              attributes: { googclient_traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', k: 'v' },
            },
            { attributes: { googclient_traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00' } },
          ],
          [
            {
              data: b64('traced'),
              attributes: { googclient_traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', k: 'v' },
            },
            { attributes: { googclient_traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00' } },
          ],
        ],
        [
          'ordering key of 1024 bytes',
          [{ data: b64('o'), orderingKey: repeat('o', 1024) }],
          [{ data: b64('o'), orderingKey: repeat('o', 1024) }],
        ],
        [
          'the same ordering key on every message',
          [
            { data: b64('1'), orderingKey: 'k' },
            { attributes: { a: 'b' }, orderingKey: 'k' },
          ],
          [
            { data: b64('1'), orderingKey: 'k' },
            { attributes: { a: 'b' }, orderingKey: 'k' },
          ],
        ],
        [
          'empty ordering key equals none',
          [{ data: b64('e1'), orderingKey: '' }, { data: b64('e2') }],
          [{ data: b64('e1') }, { data: b64('e2') }],
        ],
        ['attributes only, no data', [{ attributes: { only: 'attrs' } }], [{ attributes: { only: 'attrs' } }]],
        [
          'binary data',
          [{ data: Buffer.from([0, 255, 1, 254, 10, 13]).toString('base64') }],
          [{ data: Buffer.from([0, 255, 1, 254, 10, 13]).toString('base64') }],
        ],
        ['URL-safe base64 without padding', [{ data: '-_8' }], [{ data: '+/8=' }]],
        ['standard base64 without padding (no +/)', [{ data: 'YWJjZA' }], [{ data: b64('abcd') }]],
        [
          'publisher-set messageId and publishTime are replaced',
          [{ data: b64('mine'), messageId: 'x-1', publishTime: '2000-01-01T00:00:00Z' }],
          [{ data: b64('mine') }],
        ],
      ];
      for (const [why, messages, expected] of cases) {
        const ids = checkMessageIds(await api('POST', url, { messages }), messages.length);
        const pulled = await pullAll(api, sub);
        t.strictSame(
          { status: pulled.status, body: pulled.body },
          { status: 200, body: { receivedMessages: expected.map(received) } },
          why,
        );
        t.strictSame(pulled.messageIds, ids, `${why}: IDs as published`);
        if (pulled.ackIds.length) await api('POST', `${sub}:acknowledge`, { ackIds: pulled.ackIds });
      }
    });

    await t.test('proto3 JSON bytes: URL-safe with padding and standard without padding', async (t) => {
      // "Either standard or URL-safe base64 encoding with/without paddings are accepted."
      // (protobuf JSON mapping, bytes). Official clients in some languages send these forms.
      const { topic, sub } = await setup(api, 'b64');
      for (const [why, data, expected] of [
        ['URL-safe with padding', '-_8=', '+/8='],
        ['URL-safe with padding (two =)', '-w==', '+w=='],
        ['standard with + and / without padding', '+/8', '+/8='],
      ]) {
        const reply = await api('POST', `${topic}:publish`, { messages: [{ data }] });
        t.equal(reply.status, 200, `${why}: accepted`);
        if (reply.status !== 200) {
          t.comment(`${why}: ${JSON.stringify(reply.body)}`);
          continue;
        }
        const pulled = await pullAll(api, sub);
        t.strictSame(
          pulled.body,
          { receivedMessages: [received({ data: expected })] },
          `${why}: delivered as ${expected}`,
        );
        await api('POST', `${sub}:acknowledge`, { ackIds: pulled.ackIds });
      }
    });

    await t.test('1000 messages: accepted, message IDs in request order', async (t) => {
      const { topic, sub } = await setup(api, 'bulk');
      const messages = many(1000, (i) => ({ data: b64(`m${i}`), attributes: { i: String(i) } }));
      const ids = checkMessageIds(await api('POST', `${topic}:publish`, { messages }), 1000);
      const pulled = await pullAll(api, sub, 1000);
      t.equal(pulled.status, 200);
      t.equal(pulled.body.receivedMessages.length, 1000, 'all 1000 pulled');
      const byId = new Map<string, string>();
      pulled.body.receivedMessages.forEach((m: any, k: number) => {
        byId.set(pulled.messageIds[k], m.message.attributes.i);
      });
      t.strictSame(
        ids.map((id) => byId.get(id)),
        messages.map((_, i) => String(i)),
        'messageIds[i] is the ID of message i',
      );
      const numeric = ids.map(Number);
      t.ok(
        numeric.every((n, i) => i === 0 || n > numeric[i - 1]),
        'IDs increase in request order',
      );
      const next = checkMessageIds(await api('POST', `${topic}:publish`, { messages: [{ data: b64('later') }] }), 1);
      t.ok(Number(next[0]) > numeric[999], 'a later publish gets a later ID');
    });

    await t.test('a 4 MB message (well under the limit)', async (t) => {
      // Found while writing these tests: the standard-base64 check in checkPublishRequest
      // (src/broker/delivery.ts) is a backtracking regex that overflows V8's stack on strings of
      // about 4.47 M characters (3.35 MB of data), and the RangeError surfaces as 500 INTERNAL.
      const { topic, sub } = await setup(api, 'fourmb');
      const data = Buffer.alloc(4_000_000, 5);
      const reply = await api('POST', `${topic}:publish`, { messages: [{ data: data.toString('base64') }] });
      t.strictSame(
        { status: reply.status, keys: Object.keys(reply.body ?? {}) },
        { status: 200, keys: ['messageIds'] },
        'accepted',
      );
      if (reply.status !== 200) return;
      const pulled = await pullAll(api, sub, 1);
      t.equal(Buffer.from(pulled.body.receivedMessages[0].message.data, 'base64').length, 4_000_000, 'delivered whole');
      await api('POST', `${sub}:acknowledge`, { ackIds: pulled.ackIds });
    });

    await t.test('exactly 10,000,000 bytes: accepted and delivered intact', async (t) => {
      const { topic, sub } = await setup(api, 'tenmb');
      const sha = (data: Buffer) => createHash('sha256').update(data).digest('hex');
      // One message of exactly 10,000,000 data bytes.
      const big = Buffer.alloc(10_000_000);
      for (let i = 0; i < big.length; i += 4096) big[i] = i % 251;
      checkMessageIds(await api('POST', `${topic}:publish`, { messages: [{ data: big.toString('base64') }] }), 1);
      // Data plus attribute bytes summing to exactly 10,000,000.
      checkMessageIds(
        await api('POST', `${topic}:publish`, {
          messages: [{ data: Buffer.alloc(9_999_990, 3).toString('base64'), attributes: { k1234: 'v1234' } }],
        }),
        1,
      );
      const first = await pullAll(api, sub, 1);
      t.equal(first.status, 200);
      const firstData = Buffer.from(first.body.receivedMessages[0].message.data, 'base64');
      t.equal(firstData.length, 10_000_000, '10,000,000 bytes back');
      t.equal(sha(firstData), sha(big), 'same bytes');
      const second = await pullAll(api, sub, 1);
      const secondData = Buffer.from(second.body.receivedMessages[0].message.data, 'base64');
      t.equal(secondData.length, 9_999_990);
      t.strictSame(second.body.receivedMessages[0].message.attributes, { k1234: 'v1234' });
      t.strictSame(
        await api('POST', `${sub}:acknowledge`, { ackIds: [...first.ackIds, ...second.ackIds] }),
        { status: 200, body: {} },
        'ack both',
      );
    });

    t.strictSame(await api('GET', '/healthz'), { status: 200, body: { status: 'ok' } }, 'still healthy');
    t.strictSame(
      await api('GET', `${S}/limits-sub`),
      { status: 200, body: subscriptionBody(P, 'limits-sub', `projects/${P}/topics/limits`) },
      'fixture intact',
    );
  });
}
