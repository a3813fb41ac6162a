// proto3 JSON field names: snake_case spellings become lowerCamelCase at any depth, keys of map
// fields (labels, attributes) are left alone, field order is kept, and the caller's body is not
// changed.

import t from 'tap';
import { camelCaseFields } from '../../src/schemas/common.ts';

t.test('snake_case fields are renamed at any depth, in their original order', async (t) => {
  const spelled = new Map<string, string>();
  const body = {
    ack_ids: ['a'],
    messages: [{ data: 'x', ordering_key: 'k', attributes: { my_key: 'v' } }, { data: 'y' }],
    pageSize: 3,
    labels: { a_b: 'c' },
  };
  const converted = camelCaseFields(body, spelled) as any;
  t.same(converted, {
    ackIds: ['a'],
    messages: [{ data: 'x', orderingKey: 'k', attributes: { my_key: 'v' } }, { data: 'y' }],
    pageSize: 3,
    labels: { a_b: 'c' },
  });
  t.same(Object.keys(converted), ['ackIds', 'messages', 'pageSize', 'labels'], 'field order kept');
  t.same(Object.keys(converted.messages[0]), ['data', 'orderingKey', 'attributes'], 'nested field order kept');
  t.same(
    [...spelled],
    [
      ['ackIds', 'ack_ids'],
      ['orderingKey', 'ordering_key'],
    ],
    'how each renamed field was spelled',
  );
  t.same(
    body.messages[0],
    { data: 'x', ordering_key: 'k', attributes: { my_key: 'v' } },
    'the original body is not changed',
  );
  t.equal(camelCaseFields('text'), 'text');
  t.equal(camelCaseFields(null), null);
});
