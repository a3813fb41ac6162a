// Pull, Acknowledge and ModifyAckDeadline request bodies: every rejected request answers the
// whole expected error body and changes no lease; maxMessages above 1000 is capped, not
// refused; ack IDs are checked the way the REST reference and the exactly-once page describe
// (https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions/acknowledge,
// https://cloud.google.com/pubsub/docs/reference/rest/v1/projects.subscriptions/modifyAckDeadline,
// https://cloud.google.com/pubsub/docs/exactly-once-delivery). Runs against standalone Redis
// and Redis Cluster.

import t from 'tap';
import { redisTargets } from '../helpers/redis.ts';
import {
  b64,
  checkMessageIds,
  invalid,
  invalidValue,
  normalisePull,
  notAnObject,
  notFound,
  openClient,
  received,
  unknownField,
  type Client,
} from './_support.ts';

const P = 'pa-project';
const T = `/v1/projects/${P}/topics`;
const S = `/v1/projects/${P}/subscriptions`;
const EOD_INVALID =
  'Some acknowledgement ids in the request were invalid. This could be because the acknowledgement ids have expired or the acknowledgement ids were malformed.';

const eodFailure = (metadata: Record<string, string>) => ({
  error: {
    code: 400,
    message: EOD_INVALID,
    status: 'INVALID_ARGUMENT',
    details: [
      {
        '@type': 'type.googleapis.com/google.rpc.ErrorInfo',
        reason: 'EXACTLY_ONCE_ACKID_FAILURE',
        domain: 'pubsub.googleapis.com',
        metadata,
      },
    ],
  },
});

async function pull(api: Client['api'], sub: string, maxMessages = 1000) {
  const reply = await api('POST', `${S}/${sub}:pull`, { maxMessages, returnImmediately: true });
  return { status: reply.status, ...normalisePull(reply.body) };
}

for (const target of redisTargets()) {
  t.test(`pull / acknowledge / modifyAckDeadline (${target.name})`, async (t) => {
    const { api } = await openClient(t, target, `pullack-${target.name}`);
    const topic = `projects/${P}/topics/pa-topic`;
    await api('PUT', `${T}/pa-topic`, {});
    await api('PUT', `${T}/pa-cap-topic`, {});
    for (const [id, extra] of [
      ['pa-sub', {}],
      ['pa-other', {}],
      ['pa-eod', { enableExactlyOnceDelivery: true }],
      ['pa-cap', { topic: `projects/${P}/topics/pa-cap-topic` }],
    ] as const) {
      const created = await api('PUT', `${S}/${id}`, { topic, ...extra });
      if (created.status !== 200) throw new Error(`fixture ${id}: ${JSON.stringify(created)}`);
    }
    const publishTo = async (topicId: string, ...texts: string[]) =>
      checkMessageIds(
        await api('POST', `${T}/${topicId}:publish`, { messages: texts.map((text) => ({ data: b64(text) })) }),
        texts.length,
      );
    const publish = (...texts: string[]) => publishTo('pa-topic', ...texts);
    await publish('one', 'two', 'three');

    await t.test('pull: bad bodies -> 400, nothing leased', async (t) => {
      const url = `${S}/pa-sub:pull`;
      const cases: [string, unknown, unknown][] = [
        ['maxMessages missing', {}, invalidValue('maxMessages', 'Invalid input: expected number, received undefined')],
        [
          'maxMessages missing, returnImmediately set',
          { returnImmediately: true },
          invalidValue('maxMessages', 'Invalid input: expected number, received undefined'),
        ],
        ['maxMessages 0', { maxMessages: 0 }, invalidValue('maxMessages', 'maxMessages must be a positive integer')],
        ['maxMessages -1', { maxMessages: -1 }, invalidValue('maxMessages', 'maxMessages must be a positive integer')],
        [
          'maxMessages "-1"',
          { maxMessages: '-1' },
          invalidValue('maxMessages', 'maxMessages must be a positive integer'),
        ],
        [
          'maxMessages "abc"',
          { maxMessages: 'abc' },
          invalidValue('maxMessages', 'Invalid input: expected number, received string'),
        ],
        ['maxMessages 1.5', { maxMessages: 1.5 }, invalidValue('maxMessages', 'expected an integer')],
        [
          'maxMessages null',
          { maxMessages: null },
          invalidValue('maxMessages', 'Invalid input: expected number, received null'),
        ],
        [
          'maxMessages true',
          { maxMessages: true },
          invalidValue('maxMessages', 'Invalid input: expected number, received boolean'),
        ],
        [
          'returnImmediately "yes"',
          { maxMessages: 1, returnImmediately: 'yes' },
          invalidValue('returnImmediately', 'Invalid input: expected boolean, received string'),
        ],
        ['unknown field', { maxMessages: 1, returnImmediately: true, bogus: 1 }, unknownField('bogus')],
        ['array body', [{ maxMessages: 1 }], notAnObject('pull request')],
      ];
      for (const [why, body, expected] of cases) {
        t.strictSame(await api('POST', url, body), { status: 400, body: expected }, why);
      }
      t.strictSame(
        await api('POST', `${S}/absent:pull`, { maxMessages: 1, returnImmediately: true }),
        { status: 404, body: notFound('absent') },
        'unknown subscription -> 404',
      );
      t.strictSame(
        await api('POST', `${S}/absent:pull`, { maxMessages: 0 }),
        { status: 400, body: invalidValue('maxMessages', 'maxMessages must be a positive integer') },
        'bad body beats unknown subscription',
      );
      const all = await pull(api, 'pa-sub', 10);
      t.strictSame(
        { status: all.status, body: all.body },
        {
          status: 200,
          body: {
            receivedMessages: [
              received({ data: b64('one') }),
              received({ data: b64('two') }),
              received({ data: b64('three') }),
            ],
          },
        },
        'a valid pull gets all three: no rejected pull leased anything',
      );
      t.strictSame(
        await api('POST', `${S}/pa-sub:acknowledge`, { ackIds: all.ackIds }),
        { status: 200, body: {} },
        'ack them',
      );
      t.strictSame(
        await api('POST', url, { maxMessages: 10, returnImmediately: true }),
        { status: 200, body: {} },
        'empty pull answers {}',
      );
    });

    await t.test('pull: maxMessages as a string is tolerated; 5000 is capped to 1000', async (t) => {
      await publishTo('pa-cap-topic', 's');
      const reply = await api('POST', `${S}/pa-cap:pull`, { maxMessages: '5', returnImmediately: true });
      const { body, ackIds } = normalisePull(reply.body);
      t.strictSame(
        { status: reply.status, body },
        { status: 200, body: { receivedMessages: [received({ data: b64('s') })] } },
        'maxMessages "5"',
      );
      await api('POST', `${S}/pa-cap:acknowledge`, { ackIds });

      checkMessageIds(
        await api('POST', `${T}/pa-cap-topic:publish`, {
          messages: Array.from({ length: 1000 }, (_, i) => ({ data: b64(`c${i}`) })),
        }),
        1000,
      );
      await publishTo('pa-cap-topic', 'c1000');
      const capped = await api('POST', `${S}/pa-cap:pull`, { maxMessages: 5000, returnImmediately: true });
      t.equal(capped.status, 200, 'maxMessages 5000 is not an error');
      t.strictSame(Object.keys(capped.body), ['receivedMessages']);
      t.equal(capped.body.receivedMessages.length, 1000, 'at most 1000 per response');
      const rest = await pull(api, 'pa-cap', 5000);
      t.strictSame(rest.body, { receivedMessages: [received({ data: b64('c1000') })] }, 'the 1001st comes next');
      const ids = [...normalisePull(capped.body).ackIds, ...rest.ackIds];
      t.strictSame(
        await api('POST', `${S}/pa-cap:acknowledge`, { ackIds: ids }),
        { status: 200, body: {} },
        'ack 1001 IDs at once',
      );
      t.strictSame(
        await api('POST', `${S}/pa-cap:pull`, { maxMessages: 5000, returnImmediately: true }),
        { status: 200, body: {} },
        'drained',
      );
    });

    await t.test('acknowledge: bad bodies -> 400, nothing acked', async (t) => {
      await publish('ack-me');
      const leased = await pull(api, 'pa-sub');
      const [ackId] = leased.ackIds;
      const other = await pull(api, 'pa-other');
      const url = `${S}/pa-sub:acknowledge`;
      const foreign = (id: string) =>
        invalid(`Invalid ack ID: "${id}" was not issued for projects/${P}/subscriptions/pa-sub.`);
      const cases: [string, unknown, unknown][] = [
        ['ackIds missing', {}, invalidValue('ackIds', 'ackIds must be a list of strings')],
        ['ackIds empty', { ackIds: [] }, invalidValue('ackIds', 'at least one ack ID is required')],
        ['ackIds a string', { ackIds: ackId }, invalidValue('ackIds', 'ackIds must be a list of strings')],
        [
          'ackIds of numbers',
          { ackIds: [1, 2] },
          invalidValue('ackIds.0', 'Invalid input: expected string, received number'),
        ],
        [
          'ackIds with a null',
          { ackIds: [ackId, null] },
          invalidValue('ackIds.1', 'Invalid input: expected string, received null'),
        ],
        ['unknown field', { ackIds: [ackId], ackDeadlineSeconds: 10 }, unknownField('ackDeadlineSeconds')],
        ['malformed ack ID', { ackIds: ['garbage'] }, foreign('garbage')],
        ['empty ack ID', { ackIds: [''] }, foreign('')],
        ['a valid and a malformed ack ID', { ackIds: [ackId, 'garbage'] }, foreign('garbage')],
        [
          'an ack ID of another subscription',
          { ackIds: [other.ackIds[other.ackIds.length - 1]] },
          foreign(other.ackIds[other.ackIds.length - 1]),
        ],
      ];
      for (const [why, body, expected] of cases) {
        t.strictSame(await api('POST', url, body), { status: 400, body: expected }, why);
      }
      t.strictSame(
        await api('POST', `${S}/absent:acknowledge`, { ackIds: [ackId] }),
        { status: 404, body: notFound('absent') },
        'unknown subscription -> 404',
      );
      // Nothing above acked the message: a nack makes it come back.
      t.strictSame(
        await api('POST', `${S}/pa-sub:modifyAckDeadline`, { ackIds: [ackId], ackDeadlineSeconds: 0 }),
        { status: 200, body: {} },
        'nack',
      );
      const back = await pull(api, 'pa-sub');
      t.strictSame(
        back.body,
        { receivedMessages: [received({ data: b64('ack-me') })] },
        'the message was not acked by any rejected request',
      );
      t.strictSame(await api('POST', url, { ackIds: back.ackIds }), { status: 200, body: {} }, 'ack');
      t.strictSame(await api('POST', url, { ackIds: back.ackIds }), { status: 200, body: {} }, 'ack again: still {}');
      t.strictSame(
        await api('POST', url, { ackIds: [ackId] }),
        { status: 200, body: {} },
        'a stale (superseded) ack ID: {}',
      );
      t.strictSame(
        await api('POST', `${S}/pa-other:acknowledge`, { ackIds: other.ackIds }),
        { status: 200, body: {} },
        'ack the other subscription',
      );
    });

    await t.test('modifyAckDeadline: bad bodies -> 400, lease unchanged', async (t) => {
      await publish('mod-me');
      const leased = await pull(api, 'pa-sub');
      const [ackId] = leased.ackIds;
      const url = `${S}/pa-sub:modifyAckDeadline`;
      const range = invalidValue('ackDeadlineSeconds', 'ackDeadlineSeconds must be between 0 and 600');
      const cases: [string, unknown, unknown][] = [
        ['ackDeadlineSeconds -1', { ackIds: [ackId], ackDeadlineSeconds: -1 }, range],
        ['ackDeadlineSeconds 601', { ackIds: [ackId], ackDeadlineSeconds: 601 }, range],
        [
          'ackDeadlineSeconds missing',
          { ackIds: [ackId] },
          invalidValue('ackDeadlineSeconds', 'Invalid input: expected number, received undefined'),
        ],
        [
          'ackDeadlineSeconds "abc"',
          { ackIds: [ackId], ackDeadlineSeconds: 'abc' },
          invalidValue('ackDeadlineSeconds', 'Invalid input: expected number, received string'),
        ],
        [
          'ackDeadlineSeconds 0.5',
          { ackIds: [ackId], ackDeadlineSeconds: 0.5 },
          invalidValue('ackDeadlineSeconds', 'expected an integer'),
        ],
        ['ackIds missing', { ackDeadlineSeconds: 0 }, invalidValue('ackIds', 'ackIds must be a list of strings')],
        [
          'ackIds empty',
          { ackIds: [], ackDeadlineSeconds: 0 },
          invalidValue('ackIds', 'at least one ack ID is required'),
        ],
        [
          'ackIds not strings',
          { ackIds: [{}], ackDeadlineSeconds: 0 },
          invalidValue('ackIds.0', 'Invalid input: expected string, received object'),
        ],
        [
          'malformed ack ID',
          { ackIds: [ackId, 'garbage'], ackDeadlineSeconds: 0 },
          invalid(`Invalid ack ID: "garbage" was not issued for projects/${P}/subscriptions/pa-sub.`),
        ],
        ['unknown field', { ackIds: [ackId], ackDeadlineSeconds: 0, maxMessages: 1 }, unknownField('maxMessages')],
      ];
      for (const [why, body, expected] of cases) {
        t.strictSame(await api('POST', url, body), { status: 400, body: expected }, why);
      }
      t.strictSame(
        await api('POST', `${S}/absent:modifyAckDeadline`, { ackIds: [ackId], ackDeadlineSeconds: 0 }),
        { status: 404, body: notFound('absent') },
        'unknown subscription -> 404',
      );
      t.strictSame(await pull(api, 'pa-sub').then((r) => r.body), {}, 'still leased: no rejected nack released it');
      t.strictSame(
        await api('POST', url, { ackIds: [ackId], ackDeadlineSeconds: 600 }),
        { status: 200, body: {} },
        'extend to 600 s',
      );
      t.strictSame(
        await api('POST', url, { ackIds: [ackId], ackDeadlineSeconds: '0' }),
        { status: 200, body: {} },
        'nack with "0" (int32 as a string)',
      );
      const back = await pull(api, 'pa-sub');
      t.strictSame(back.body, { receivedMessages: [received({ data: b64('mod-me') })] }, 'redelivered after the nack');
      t.strictSame(
        await api('POST', `${S}/pa-sub:acknowledge`, { ackIds: back.ackIds }),
        { status: 200, body: {} },
        'ack',
      );
      t.strictSame(
        await api('POST', url, { ackIds: back.ackIds, ackDeadlineSeconds: 30 }),
        { status: 200, body: {} },
        'modack of an acked message: {} without exactly-once',
      );
    });

    await t.test('exactly-once: per-ack-ID failures in details', async (t) => {
      const drained = await pull(api, 'pa-eod');
      if (drained.ackIds.length) await api('POST', `${S}/pa-eod:acknowledge`, { ackIds: drained.ackIds });
      await publish('eod');
      const leased = await pull(api, 'pa-eod');
      const [ackId] = leased.ackIds;
      const url = `${S}/pa-eod:acknowledge`;
      t.strictSame(
        await api('POST', url, { ackIds: ['garbage'] }),
        { status: 400, body: eodFailure({ garbage: 'PERMANENT_FAILURE_INVALID_ACK_ID' }) },
        'malformed ack ID',
      );
      t.strictSame(
        await api('POST', url, { ackIds: [ackId, 'garbage'] }),
        { status: 400, body: eodFailure({ garbage: 'PERMANENT_FAILURE_INVALID_ACK_ID' }) },
        'valid + malformed: only the malformed one listed',
      );
      t.strictSame(
        await api('POST', url, { ackIds: [ackId] }),
        { status: 400, body: eodFailure({ [ackId]: 'PERMANENT_FAILURE_INVALID_ACK_ID' }) },
        'the valid one was applied: acking it again fails',
      );
      t.strictSame(
        await api('POST', `${S}/pa-eod:modifyAckDeadline`, { ackIds: [ackId], ackDeadlineSeconds: 0 }),
        { status: 400, body: eodFailure({ [ackId]: 'PERMANENT_FAILURE_INVALID_ACK_ID' }) },
        'modack of an acked message fails too',
      );
      t.strictSame(
        await api('POST', url, { ackIds: [] }),
        { status: 400, body: invalidValue('ackIds', 'at least one ack ID is required') },
        'empty ackIds: plain 400',
      );
      t.strictSame(await pull(api, 'pa-eod').then((r) => r.body), {}, 'nothing left');
    });

    t.strictSame(await api('GET', '/healthz'), { status: 200, body: { status: 'ok' } }, 'still healthy');
  });
}
