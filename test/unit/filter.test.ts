// Subscription filters: every form of the language, accepted and evaluated against attributes, and
// every refusal an INVALID_ARGUMENT that says what is wrong and where.

import t, { type Test } from 'tap';
import { ApiError } from '../../src/errors.ts';
import { parseFilter } from '../../src/broker/filter.ts';

type Attributes = Record<string, string> | undefined;

/** Whether `filter` matches each of `cases`' attributes as listed. */
function evaluates(t: Test, filter: string, cases: [Attributes, boolean][]) {
  const parsed = parseFilter(filter);
  if (!parsed) return t.fail(`${JSON.stringify(filter)} parsed to no filter`);
  t.equal(parsed.text, filter);
  for (const [attributes, expected] of cases) {
    t.equal(parsed.matches(attributes), expected, `${filter} on ${JSON.stringify(attributes)}`);
  }
}

/** The error that parsing `filter` throws, if any. */
function refusal(filter: string): ApiError | undefined {
  try {
    parseFilter(filter);
  } catch (error) {
    return error as ApiError;
  }
  return undefined;
}

/** `filter` is refused with INVALID_ARGUMENT, with a message matching `message` at 1-based `position`. */
function refuses(t: Test, filter: string, message: RegExp, position?: number) {
  const error = refusal(filter);
  if (!(error instanceof ApiError)) return t.fail(`${JSON.stringify(filter)} was not refused with an ApiError`);
  t.equal(error.status, 'INVALID_ARGUMENT', filter);
  t.match(error.message, /^Invalid filter expression: .+\.$/, filter);
  t.match(error.message, message, filter);
  if (position !== undefined) t.match(error.message, new RegExp(` at position ${position}\\.$`), filter);
}

t.test("pstest's examples select the same messages", async (t) => {
  const messages: Record<string, string>[] = [
    { lang: 'en', name: 'com', timezone: 'UTC' },
    { lang: 'en', name: 'net', timezone: 'UTC' },
    { lang: 'en', name: 'org', timezone: 'UTC' },
    { lang: 'cn', name: 'com', timezone: 'UTC' },
    { lang: 'cn', name: 'net', timezone: 'UTC' },
    { lang: 'cn', name: 'org', timezone: 'UTC' },
    { lang: 'jp', name: 'co', timezone: 'UTC' },
    { lang: 'jp', timezone: 'UTC' },
    { name: 'com', timezone: 'UTC' },
    { lang: 'jp', みんな: 'dummy1' },
    { みんな: 'dummy2' },
    { name: 'com', みんな: 'dummy3' },
  ];
  const selections: [string, number[]][] = [
    ['attributes.name = "com"', [1, 4, 9, 12]],
    ['attributes.name != "com"', [2, 3, 5, 6, 7, 8, 10, 11]],
    ['hasPrefix(attributes.name, "co")', [1, 4, 7, 9, 12]],
    ['attributes:name', [1, 2, 3, 4, 5, 6, 7, 9, 12]],
    ['NOT attributes:name', [8, 10, 11]],
    ['(NOT attributes:name) OR attributes.name = "co"', [7, 8, 10, 11]],
    ['NOT (attributes:name OR attributes.lang = "jp")', [11]],
    ['attributes.name = "com" AND -attributes:"lang"', [9, 12]],
    ['attributes:"みんな"', [10, 11, 12]],
  ];
  for (const [filter, numbers] of selections) {
    const parsed = parseFilter(filter)!;
    const selected = messages.flatMap((attributes, i) => (parsed.matches(attributes) ? [i + 1] : []));
    t.same(selected, numbers, filter);
  }
});

t.test('an empty filter is no filter', async (t) => {
  t.equal(parseFilter(''), undefined);
});

t.test('attributes:KEY is true when the key is present, whatever its value', async (t) => {
  evaluates(t, 'attributes:lang', [
    [{ lang: 'en' }, true],
    [{ lang: '' }, true],
    [{ Lang: 'en' }, false],
    [{ language: 'en' }, false],
    [{}, false],
    [undefined, false],
  ]);
  evaluates(t, 'attributes:"lang"', [
    [{ lang: 'en' }, true],
    [{}, false],
  ]);
});

t.test('= is true when the key is present with exactly that value', async (t) => {
  evaluates(t, 'attributes.name = "com"', [
    [{ name: 'com' }, true],
    [{ name: 'Com' }, false],
    [{ name: 'com ' }, false],
    [{ name: 'co' }, false],
    [{ Name: 'com' }, false],
    [{ other: 'com' }, false],
    [undefined, false],
  ]);
  evaluates(t, 'attributes.name = ""', [
    [{ name: '' }, true],
    [{}, false],
  ]);
});

t.test('!= is true when the key is absent or has another value', async (t) => {
  evaluates(t, 'attributes.name != "com"', [
    [{ name: 'com' }, false],
    [{ name: 'org' }, true],
    [{ name: '' }, true],
    [{ other: 'com' }, true],
    [{}, true],
    [undefined, true],
  ]);
});

t.test('hasPrefix is true when the key is present and its value starts with the prefix', async (t) => {
  evaluates(t, 'hasPrefix(attributes.name, "co")', [
    [{ name: 'com' }, true],
    [{ name: 'co' }, true],
    [{ name: 'c' }, false],
    [{ name: 'xco' }, false],
    [{ name: 'Com' }, false],
    [{ other: 'com' }, false],
    [undefined, false],
  ]);
  evaluates(t, 'hasPrefix(attributes.name, "")', [
    [{ name: '' }, true],
    [{ name: 'x' }, true],
    [{}, false],
  ]);
  evaluates(t, 'hasPrefix(attributes.name, "é")', [
    [{ name: 'éa' }, true],
    [{ name: 'e\u0301a' }, false],
  ]);
});

t.test('keys that are inherited object properties are not attributes', async (t) => {
  evaluates(t, 'attributes:constructor OR attributes:__proto__ OR attributes.toString = "x"', [
    [{}, false],
    [undefined, false],
    [JSON.parse('{"__proto__":"x"}'), true],
    [{ constructor: 'x' }, true],
  ]);
  evaluates(t, 'attributes.hasOwnProperty != "x"', [[{}, true]]);
});

t.test('bare keys: letters, digits, - and _, starting with anything but -', async (t) => {
  evaluates(t, 'attributes:my-key_2', [
    [{ 'my-key_2': '' }, true],
    [{ my: '' }, false],
  ]);
  evaluates(t, 'attributes:_x AND attributes:123 AND attributes:a-', [
    [{ _x: '', '123': '', 'a-': '' }, true],
    [{ _x: '', '123': '' }, false],
  ]);
  evaluates(t, 'attributes:AND AND attributes.NOT = "x" AND hasPrefix(attributes.OR, "y")', [
    [{ AND: '', NOT: 'x', OR: 'yz' }, true],
    [{ AND: '', NOT: 'x' }, false],
  ]);
  refuses(t, 'attributes:-a', /expected an attribute key, found '-'/, 12);
  refuses(t, 'attributes:みんな', /unexpected character "み"/, 12);
  refuses(t, 'attributes:a.b', /expected AND, OR or the end of the filter, found '.'/, 13);
  refuses(t, 'attributes:a*', /unexpected character "\*"/, 13);
});

t.test('quoted keys: any characters, exactly', async (t) => {
  evaluates(t, 'attributes:"my key"', [
    [{ 'my key': 'v' }, true],
    [{ my: 'v' }, false],
  ]);
  evaluates(t, 'attributes."k.v" = "x"', [
    [{ 'k.v': 'x' }, true],
    [{ k: 'x' }, false],
  ]);
  evaluates(t, 'attributes:"みんな" AND attributes."😀" != "x"', [
    [{ みんな: '' }, true],
    [{ みんな: '', '😀': 'x' }, false],
  ]);
  evaluates(t, 'attributes:"say \\"hi\\"" OR attributes:""', [
    [{ 'say "hi"': '' }, true],
    [{ '': '' }, true],
    [{ 'say hi': '' }, false],
  ]);
  evaluates(t, 'hasPrefix(attributes."a b", "c")', [[{ 'a b': 'cd' }, true]]);
});

t.test('escapes in strings', async (t) => {
  const escapes: [string, string][] = [
    ['\\"', '"'],
    ['\\\\', '\\'],
    ['\\n\\t\\r', '\n\t\r'],
    ['\\a\\b\\f\\v', '\x07\b\f\v'],
    ["\\'\\`\\?", "'`?"],
    ['\\x41\\X4a\\x7e', 'AJ~'],
    ['\\101\\000\\377', 'A\0\u00ff'],
    ['\\u00e9\\u263A', 'é☺'],
    ['\\U0001F600\\U00000041', '😀A'],
    // As in AIP-160 string literals, \x and octal escapes are code points, not UTF-8 bytes.
    ['\\303\\251', '\u00c3\u00a9'],
    ['\\xc3\\xa9', '\u00c3\u00a9'],
    ['a\\\\nb', 'a\\nb'],
    ['raw\ttab and\nnewline', 'raw\ttab and\nnewline'],
    ['みんな😀', 'みんな😀'],
  ];
  for (const [written, value] of escapes) {
    evaluates(t, `attributes.k = "${written}"`, [
      [{ k: value }, true],
      [{ k: `${value}.` }, false],
    ]);
    evaluates(t, `attributes:"${written}"`, [[{ [value]: '' }, true]]);
  }
});

t.test('negation: NOT and - of restrictions and groups', async (t) => {
  const absent = {};
  const present = { lang: 'en' };
  for (const filter of ['NOT attributes:lang', '-attributes:lang', '-attributes:"lang"', 'NOT (attributes:lang)']) {
    evaluates(t, filter, [
      [absent, true],
      [present, false],
    ]);
  }
  evaluates(t, '-(attributes:a OR attributes:b)', [
    [{}, true],
    [{ a: '' }, false],
    [{ b: '' }, false],
  ]);
  evaluates(t, 'NOT (attributes:a AND attributes:b)', [
    [{ a: '' }, true],
    [{ a: '', b: '' }, false],
  ]);
  evaluates(t, '-hasPrefix(attributes.a, "x") AND NOT attributes.b = "y" AND -attributes.c != "z"', [
    [{ c: 'z' }, true],
    [{ a: 'xx', c: 'z' }, false],
    [{ b: 'y', c: 'z' }, false],
    [{}, false],
  ]);
  evaluates(t, '-(-(attributes:a))', [
    [{ a: '' }, true],
    [{}, false],
  ]);
  evaluates(t, 'NOT (NOT (NOT attributes:a))', [
    [{ a: '' }, false],
    [{}, true],
  ]);
});

t.test('AND, OR and parentheses', async (t) => {
  evaluates(t, 'attributes:a AND attributes:b AND attributes:c', [
    [{ a: '', b: '', c: '' }, true],
    [{ a: '', b: '' }, false],
    [{ b: '', c: '' }, false],
  ]);
  evaluates(t, 'attributes:a OR attributes:b OR attributes:c', [
    [{ c: '' }, true],
    [{ a: '' }, true],
    [{ d: '' }, false],
  ]);
  evaluates(t, 'attributes:a AND (attributes:b OR attributes:c)', [
    [{ a: '', c: '' }, true],
    [{ b: '', c: '' }, false],
  ]);
  evaluates(t, '(attributes:a AND attributes:b) OR attributes:c', [
    [{ c: '' }, true],
    [{ a: '' }, false],
  ]);
  evaluates(t, '((attributes:a OR (attributes:b AND (attributes:c))) AND ((NOT attributes:d)))', [
    [{ a: '' }, true],
    [{ a: '', d: '' }, false],
    [{ b: '', c: '' }, true],
    [{ b: '' }, false],
  ]);
});

t.test('white space', async (t) => {
  const lang = [
    [{ lang: 'en' }, true],
    [{ lang: 'fr' }, false],
  ] as [Attributes, boolean][];
  for (const filter of [
    'attributes.lang="en"',
    'attributes.lang = "en"',
    ' \t\n attributes.lang\t=\r\n"en" \f\v',
    'attributes:lang AND attributes.lang != "fr"',
    'attributes : lang\tAND\nattributes.lang!="fr"',
    '( attributes:"lang" ) AND ( attributes.lang != "fr")',
    'hasPrefix( attributes.lang ,\t"e" )',
    'hasPrefix(attributes.lang,"en")',
    'NOT\t\tattributes.lang != "en"',
    '(((attributes.lang = "en")))',
  ]) {
    evaluates(t, filter, lang);
  }
  refuses(t, '   ', /expected attributes, hasPrefix, NOT, '-' or '\(', found the end of the filter/, 4);
  refuses(t, 'attributes . lang = "en"', /white space before '\.'/, 12);
  refuses(t, 'attributes. lang = "en"', /white space after '\.'/, 12);
  refuses(t, 'hasPrefix(attributes .lang, "e")', /expected '\.' after attributes, found white space/, 21);
  refuses(t, 'hasPrefix (attributes.lang, "e")', /expected '\(' right after hasPrefix, found white space/, 10);
  refuses(t, 'NOT(attributes:lang)', /expected white space after NOT, found '\('/, 4);
  refuses(t, '- attributes:lang', /expected attributes, hasPrefix or '\(' right after '-', found white space/, 2);
  refuses(t, '(attributes:a)AND (attributes:b)', /AND must be preceded by white space/, 15);
  refuses(t, 'attributes:"a"OR attributes:b', /OR must be preceded by white space/, 15);
  refuses(t, 'attributes:a AND(attributes:b)', /expected white space after AND, found '\('/, 17);
  refuses(t, 'attributes:lang\u00a0AND attributes:a', /unexpected character "\u00a0"/, 16);
});

t.test('the filter is at most 256 bytes of UTF-8', async (t) => {
  const longest = `attributes:"${'a'.repeat(243)}"`;
  t.equal(longest.length, 256);
  evaluates(t, longest, [[{ ['a'.repeat(243)]: '' }, true]]);
  const accented = `attributes:"${'é'.repeat(121)}a"`;
  t.equal(Buffer.byteLength(accented), 256);
  evaluates(t, accented, [[{ [`${'é'.repeat(121)}a`]: '' }, true]]);
  refuses(
    t,
    `attributes:"${'a'.repeat(244)}"`,
    /^Invalid filter expression: it is 257 bytes long; at most 256 bytes are allowed\.$/,
  );
  const fewCharactersManyBytes = `attributes:"${'み'.repeat(82)}"`;
  t.equal(fewCharactersManyBytes.length, 95);
  refuses(t, fewCharactersManyBytes, /it is 259 bytes long/);
});

t.test('refused: unbalanced parentheses', async (t) => {
  refuses(t, '(attributes:a', /expected AND, OR or '\)' closing the '\(' at position 1, found the end/, 14);
  refuses(t, '((attributes:a) AND attributes:b', /closing the '\(' at position 1, found the end of the filter/, 33);
  refuses(t, 'attributes:a)', /expected AND, OR or the end of the filter, found '\)'/, 13);
  refuses(t, '(attributes:a))', /found '\)'/, 15);
  refuses(t, '()', /expected attributes, hasPrefix, NOT, '-' or '\(', found '\)'/, 2);
  refuses(t, ')', /found '\)'/, 1);
});

t.test('refused: unterminated strings and bad escapes', async (t) => {
  refuses(t, 'attributes:"lang', /unterminated string/, 12);
  refuses(t, 'attributes.lang = "en', /unterminated string/, 19);
  refuses(t, 'attributes.lang = "en\\"', /unterminated string/, 19);
  refuses(t, 'attributes.lang = "en\\', /unterminated string/, 19);
  refuses(t, '"', /unterminated string/, 1);
  const invalid: [string, string][] = [
    ['\\q', '\\q'],
    ['\\x4', '\\x4'],
    ['\\xZZ', '\\xZZ'],
    ['\\u12', '\\u12'],
    ['\\u12g4', '\\u12g4'],
    ['\\U0001F60', '\\U0001F60'],
    ['\\400', '\\400'],
    ['\\08', '\\08'],
    ['\\7', '\\7'],
    ['\\8', '\\8'],
    ['\\ ', '\\ '],
    ['\\/', '\\/'],
  ];
  for (const [written, quoted] of invalid) {
    refuses(
      t,
      `attributes.k = "a${written}"`,
      new RegExp(`invalid escape sequence '${quoted.replace(/\\/g, '\\\\')}'`),
      18,
    );
  }
  refuses(t, 'attributes.k = "\\uD800"', /escape sequence '\\uD800' is not a Unicode character/, 17);
  refuses(t, 'attributes.k = "\\U00110000"', /escape sequence '\\U00110000' is not a Unicode character/, 17);
  refuses(t, 'attributes.k = "\ud800"', /unpaired surrogate/, 17);
});

t.test('refused: values that are not double-quoted strings', async (t) => {
  refuses(t, 'attributes.lang = en', /expected a double-quoted string, found 'en'/, 19);
  refuses(t, "attributes.lang = 'en'", /strings are written in double quotes/, 19);
  refuses(t, "attributes:'lang'", /strings are written in double quotes/, 12);
  refuses(t, 'attributes.lang = 1', /expected a double-quoted string, found '1'/, 19);
  refuses(t, 'attributes.lang = 1.5', /expected a double-quoted string, found '1'/, 19);
  refuses(t, 'attributes.lang = -1', /expected a double-quoted string, found '-'/, 19);
  refuses(t, 'attributes.lang = attributes.other', /expected a double-quoted string, found 'attributes'/, 19);
  refuses(t, 'attributes.lang == "en"', /expected a double-quoted string, found '='/, 18);
  refuses(t, 'attributes.lang =', /expected a double-quoted string, found the end of the filter/, 18);
  refuses(t, 'hasPrefix(attributes.lang, en)', /expected a double-quoted string, found 'en'/, 28);
});

t.test('refused: operators other than :, = and !=', async (t) => {
  refuses(t, 'attributes.n < "5"', /unsupported operator '<'/, 14);
  refuses(t, 'attributes.n >= "5"', /unsupported operator '>='/, 14);
  refuses(t, 'attributes.n <= "5"', /unsupported operator '<='/, 14);
  refuses(t, 'attributes.n > "5"', /unsupported operator '>'/, 14);
  refuses(t, 'attributes.n ! "5"', /'!' not followed by '='/, 14);
  refuses(t, 'attributes.n:"5"', /expected = or != after attributes\.KEY, found ':'/, 13);
  refuses(t, 'attributes:n = "5"', /expected AND, OR or the end of the filter, found '='/, 14);
  refuses(t, 'attributes = "5"', /expected ':' or '\.' after attributes, found '='/, 12);
  refuses(t, 'attributes.n ~ "5"', /unexpected character "~"/, 14);
});

t.test('refused: functions other than hasPrefix, and hasPrefix with other arguments', async (t) => {
  refuses(t, 'hasSuffix(attributes.a, "x")', /unknown function 'hasSuffix' \(hasPrefix is the only function\)/, 1);
  refuses(t, 'HASPREFIX(attributes.a, "x")', /unknown function 'HASPREFIX'/, 1);
  refuses(t, 'attributes:a AND contains(attributes.a, "x")', /unknown function 'contains'/, 18);
  const arity = /hasPrefix takes two arguments, attributes\.KEY and a string/;
  refuses(t, 'hasPrefix()', arity, 11);
  refuses(t, 'hasPrefix( )', arity, 12);
  refuses(t, 'hasPrefix(attributes.a)', arity, 23);
  refuses(t, 'hasPrefix(attributes.a, "x", "y")', arity, 28);
  refuses(t, 'hasPrefix(attributes.a, "x",)', arity, 28);
  refuses(t, 'hasPrefix("x", attributes.a)', /expected attributes\.KEY, found a string/, 11);
  refuses(t, 'hasPrefix(attributes:a, "x")', /expected '\.' after attributes, found ':'/, 21);
  refuses(t, 'hasPrefix(attributes.a "x")', /expected ',', found a string/, 24);
  refuses(t, 'hasPrefix(attributes.a, "x"', /expected '\)', found the end of the filter/, 28);
  refuses(t, 'hasPrefix(attributes.a, "x") = "y"', /expected AND, OR or the end of the filter, found '='/, 30);
  refuses(t, 'hasPrefix', /expected '\(' right after hasPrefix, found the end of the filter/, 10);
});

t.test('refused: AND and OR mixed without parentheses (Pub/Sub requires them)', async (t) => {
  const mixed = /AND and OR cannot be mixed without parentheses/;
  refuses(t, 'attributes:a AND attributes:b OR attributes:c', mixed, 31);
  refuses(t, 'attributes:a OR attributes:b AND attributes:c', mixed, 30);
  refuses(t, 'NOT attributes:a OR attributes:b AND attributes:c', mixed, 34);
  refuses(t, 'attributes:a AND (attributes:b OR attributes:c AND attributes:d)', mixed, 48);
  refuses(t, 'attributes:a AND attributes:b AND attributes:c OR attributes:d', mixed, 48);
});

t.test('refused: trailing garbage, and terms not joined by AND or OR', async (t) => {
  refuses(t, 'attributes:a attributes:b', /expected AND, OR or the end of the filter, found 'attributes'/, 14);
  refuses(t, 'attributes.a = "x" "y"', /expected AND, OR or the end of the filter, found a string/, 20);
  refuses(t, 'attributes:a,', /expected AND, OR or the end of the filter, found ','/, 13);
  refuses(t, 'attributes:a AND', /expected white space after AND, found the end of the filter/, 17);
  refuses(t, 'attributes:a AND ', /expected attributes, hasPrefix, NOT, '-' or '\(', found the end of the filter/, 18);
  refuses(t, 'AND attributes:a', /expected attributes, hasPrefix, NOT, '-' or '\(', found 'AND'/, 1);
  refuses(t, 'attributes:a AND AND attributes:b', /found 'AND'/, 18);
  refuses(t, 'NOT NOT attributes:a', /expected attributes, hasPrefix or '\(' after NOT, found 'NOT'/, 5);
  refuses(t, '--attributes:a', /expected attributes, hasPrefix or '\(' right after '-', found '-'/, 2);
  refuses(t, 'attributes:a AND NOT', /expected white space after NOT, found the end of the filter/, 21);
});

t.test('refused: lower-case operators are names, not operators', async (t) => {
  refuses(t, 'attributes:a and attributes:b', /found 'and' \(operators are upper case: AND\)/, 14);
  refuses(t, 'attributes:a or attributes:b', /found 'or' \(operators are upper case: OR\)/, 14);
  refuses(t, 'attributes:a And attributes:b', /found 'And' \(operators are upper case: AND\)/, 14);
  refuses(t, 'not attributes:a', /found 'not' \(operators are upper case: NOT\)/, 1);
  refuses(t, 'attributes:a AND not attributes:b', /found 'not' \(operators are upper case: NOT\)/, 18);
});

t.test('refused: anything but attributes', async (t) => {
  refuses(t, 'data = "x"', /unknown field 'data' \(only attributes can be filtered\)/, 1);
  refuses(t, 'data:"x"', /unknown field 'data'/, 1);
  refuses(t, 'orderingKey = "k"', /unknown field 'orderingKey'/, 1);
  refuses(t, 'message.attributes:k', /unknown field 'message'/, 1);
  refuses(t, 'messageId = "1"', /unknown field 'messageId'/, 1);
  refuses(t, 'Attributes:a', /unknown field 'Attributes'/, 1);
  refuses(t, '"attributes":a', /expected attributes, hasPrefix, NOT, '-' or '\(', found a string/, 1);
  refuses(t, 'attributes', /expected ':' or '\.' after attributes, found the end of the filter/, 11);
  refuses(t, 'attributes.a', /expected = or != after attributes\.KEY, found the end of the filter/, 13);
  refuses(t, 'attributes.a.b = "x"', /expected = or != after attributes\.KEY, found '\.'/, 13);
  refuses(t, 'attributes:', /expected an attribute key, found the end of the filter/, 12);
  refuses(t, '*', /unexpected character "\*"/, 1);
});

t.test('wildcards are ordinary characters', async (t) => {
  evaluates(t, 'attributes.a = "x*"', [
    [{ a: 'x*' }, true],
    [{ a: 'xy' }, false],
  ]);
  evaluates(t, 'hasPrefix(attributes.a, "%")', [
    [{ a: '%x' }, true],
    [{ a: 'x' }, false],
  ]);
});

t.test('positions count characters from 1, not bytes or UTF-16 units', async (t) => {
  refuses(t, 'attributes:"😀é" AND &', /unexpected character "&"/, 21);
  refuses(t, 'attributes:"みんな" OR "x', /unterminated string/, 21);
});
