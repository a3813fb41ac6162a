// Large publish bodies are parsed with their messages' "data" strings lifted out
// (src/json-body.ts). Whenever that path succeeds, its result must be exactly JSON.parse of the
// whole text, or else refusedByJsonParse must say that JSON.parse refuses the text (a raw control
// character in a lifted string, which that path does not look for): checked on random JSON texts
// built to trip it (keys that end in `\"data`, duplicate keys, "data" inside strings and
// attributes, placeholder-like strings, escapes, odd whitespace, broken texts).

import t from 'tap';
import { liftDataStrings, putBack, refusedByJsonParse } from '../../src/json-body.ts';
import { randomFromEnv, type seededRandom } from '../helpers/random.ts';

/** JSON.parse's result, or undefined where it throws. */
function tryParse(text: string): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(text) };
  } catch {
    return undefined;
  }
}

/**
 * The lifted path as app.ts runs it: the parsed body and the lifted strings, or undefined when it
 * hands over to JSON.parse.
 */
function parseLifted(text: string): { value: unknown; strings: string[] } | undefined {
  const bytes = Buffer.from(text);
  const lifted = liftDataStrings(bytes, bytes.every((byte) => byte < 0x80) ? 'latin1' : 'utf8');
  const parsed = lifted && tryParse(lifted.skeleton);
  return parsed && putBack(parsed.value, lifted.strings) ? { value: parsed.value, strings: lifted.strings } : undefined;
}

t.test('a publish body takes the lifted path and parses exactly as JSON.parse', async (t) => {
  const data = Array.from({ length: 100 }, (_, i) => Buffer.alloc(1024, i).toString('base64'));
  const text = JSON.stringify({ messages: data.map((d, i) => ({ data: d, attributes: { i: String(i) } })) });
  const bytes = Buffer.from(text);
  const lifted = liftDataStrings(bytes, 'latin1');
  t.ok(lifted, 'lifted');
  t.equal(lifted!.strings.length, 100, 'every message\'s "data" string');
  t.ok(lifted!.skeleton.length < 10_000, `the skeleton is small (${lifted!.skeleton.length} characters)`);
  t.same(parseLifted(text)?.value, JSON.parse(text));
  t.notOk(refusedByJsonParse(parseLifted(text)!.strings), 'JSON.parse accepts it');
  const withAttribute = JSON.stringify({
    messages: [{ data: data[0], attributes: { data: 'an attribute named data' } }],
  });
  t.notOk(parseLifted(withAttribute), 'a "data" string that is not a message\'s data is handed over');
});

t.test("a raw control character in a message's data is lifted, and refusedByJsonParse finds it", async (t) => {
  for (const code of [0x00, 0x01, 0x09, 0x0a, 0x0d, 0x1f]) {
    const text = `{"messages":[{"data":"QUJD"},{"data":"QU${String.fromCharCode(code)}JD"}]}`;
    const result = parseLifted(text);
    t.ok(result, `control character ${code}: lifted`);
    t.ok(
      refusedByJsonParse(result!.strings),
      `control character ${code}: refusedByJsonParse says JSON.parse refuses it`,
    );
    t.equal(tryParse(text), undefined, `control character ${code}: and JSON.parse does`);
  }
});

t.test('bodies the lifted path must hand over to JSON.parse', async (t) => {
  const cases: [string, string][] = [
    ['an escape in a data string', '{"messages":[{"data":"QUJD\\/"}]}'],
    ['a key that ends in \\"data', '{"x\\"data":"QUJD"}'],
    ['a duplicate data key', '{"data":"QUE=","data":"QkI="}'],
    ['a placeholder-like data string next to a lifted one', '{"m":[{"data" : "\\u00000"},{"data":"QUJD"}]}'],
    ['a placeholder-like string in an array', '{"m":["\\u00000"],"data":"QUJD"}'],
    ['no closing quote', '{"data":"QUJD'],
    ['a raw control character in a data string', '{"attributes":{"data":"tab\there"}}'],
    ['no data string at all', '{"ackIds":["a","b"]}'],
  ];
  for (const [what, text] of cases) {
    const result = parseLifted(text);
    if (result) t.same(result.value, tryParse(text)?.value, `${what}: same result as JSON.parse`);
    else t.pass(`${what}: handed over`);
  }
  t.notOk(parseLifted('{"data":"QUE=","data":"QkI="}'), 'a duplicate key is handed over (JSON.parse keeps the last)');
  t.notOk(parseLifted('{"x\\"data":"QUJD"}'), 'a lifted string that is not the value of "data" is handed over');
  t.notOk(
    parseLifted('{"attributes":{"data":"tab\there"}}'),
    'a "data" string outside the messages is handed over (JSON.parse refuses it)',
  );
});

// Random JSON texts, written by hand so that keys can repeat and whitespace can vary.
const STRINGS = [
  'QUJD',
  'QUJDRA==',
  '',
  'data',
  '"data":"',
  '\\"data',
  '\u0000',
  '\u00000',
  '\u00001',
  '\u000012',
  'a"b',
  'a\\b',
  'é',
  '日本',
  '\n',
  '}',
  '{"data":"x"}',
];
const KEYS = ['data', 'messages', 'attributes', 'x"data', 'DATA', '__data', 'data ', 'orderingKey'];

function randomJson(random: ReturnType<typeof seededRandom>, depth: number): string {
  const space = () => (random.chance(0.8) ? '' : random.pick([' ', '\n', '\t']));
  const roll = random.next();
  if (depth <= 0 || roll < 0.35) {
    if (random.chance(0.85)) {
      const text = random.chance(0.9)
        ? Buffer.alloc(random.int(0, 40), random.int(0, 255)).toString('base64')
        : random.pick(STRINGS);
      return JSON.stringify(text);
    }
    return random.pick(['1', 'true', 'null', '-0.5e3']);
  }
  if (roll < 0.55) {
    const items = Array.from({ length: random.int(0, 4) }, () => space() + randomJson(random, depth - 1) + space());
    return `[${items.join(',')}]`;
  }
  // Mostly distinct keys, "data" first half of the time; now and then a repeated one.
  const keys = random.someOf(KEYS, random.int(0, 5));
  if (random.chance(0.5)) keys.unshift('data');
  if (random.chance(0.1)) keys.push(random.pick(keys.length ? keys : KEYS));
  const members = [...new Set(keys.slice(0, -1)), ...keys.slice(-1)].map(
    (key) => `${space()}${JSON.stringify(key)}${space()}:${space()}${randomJson(random, depth - 1)}${space()}`,
  );
  return `{${members.join(',')}}`;
}

/** A message: "data" (a random string, mostly base64), sometimes more keys, now and then "data" twice. */
function randomMessage(random: ReturnType<typeof seededRandom>): string {
  const data = () => `"data":${randomJson(random, 0)}`;
  const members = [data()];
  if (random.chance(0.3)) members.push(`"attributes":${randomJson(random, 1)}`);
  if (random.chance(0.05)) members.push(data());
  return `{${random.someOf(members, members.length).join(',')}}`;
}

/** Mostly publish-shaped: {"messages":[...]} of random objects (often with "data"), among other keys. */
function randomBody(random: ReturnType<typeof seededRandom>): string {
  if (random.chance(0.3)) return randomJson(random, 4);
  const messages = Array.from({ length: random.int(0, 4) }, () =>
    random.chance(0.7) ? randomMessage(random) : randomJson(random, 2),
  );
  const others = random.chance(0.2) ? `,"data":${randomJson(random, 1)}` : '';
  return `{"messages":[${messages.join(',')}]${others}}`;
}

/** Breaks a text now and then: a cut, a stray character, a raw control character. */
function maybeBreak(random: ReturnType<typeof seededRandom>, text: string): string {
  if (!random.chance(0.15)) return text;
  const at = random.int(0, text.length);
  return random.pick([
    text.slice(0, at),
    text.slice(0, at) + random.pick(['"', '\\', ',', '\u0001', '\n']) + text.slice(at),
  ]);
}

t.test('random texts: whenever the lifted path succeeds, it equals JSON.parse', async (t) => {
  const random = randomFromEnv(t);
  let lifted = 0;
  let mismatches = 0;
  for (let i = 0; i < 20_000; i++) {
    const text = maybeBreak(random, randomBody(random));
    const result = parseLifted(text);
    if (!result) continue;
    lifted++;
    const expected = tryParse(text);
    if (refusedByJsonParse(result.strings) !== (expected === undefined)) {
      if (mismatches++ < 5) t.fail(`refusedByJsonParse disagrees with JSON.parse on ${JSON.stringify(text)}`);
    } else if (expected && JSON.stringify(result.value) !== JSON.stringify(expected.value)) {
      if (mismatches++ < 5) t.fail(`different result for ${JSON.stringify(text)}`);
    }
  }
  t.equal(mismatches, 0, 'no text parsed differently');
  t.ok(lifted > 2000, `the lifted path was taken for ${lifted} texts`);
});
