/**
 * Subscription filters (https://cloud.google.com/pubsub/docs/subscription-message-filter): the
 * subset of AIP-160 (https://google.aip.dev/160) that Pub/Sub accepts, as Google's own fake
 * (pstest, over go.einride.tech/aip/filtering) implements it. A filter is parsed once, when its
 * subscription is created, and evaluated against the attributes of every message published to the
 * topic, so evaluation walks a small tree and allocates nothing.
 *
 * Grammar. `ws` is one or more of space, tab, LF, VT, FF, CR (other Unicode spaces, which some
 * AIP-160 implementations accept too, are refused); where a rule shows no `ws`, none is allowed.
 *
 *   filter      = [ws] expression [ws]                  (the empty string is no filter at all)
 *   expression  = term {ws "AND" ws term} | term {ws "OR" ws term}
 *   term        = ["NOT" ws | "-"] simple
 *   simple      = "(" [ws] expression [ws] ")" | restriction
 *   restriction = "attributes" [ws] ":" [ws] key                      key present
 *               | "attributes" "." key [ws] ("=" | "!=") [ws] string  key present with (or not with) that value
 *               | "hasPrefix(" [ws] "attributes" "." key [ws] "," [ws] string [ws] ")"
 *   key         = name | string
 *   name        = (letter | digit | "_") {letter | digit | "_" | "-"}     ASCII only
 *   string      = '"' {any character but '"' and '\' | escape} '"'
 *
 * - One expression uses AND or OR, not both: Pub/Sub documents that mixing them needs
 *   parentheses, and refuses `a AND b OR c` (AIP-160 alone would read it as `a AND (b OR c)`).
 * - Keywords are upper case; `and` is a name, and a name that is no key is an error.
 * - Pub/Sub lets keys of letters, digits, `-` and `_` go unquoted. A name may not start with `-`,
 *   which AIP-160 reads as negation (`-attributes:k`); a name starting with a digit is a key, as
 *   AIP-160 accepts numbers as fields. Keywords are keys too in key position (`attributes:AND`), as
 *   AIP-160 accepts keywords as fields. Any other key is a string: `attributes:"my key"`.
 * - Like AIP-160, white space is allowed around `:`, `=`, `!=` and in parentheses but not around
 *   `.`, NOT and AND/OR need it on both sides (`NOT(a)` is refused, `-(a)` is not), and a term
 *   simply followed by another (AIP-160's implicit AND) is refused.
 * - Escapes are AIP-160's (CEL's): \a \b \f \n \r \t \v \\ \" \' \` \?, \xHH and \XHH, octal \NNN
 *   (first digit 0-3), \uXXXX and \UXXXXXXXX. As in AIP-160 string literals, \xHH and \NNN denote
 *   the code point U+00HH, not a byte (`"\303\251"` is "Ã©", `"\u00e9"` is "é"). Code points that
 *   are surrogates or beyond U+10FFFF are refused.
 *
 * Errors are INVALID_ARGUMENT, saying what is wrong and where: positions count characters from 1.
 */

import { type ApiError, invalidArgument } from '../errors.ts';

/** A parsed filter: `text` is what it was parsed from, `matches` tells whether a message passes. */
export interface SubscriptionFilter {
  readonly text: string;
  matches(attributes: Record<string, string> | undefined): boolean;
}

/** Pub/Sub's limit on Subscription.filter, in bytes of UTF-8. */
const MAX_FILTER_BYTES = 256;

type FilterNode =
  | { readonly kind: 'has'; readonly key: string }
  | { readonly kind: 'equals' | 'notEquals'; readonly key: string; readonly value: string }
  | { readonly kind: 'hasPrefix'; readonly key: string; readonly prefix: string }
  | { readonly kind: 'not'; readonly operand: FilterNode }
  | { readonly kind: 'and' | 'or'; readonly operands: readonly FilterNode[] };

const NO_ATTRIBUTES: Record<string, string> = Object.freeze({});

/**
 * The filter `text` stands for, or undefined when it is empty (every message matches).
 * Throws an ApiError INVALID_ARGUMENT when `text` is no filter Pub/Sub would accept.
 */
export function parseFilter(text: string): SubscriptionFilter | undefined {
  if (text === '') return undefined;
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes > MAX_FILTER_BYTES) {
    throw invalidArgument(
      `Invalid filter expression: it is ${bytes} bytes long; at most ${MAX_FILTER_BYTES} bytes are allowed.`,
    );
  }
  const expression = new Parser(text, tokenize(text)).parseFilter();
  return { text, matches: (attributes) => evaluate(expression, attributes ?? NO_ATTRIBUTES) };
}

function evaluate(node: FilterNode, attributes: Record<string, string>): boolean {
  switch (node.kind) {
    case 'has':
      return Object.hasOwn(attributes, node.key);
    case 'equals':
      return hasValue(attributes, node.key, node.value);
    case 'notEquals':
      return !hasValue(attributes, node.key, node.value);
    case 'hasPrefix':
      return Object.hasOwn(attributes, node.key) && attributes[node.key].startsWith(node.prefix);
    case 'not':
      return !evaluate(node.operand, attributes);
    case 'and':
      for (let i = 0; i < node.operands.length; i++) if (!evaluate(node.operands[i], attributes)) return false;
      return true;
    case 'or':
      for (let i = 0; i < node.operands.length; i++) if (evaluate(node.operands[i], attributes)) return true;
      return false;
  }
}

function hasValue(attributes: Record<string, string>, key: string, value: string): boolean {
  return Object.hasOwn(attributes, key) && attributes[key] === value;
}

type TokenKind = 'name' | 'string' | 'space' | '(' | ')' | '.' | ':' | ',' | '=' | '!=' | '-' | 'end';

interface Token {
  readonly kind: TokenKind;
  /** Index of the token's first character in the filter text. */
  readonly start: number;
  /** A name as written, a string's value with its escapes resolved; empty for the other kinds. */
  readonly text: string;
}

const PUNCTUATION: ReadonlySet<string> = new Set(['(', ')', '.', ':', ',', '=', '-']);

/** Where `index` is in `text` for a reader: characters (code points) counted from 1. */
const positionOf = (text: string, index: number) => Array.from(text.slice(0, index)).length + 1;

function filterError(text: string, index: number, message: string): ApiError {
  return invalidArgument(`Invalid filter expression: ${message} at position ${positionOf(text, index)}.`);
}

const isSpace = (char: string) => char === ' ' || (char >= '\t' && char <= '\r');
const isNameStart = (char: string) =>
  (char >= 'a' && char <= 'z') || (char >= 'A' && char <= 'Z') || (char >= '0' && char <= '9') || char === '_';
const isNamePart = (char: string) => isNameStart(char) || char === '-';

/** The filter's tokens, white space included (it is significant), ending with an `end` token. */
function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  let index = 0;
  while (index < text.length) {
    const start = index;
    const char = text[index];
    if (isSpace(char)) {
      while (index < text.length && isSpace(text[index])) index++;
      tokens.push({ kind: 'space', start, text: '' });
    } else if (isNameStart(char)) {
      while (index < text.length && isNamePart(text[index])) index++;
      tokens.push({ kind: 'name', start, text: text.slice(start, index) });
    } else if (char === '"') {
      const literal = readString(text, start);
      tokens.push({ kind: 'string', start, text: literal.value });
      index = literal.end;
    } else if (char === '!' && text[index + 1] === '=') {
      tokens.push({ kind: '!=', start, text: '' });
      index += 2;
    } else if (PUNCTUATION.has(char)) {
      tokens.push({ kind: char as TokenKind, start, text: '' });
      index++;
    } else {
      throw filterError(text, start, unexpectedCharacter(text, start));
    }
  }
  tokens.push({ kind: 'end', start: text.length, text: '' });
  return tokens;
}

function unexpectedCharacter(text: string, index: number): string {
  const char = String.fromCodePoint(text.codePointAt(index)!);
  if (char === '<' || char === '>') {
    const operator = text[index + 1] === '=' ? `${char}=` : char;
    return `unsupported operator '${operator}' (attributes are compared with =, != and :)`;
  }
  if (char === '!') return "'!' not followed by '='";
  if (char === "'") return 'strings are written in double quotes, found "\'"';
  return `unexpected character ${JSON.stringify(char)}`;
}

const SIMPLE_ESCAPES: ReadonlyMap<string, string> = new Map([
  ['a', '\x07'],
  ['b', '\b'],
  ['f', '\f'],
  ['n', '\n'],
  ['r', '\r'],
  ['t', '\t'],
  ['v', '\v'],
  ['\\', '\\'],
  ['"', '"'],
  ["'", "'"],
  ['`', '`'],
  ['?', '?'],
]);

/** How many hexadecimal digits follow each escape letter that takes them. */
const HEX_ESCAPE_DIGITS: ReadonlyMap<string, number> = new Map([
  ['x', 2],
  ['X', 2],
  ['u', 4],
  ['U', 8],
]);

/** The string literal whose opening quote is at `start`: its value, and the index just after it. */
function readString(text: string, start: number): { value: string; end: number } {
  let value = '';
  let index = start + 1;
  for (;;) {
    if (index >= text.length) throw filterError(text, start, 'unterminated string');
    const char = text[index];
    if (char === '"') return { value, end: index + 1 };
    if (char === '\\') {
      const escaped = readEscape(text, start, index);
      value += escaped.value;
      index += escaped.length;
      continue;
    }
    const codePoint = text.codePointAt(index)!;
    if (codePoint >= 0xd800 && codePoint <= 0xdfff) throw filterError(text, index, 'unpaired surrogate');
    const character = String.fromCodePoint(codePoint);
    value += character;
    index += character.length;
  }
}

/** The escape sequence at `index` (a backslash) in the string opened at `stringStart`. */
function readEscape(text: string, stringStart: number, index: number): { value: string; length: number } {
  if (index + 1 >= text.length) throw filterError(text, stringStart, 'unterminated string');
  const letter = text[index + 1];
  const simple = SIMPLE_ESCAPES.get(letter);
  if (simple !== undefined) return { value: simple, length: 2 };
  const hexDigits = HEX_ESCAPE_DIGITS.get(letter);
  const wanted = hexDigits !== undefined ? 2 + hexDigits : letter >= '0' && letter <= '7' ? 4 : 2;
  // Cut short at the closing quote, so that the error quotes no more than the sequence.
  let length = 2;
  while (length < wanted && index + length < text.length && text[index + length] !== '"') length++;
  const sequence = text.slice(index, index + length);
  const codePoint = hexDigits === undefined ? octalValue(sequence.slice(1)) : hexValue(sequence.slice(2), hexDigits);
  if (codePoint === undefined) throw filterError(text, index, `invalid escape sequence '${sequence}'`);
  if ((codePoint >= 0xd800 && codePoint <= 0xdfff) || codePoint > 0x10ffff) {
    throw filterError(text, index, `escape sequence '${sequence}' is not a Unicode character`);
  }
  return { value: String.fromCodePoint(codePoint), length };
}

function hexValue(digits: string, count: number): number | undefined {
  if (digits.length !== count) return undefined;
  let value = 0;
  for (const digit of digits) {
    const nibble = Number.parseInt(digit, 16);
    if (Number.isNaN(nibble)) return undefined;
    value = value * 16 + nibble;
  }
  return value;
}

/** \NNN: three octal digits, the first 0-3 so that the value stays below 256 (as in CEL). */
function octalValue(digits: string): number | undefined {
  if (digits.length !== 3 || digits[0] > '3') return undefined;
  let value = 0;
  for (const digit of digits) {
    if (digit < '0' || digit > '7') return undefined;
    value = value * 8 + Number(digit);
  }
  return value;
}

class Parser {
  private index = 0;

  constructor(
    private readonly text: string,
    private readonly tokens: readonly Token[],
  ) {}

  parseFilter(): FilterNode {
    this.skipSpace();
    const expression = this.expression();
    this.skipSpace();
    const token = this.peek();
    if (token.kind !== 'end') throw this.unexpected(token, 'AND, OR or the end of the filter');
    return expression;
  }

  private expression(): FilterNode {
    const operands = [this.term()];
    let operator: 'AND' | 'OR' | undefined;
    for (;;) {
      const afterTerm = this.index;
      const spaced = this.skipSpace();
      const token = this.peek();
      if (token.kind !== 'name' || (token.text !== 'AND' && token.text !== 'OR')) {
        this.index = afterTerm;
        break;
      }
      if (!spaced) throw this.error(token, `${token.text} must be preceded by white space`);
      // Pub/Sub's documented rule: an expression that mixes AND and OR must use parentheses.
      if (operator !== undefined && token.text !== operator) {
        throw this.error(token, 'AND and OR cannot be mixed without parentheses');
      }
      operator = token.text;
      this.index++;
      if (!this.skipSpace()) throw this.unexpected(this.peek(), `white space after ${operator}`);
      operands.push(this.term());
    }
    if (operator === undefined) return operands[0];
    return { kind: operator === 'AND' ? 'and' : 'or', operands };
  }

  private term(): FilterNode {
    const token = this.peek();
    if (token.kind === '-') {
      this.index++;
      return { kind: 'not', operand: this.simple("attributes, hasPrefix or '(' right after '-'") };
    }
    if (token.kind === 'name' && token.text === 'NOT') {
      this.index++;
      if (!this.skipSpace()) throw this.unexpected(this.peek(), 'white space after NOT');
      return { kind: 'not', operand: this.simple("attributes, hasPrefix or '(' after NOT") };
    }
    return this.simple("attributes, hasPrefix, NOT, '-' or '('");
  }

  /** A restriction or a parenthesised expression; `expected` says what could have been written instead. */
  private simple(expected: string): FilterNode {
    const token = this.next();
    if (token.kind === '(') {
      this.skipSpace();
      const expression = this.expression();
      this.skipSpace();
      const close = this.next();
      if (close.kind !== ')') {
        const opened = positionOf(this.text, token.start);
        throw this.unexpected(close, `AND, OR or ')' closing the '(' at position ${opened}`);
      }
      return expression;
    }
    if (token.kind === 'name' && token.text === 'attributes') return this.attributeRestriction();
    if (token.kind === 'name' && token.text === 'hasPrefix') return this.hasPrefix();
    if (token.kind === 'name' && !isKeyword(token.text.toUpperCase())) {
      if (this.peek().kind === '(') {
        throw this.error(token, `unknown function '${token.text}' (hasPrefix is the only function)`);
      }
      throw this.error(token, `unknown field '${token.text}' (only attributes can be filtered)`);
    }
    throw this.unexpected(token, expected);
  }

  /** After `attributes`: `:KEY`, or `.KEY` compared with = or !=. */
  private attributeRestriction(): FilterNode {
    const spaced = this.skipSpace();
    const token = this.peek();
    if (token.kind === ':') {
      this.index++;
      this.skipSpace();
      return { kind: 'has', key: this.key() };
    }
    if (token.kind !== '.') throw this.unexpected(token, "':' or '.' after attributes");
    if (spaced) throw this.error(token, "white space before '.'");
    const key = this.memberKey();
    this.skipSpace();
    const operator = this.next();
    if (operator.kind !== '=' && operator.kind !== '!=') {
      throw this.unexpected(operator, '= or != after attributes.KEY');
    }
    this.skipSpace();
    return { kind: operator.kind === '=' ? 'equals' : 'notEquals', key, value: this.value() };
  }

  /** After `hasPrefix`: `(attributes.KEY, "prefix")`. */
  private hasPrefix(): FilterNode {
    const arity = 'hasPrefix takes two arguments, attributes.KEY and a string';
    const open = this.next();
    if (open.kind !== '(') throw this.unexpected(open, "'(' right after hasPrefix");
    this.skipSpace();
    const subject = this.next();
    if (subject.kind === ')') throw this.error(subject, arity);
    if (subject.kind !== 'name' || subject.text !== 'attributes') throw this.unexpected(subject, 'attributes.KEY');
    if (this.peek().kind !== '.') throw this.unexpected(this.peek(), "'.' after attributes");
    const key = this.memberKey();
    this.skipSpace();
    const comma = this.next();
    if (comma.kind === ')') throw this.error(comma, arity);
    if (comma.kind !== ',') throw this.unexpected(comma, "','");
    this.skipSpace();
    const prefix = this.value();
    this.skipSpace();
    const close = this.next();
    if (close.kind === ',') throw this.error(close, arity);
    if (close.kind !== ')') throw this.unexpected(close, "')'");
    return { kind: 'hasPrefix', key, prefix };
  }

  /** `.KEY`, with no white space on either side of the dot. */
  private memberKey(): string {
    this.index++;
    if (this.peek().kind === 'space') throw this.error(this.peek(), "white space after '.'");
    return this.key();
  }

  private key(): string {
    const token = this.next();
    if (token.kind === 'name' || token.kind === 'string') return token.text;
    throw this.unexpected(token, 'an attribute key');
  }

  private value(): string {
    const token = this.next();
    if (token.kind === 'string') return token.text;
    throw this.unexpected(token, 'a double-quoted string');
  }

  /** Skips white space, telling whether there was any. */
  private skipSpace(): boolean {
    if (this.peek().kind !== 'space') return false;
    this.index++;
    return true;
  }

  private peek(): Token {
    return this.tokens[this.index];
  }

  /** The current token, consumed. Every caller throws when it is the `end` token. */
  private next(): Token {
    return this.tokens[this.index++];
  }

  private error(token: Token, message: string): ApiError {
    return filterError(this.text, token.start, message);
  }

  private unexpected(token: Token, expected: string): ApiError {
    return this.error(token, `expected ${expected}, found ${describe(token)}`);
  }
}

const isKeyword = (name: string) => name === 'AND' || name === 'OR' || name === 'NOT';

/** For a lower-case keyword, which is a name like any other. */
function keywordHint(name: string): string {
  const upper = name.toUpperCase();
  return upper !== name && isKeyword(upper) ? ` (operators are upper case: ${upper})` : '';
}

function describe(token: Token): string {
  switch (token.kind) {
    case 'end':
      return 'the end of the filter';
    case 'space':
      return 'white space';
    case 'string':
      return 'a string';
    case 'name':
      return `'${token.text}'${keywordHint(token.text)}`;
    default:
      return `'${token.kind}'`;
  }
}
