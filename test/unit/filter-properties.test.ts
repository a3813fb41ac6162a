// Subscription filters, by property: a random filter tree, printed, parses to a filter that matches
// exactly the attributes the tree means; other spellings of the tree (white space, NOT or -,
// escapes, optional parentheses) match the same; and no text makes the parser throw anything but
// INVALID_ARGUMENT.

import fc from 'fast-check';
import t from 'tap';
import { parseFilter } from '../../src/broker/filter.ts';
import { ApiError } from '../../src/errors.ts';
import { seededRandom } from '../helpers/random.ts';

type Tree =
  | { kind: 'has'; key: string }
  | { kind: 'equals' | 'notEquals'; key: string; value: string }
  | { kind: 'hasPrefix'; key: string; prefix: string }
  | { kind: 'not'; operand: Tree }
  | { kind: 'and' | 'or'; operands: Tree[] };

type Attributes = Record<string, string>;

const MAX_FILTER_BYTES = 256;

// Few keys and short values from few characters, so that trees and attributes meet often; some
// keys and values need quotes or escapes, and some keys are properties that every object inherits.
const KEYS = [
  'a',
  'b',
  'a-b',
  '_1',
  '7',
  'AND',
  'my key',
  'k.v',
  'みんな',
  '😀',
  'say "hi"',
  'back\\slash',
  'tab\there',
  'constructor',
  '__proto__',
];
const key = fc.constantFrom(...KEYS);
const value = fc.oneof(
  fc.constantFrom('', 'x', 'xy', 'é'),
  fc.string({ unit: fc.constantFrom('x', 'y', 'é', '"', '\\', '\n', '\x07', '😀', ' '), maxLength: 3 }),
);
const attributes = fc.dictionary(key, value, { maxKeys: 5 });
const attributeSets = fc.array(attributes, { minLength: 1, maxLength: 8 });

const { tree } = fc.letrec<{ tree: Tree }>((tie) => ({
  tree: fc.oneof(
    { depthSize: 'small', maxDepth: 4, withCrossShrink: true },
    fc.record({ kind: fc.constant('has' as const), key }),
    fc.record({ kind: fc.constantFrom('equals' as const, 'notEquals' as const), key, value }),
    fc.record({ kind: fc.constant('hasPrefix' as const), key, prefix: value }),
    fc.record({ kind: fc.constant('not' as const), operand: tie('tree') }),
    fc.record({
      kind: fc.constantFrom('and' as const, 'or' as const),
      operands: fc.array(tie('tree'), { minLength: 2, maxLength: 3 }),
    }),
  ),
}));

/** What `tree` means, computed another way than the broker does. */
function reference(tree: Tree, attributes: Attributes): boolean {
  const entries = Object.entries(attributes);
  switch (tree.kind) {
    case 'has':
      return Object.keys(attributes).includes(tree.key);
    case 'equals':
      return entries.some(([k, v]) => k === tree.key && v === tree.value);
    case 'notEquals':
      return !entries.some(([k, v]) => k === tree.key && v === tree.value);
    case 'hasPrefix':
      return entries.some(([k, v]) => k === tree.key && v.slice(0, tree.prefix.length) === tree.prefix);
    case 'not':
      return !reference(tree.operand, attributes);
    case 'and':
      return tree.operands.every((operand) => reference(operand, attributes));
    case 'or':
      return tree.operands.some((operand) => reference(operand, attributes));
  }
}

const BARE_KEY = /^[A-Za-z0-9_][A-Za-z0-9_-]*$/;

/** The plainest spelling: every operand in parentheses, keys bare when they can be, JSON strings. */
function print(tree: Tree): string {
  const key = (name: string) => (BARE_KEY.test(name) ? name : JSON.stringify(name));
  switch (tree.kind) {
    case 'has':
      return `attributes:${key(tree.key)}`;
    case 'equals':
      return `attributes.${key(tree.key)} = ${JSON.stringify(tree.value)}`;
    case 'notEquals':
      return `attributes.${key(tree.key)} != ${JSON.stringify(tree.value)}`;
    case 'hasPrefix':
      return `hasPrefix(attributes.${key(tree.key)}, ${JSON.stringify(tree.prefix)})`;
    case 'not':
      return `NOT (${print(tree.operand)})`;
    case 'and':
    case 'or':
      return tree.operands.map((operand) => `(${print(operand)})`).join(` ${tree.kind.toUpperCase()} `);
  }
}

type Random = ReturnType<typeof seededRandom>;

const hex = (codePoint: number, digits: number) => codePoint.toString(16).padStart(digits, '0');

/** `text` as a string literal, each character written raw or as one of the escapes that can spell it. */
function quote(text: string, random: Random): string {
  let literal = '"';
  for (const character of text) {
    const codePoint = character.codePointAt(0)!;
    const spellings = [`\\U${hex(codePoint, 8)}`];
    if (codePoint <= 0xffff) spellings.push(`\\u${hex(codePoint, 4)}`);
    if (codePoint <= 0xff) spellings.push(`\\x${hex(codePoint, 2)}`, `\\X${hex(codePoint, 2).toUpperCase()}`);
    if (codePoint <= 0xff) spellings.push(`\\${codePoint.toString(8).padStart(3, '0')}`);
    if (character === '"' || character === '\\') spellings.push(`\\${character}`);
    else if (random.chance(0.7)) spellings.push(character, character, character, character);
    literal += random.pick(spellings);
  }
  return `${literal}"`;
}

/** Another spelling of `tree`: random white space where it is allowed, NOT or -, escapes, optional parentheses. */
function spell(tree: Tree, random: Random): string {
  const space = (least: number) => {
    let text = '';
    for (let n = random.int(least, 2); n > 0; n--) text += random.pick([' ', ' ', '\t', '\n', '\r', '\f', '\v']);
    return text;
  };
  const key = (name: string) => (BARE_KEY.test(name) && random.chance(0.5) ? name : quote(name, random));
  const parenthesised = (text: string) => `(${space(0)}${text}${space(0)})`;
  const isRestriction = (node: Tree) => node.kind !== 'not' && node.kind !== 'and' && node.kind !== 'or';
  switch (tree.kind) {
    case 'has':
      return `attributes${space(0)}:${space(0)}${key(tree.key)}`;
    case 'equals':
    case 'notEquals': {
      const operator = tree.kind === 'equals' ? '=' : '!=';
      return `attributes.${key(tree.key)}${space(0)}${operator}${space(0)}${quote(tree.value, random)}`;
    }
    case 'hasPrefix':
      return `hasPrefix(${space(0)}attributes.${key(tree.key)}${space(0)},${space(0)}${quote(tree.prefix, random)}${space(0)})`;
    case 'not': {
      const operand = spell(tree.operand, random);
      const simple = isRestriction(tree.operand) && random.chance(0.5) ? operand : parenthesised(operand);
      return random.chance(0.5) ? `-${simple}` : `NOT${space(1)}${simple}`;
    }
    case 'and':
    case 'or':
      return tree.operands
        .map((operand) => {
          const text = spell(operand, random);
          return operand.kind !== 'and' && operand.kind !== 'or' && random.chance(0.5) ? text : parenthesised(text);
        })
        .join(`${space(1)}${tree.kind.toUpperCase()}${space(1)}`);
  }
}

const fitsTheLimit = (text: string) => Buffer.byteLength(text) <= MAX_FILTER_BYTES;

const SAMPLE_ATTRIBUTES: (Attributes | undefined)[] = [undefined, {}, { a: 'x', 'my key': '', みんな: 'xy' }];

/**
 * 'refused' when parsing `text` throws INVALID_ARGUMENT, 'parsed' when it gives a filter that can
 * be evaluated; anything else thrown is thrown on, so that fast-check reports it.
 */
function parseOrRefuse(text: string): 'parsed' | 'refused' {
  let filter: ReturnType<typeof parseFilter>;
  try {
    filter = parseFilter(text);
  } catch (error) {
    if (
      error instanceof ApiError &&
      error.status === 'INVALID_ARGUMENT' &&
      error.message.startsWith('Invalid filter expression: ')
    ) {
      return 'refused';
    }
    throw error;
  }
  for (const attributes of SAMPLE_ATTRIBUTES) filter?.matches(attributes);
  return 'parsed';
}

t.test('a printed tree parses to a filter that matches what the tree means', async (t) => {
  let parsed = 0;
  let matched = 0;
  let evaluated = 0;
  fc.assert(
    fc.property(tree, attributeSets, (tree, attributeSets) => {
      const text = print(tree);
      if (!fitsTheLimit(text)) return parseOrRefuse(text) === 'refused';
      const filter = parseFilter(text)!;
      parsed++;
      for (const attributes of [undefined, {}, ...attributeSets]) {
        const matches = filter.matches(attributes);
        if (matches !== reference(tree, attributes ?? {})) return false;
        evaluated++;
        if (matches) matched++;
      }
      return true;
    }),
    { numRuns: 2000 },
  );
  t.ok(parsed > 1500, `${parsed} of 2000 printed trees fit in ${MAX_FILTER_BYTES} bytes`);
  t.ok(matched > evaluated * 0.2 && matched < evaluated * 0.8, `${matched} of ${evaluated} evaluations matched`);
});

t.test('every spelling of a tree parses to a filter that matches the same', async (t) => {
  let compared = 0;
  fc.assert(
    fc.property(tree, attributeSets, fc.noBias(fc.nat()), (tree, attributeSets, seed) => {
      const random = seededRandom(seed);
      const plain = print(tree);
      const spelled = spell(tree, random);
      if (!fitsTheLimit(plain) || !fitsTheLimit(spelled)) return true;
      compared++;
      const plainFilter = parseFilter(plain)!;
      const spelledFilter = parseFilter(spelled)!;
      return [undefined, {}, ...attributeSets].every(
        (attributes) => spelledFilter.matches(attributes) === plainFilter.matches(attributes),
      );
    }),
    { numRuns: 2000 },
  );
  t.ok(compared > 1000, `${compared} of 2000 spellings fit in ${MAX_FILTER_BYTES} bytes`);
});

// Pieces of the language and of near misses, so that random text gets past the first token.
const FRAGMENTS = [
  'attributes',
  'hasPrefix',
  'hasSuffix',
  'data',
  'NOT',
  'AND',
  'OR',
  'and',
  '(',
  ')',
  ':',
  '.',
  ',',
  '=',
  '!=',
  '!',
  '<',
  '-',
  ' ',
  '\t',
  '"',
  "'",
  '\\',
  '"a"',
  'a',
  'k-1',
  '7',
  '\\u00e9',
  '\\x4',
  '\\377',
  'み',
  '😀',
  '\ud800',
];

t.test('no text makes the parser throw anything but INVALID_ARGUMENT', async (t) => {
  const texts = {
    'any characters': fc.string({ unit: 'binary', maxLength: 300 }),
    'ASCII characters': fc.string({ unit: 'binary-ascii', maxLength: 60 }),
    'pieces of filters': fc.string({ unit: fc.constantFrom(...FRAGMENTS), maxLength: 40 }),
  };
  for (const [name, text] of Object.entries(texts)) {
    fc.assert(
      fc.property(text, (text) => void parseOrRefuse(text)),
      { numRuns: 3000 },
    );
    t.pass(`${name}: parsed or refused as INVALID_ARGUMENT`);
  }
});

/** `text` with a few random edits: characters deleted, fragments inserted, a piece repeated. */
function mutate(text: string, random: Random): string {
  let mutated = text;
  for (let edits = random.int(1, 3); edits > 0; edits--) {
    const at = random.int(0, mutated.length);
    const to = Math.min(mutated.length, at + random.int(1, 4));
    switch (random.int(0, 3)) {
      case 0:
        mutated = mutated.slice(0, at) + mutated.slice(to);
        break;
      case 1:
        mutated = mutated.slice(0, at) + random.pick(FRAGMENTS) + mutated.slice(at);
        break;
      case 2:
        mutated = mutated.slice(0, to) + mutated.slice(at, to) + mutated.slice(to);
        break;
      default:
        mutated = mutated.slice(0, at);
    }
  }
  return mutated;
}

t.test('a mutated filter parses or is refused as INVALID_ARGUMENT', async (t) => {
  let refused = 0;
  fc.assert(
    fc.property(tree, fc.noBias(fc.nat()), (tree, seed) => {
      const random = seededRandom(seed);
      const text = mutate(random.chance(0.5) ? print(tree) : spell(tree, random), random);
      if (parseOrRefuse(text) === 'refused') refused++;
    }),
    { numRuns: 3000 },
  );
  t.ok(refused > 1000 && refused < 2900, `${refused} of 3000 mutated filters refused`);
});
