// The gRPC front end's conversions between protobuf and the JSON forms the broker services take:
// Duration, Timestamp and FieldMask, and the tables of Duration-valued resource fields, which
// must list every Duration field the vendored protos give a Topic or a Subscription.

import t from 'tap';
import { SUBSCRIPTION_FIELDS } from '../../src/broker/subscription-fields.ts';
import { TOPIC_FIELDS } from '../../src/broker/topic-fields.ts';
import {
  convertPaths,
  durationFromJson,
  durationToJson,
  fieldMaskToJson,
  SUBSCRIPTION_DURATIONS,
  TOPIC_DURATIONS,
  timestampFromJson,
} from '../../src/grpc/convert.ts';
import { packageDefinition } from '../../src/grpc/protos.ts';

interface FieldDescriptor {
  name: string;
  type: string;
  typeName: string;
  label: string;
}
interface MessageDescriptor {
  name: string;
  field: FieldDescriptor[];
  nestedType: MessageDescriptor[];
}

/** Every message type of the loaded protos by full name, nested ones included. */
const messageTypes = new Map<string, MessageDescriptor>();
function addType(name: string, type: MessageDescriptor): void {
  messageTypes.set(name, type);
  for (const nested of type.nestedType ?? []) addType(`${name}.${nested.name}`, nested);
}
for (const [name, definition] of Object.entries(packageDefinition)) {
  const { format, type } = definition as { format?: string; type?: MessageDescriptor };
  if (format === 'Protocol Buffer 3 DescriptorProto' && type) addType(name, type);
}
const fieldsOf = (typeName: string) => messageTypes.get(typeName)!.field;

/** A field's message type, resolved as protobuf resolves a relative name: innermost scope first. */
function resolve(typeName: string, within: string): string {
  for (let scope = within; ; scope = scope.slice(0, Math.max(0, scope.lastIndexOf('.')))) {
    const candidate = scope ? `${scope}.${typeName}` : typeName;
    if (messageTypes.has(candidate)) return candidate;
    if (!scope) throw new Error(`unresolved type ${typeName} in ${within}`);
  }
}

/** Dotted paths of every Duration field reachable from a message type (not through repeated fields). */
function durationPaths(typeName: string, prefix = '', seen = new Set<string>()): string[] {
  if (seen.has(typeName)) return [];
  seen.add(typeName);
  return fieldsOf(typeName).flatMap((field) => {
    if (field.type !== 'TYPE_MESSAGE' || field.label === 'LABEL_REPEATED') return [];
    const type = resolve(field.typeName, typeName);
    const path = `${prefix}${field.name}`;
    if (type === 'google.protobuf.Duration') return [path];
    return durationPaths(type, `${path}.`, new Set(seen));
  });
}

t.test('every Duration field of a Topic or a Subscription is converted', async (t) => {
  t.same(durationPaths('google.pubsub.v1.Topic').sort(), [...TOPIC_DURATIONS].sort());
  t.same(durationPaths('google.pubsub.v1.Subscription').sort(), [...SUBSCRIPTION_DURATIONS].sort());
});

t.test('the field tables know every field the protos give a Topic or a Subscription', async (t) => {
  // A field missing from a table would be refused as unknown by the strict request schemas.
  // The topic table also holds the broker's own deduplicationWindow, which has no proto field.
  t.same(
    fieldsOf('google.pubsub.v1.Topic')
      .map((f) => f.name)
      .sort(),
    Object.keys(TOPIC_FIELDS)
      .filter((name) => name !== 'deduplicationWindow')
      .sort(),
  );
  t.same(
    fieldsOf('google.pubsub.v1.Subscription')
      .map((f) => f.name)
      .sort(),
    Object.keys(SUBSCRIPTION_FIELDS).sort(),
  );
});

t.test('durations', async (t) => {
  t.equal(durationToJson({ seconds: '600' }), '600s');
  t.equal(durationToJson({}), '0s');
  t.equal(durationToJson({ seconds: '3', nanos: 500_000_000 }), '3.5s');
  t.equal(durationToJson({ seconds: 1, nanos: 1 }), '1.000000001s');
  t.equal(durationToJson({ seconds: '-5' }), '-5s', 'negative durations stay negative (the services refuse them)');
  t.equal(durationToJson({ nanos: -500_000_000 }), '-0.5s');
  t.same(durationFromJson('600s'), { seconds: '600', nanos: 0 });
  t.same(durationFromJson('3.5s'), { seconds: '3', nanos: 500_000_000 });
  t.same(durationFromJson('0.000000001s'), { seconds: '0', nanos: 1 });
  t.throws(() => durationFromJson('ten minutes'));
});

t.test('timestamps', async (t) => {
  const time = '2026-12-02T00:52:39.021376Z';
  const proto = timestampFromJson(time);
  t.same(proto, { seconds: Date.parse('2026-12-02T00:52:39Z') / 1000, nanos: 21_376_000 });
  t.same(timestampFromJson('2026-12-02T00:52:39Z'), { seconds: Date.parse('2026-12-02T00:52:39Z') / 1000, nanos: 0 });
});

t.test('field masks become the comma-separated JSON form', async (t) => {
  t.equal(fieldMaskToJson({ paths: ['ack_deadline_seconds', 'labels'] }), 'ack_deadline_seconds,labels');
  t.equal(fieldMaskToJson(undefined), '');
});

t.test('convertPaths converts present leaves and leaves its input alone', async (t) => {
  const input = { a: { b: 1, c: 2 }, d: 3, e: null };
  const output = convertPaths<number, string>(input, ['a.b', 'd', 'e', 'x.y', 'd.z'], (n) => `#${n}`);
  t.same(output, { a: { b: '#1', c: 2 }, d: '#3', e: null });
  t.same(input, { a: { b: 1, c: 2 }, d: 3, e: null }, 'input unchanged');
});
