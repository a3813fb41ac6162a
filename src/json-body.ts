/**
 * Large JSON request bodies without one large string.
 *
 * V8 keeps a string over 128 KB in its large-object space, and making one costs far more than
 * its bytes: measured here, 116 µs to turn a 137 KB body into a string, against 6 µs for the
 * same bytes as eight smaller strings. A publish of 100 messages of 1 KB is such a body, almost
 * all of it base64 `data`. So a large body has each `"data":"…"` string lifted out as a string of
 * its own; the rest of the text (the skeleton, with a placeholder where each lifted string was)
 * is parsed as JSON, and every lifted string is put back where its placeholder landed.
 *
 * Only the publish route lifts (a route config flag in app.ts), because its `data` strings are
 * checked again anyway: each must decode as base64, which no raw control character does. So a
 * lifted string is not searched for raw control characters here (that search was a tenth of a
 * large publish's CPU): a publish that fails is looked at again (refusedByJsonParse), and one
 * whose lifted data holds a raw control character gets the error of a body that is not JSON.
 *
 * The result is exactly JSON.parse of the whole text whenever liftDataStrings and putBack both
 * succeed and no lifted string holds a raw control character; otherwise the caller parses the
 * whole text. Why:
 *   - A lifted string runs from `"data":"` to the next `"` and holds no backslash (no escapes),
 *     so, but for raw control characters, it is valid string content.
 *   - The quote after `data` and the one after the colon are unescaped (a letter and a colon
 *     precede them), and in JSON two unescaped quotes around a colon can only close a key and
 *     open its value. The quote before `data` may be escaped (a key that ends in `\"data`): then
 *     the lifted string is still that key's value, and putBack sends the body down the ordinary
 *     path because the key is not "data".
 *   - putBack requires every placeholder to be the whole value of the "data" key of a message
 *     (an object in the top-level "messages" array), exactly once, so a duplicate key, a
 *     placeholder spelled in the body itself, or a "data" string anywhere else (say, an
 *     attribute named data, which no base64 decode would check) also takes the ordinary path.
 */

/** Bodies up to this size are parsed whole (their text is a regular string). */
export const LIFT_ABOVE_BYTES = 128 * 1024;

const DATA_PREFIX = Buffer.from('"data":"');
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
// biome-ignore lint/suspicious/noControlCharactersInRegex: JSON forbids raw control characters in strings: this finds them
const CONTROL_CHARACTER = /[\u0000-\u001f]/;

/**
 * Whether JSON.parse would have refused a body that the lifted path parsed: when one of the
 * strings it lifted holds a raw control character. Lifted strings hold no escapes, so any
 * control character in them was raw in the body.
 */
export function refusedByJsonParse(lifted: string[]): boolean {
  return lifted.some((string) => CONTROL_CHARACTER.test(string));
}

/**
 * Placeholders are `\u0000<index>`: JSON text that parses to NUL followed by the index. JSON can
 * spell NUL no other way (a raw one is invalid), and a body with any `\u` escape of its own is
 * not lifted: so every NUL in the parsed skeleton is a placeholder's, and the skeleton's only
 * escapes are placeholders (a key spelled with escapes, say `\u005f_proto__`, cannot hide in it).
 */
const UNICODE_ESCAPE = '\\u';
const PLACEHOLDER_ESCAPE = '\\u0000';
const PLACEHOLDER_MARK = '\u0000';

export interface LiftedBody {
  /** The body text with each lifted string replaced by its placeholder. */
  skeleton: string;
  /** The lifted strings, in body order. */
  strings: string[];
}

/**
 * Lifts every `"data":"…"` string out of a body (decoded as `encoding`), or returns undefined when
 * there is none, one of them has an escape or no closing quote, or the rest of the body has a
 * `\u` escape. A lifted string may hold raw control characters (see the top of this file).
 */
export function liftDataStrings(bytes: Buffer, encoding: 'latin1' | 'utf8'): LiftedBody | undefined {
  const pieces: string[] = [];
  const strings: string[] = [];
  let copiedUpTo = 0;
  // The first backslash at or after the current string (Infinity: none left): one scan in all.
  let backslash = -1;
  for (let prefix = bytes.indexOf(DATA_PREFIX); prefix !== -1; prefix = bytes.indexOf(DATA_PREFIX, copiedUpTo)) {
    const start = prefix + DATA_PREFIX.length;
    const end = bytes.indexOf(QUOTE, start);
    if (end === -1) return undefined;
    if (backslash < start) {
      const found = bytes.indexOf(BACKSLASH, start);
      backslash = found === -1 ? Infinity : found;
    }
    if (backslash < end) return undefined;
    const piece = bytes.toString(encoding, copiedUpTo, start);
    if (piece.includes(UNICODE_ESCAPE)) return undefined;
    const string = bytes.toString(encoding, start, end);
    pieces.push(piece, `${PLACEHOLDER_ESCAPE}${strings.length}`);
    strings.push(string);
    copiedUpTo = end;
  }
  if (strings.length === 0) return undefined;
  const rest = bytes.toString(encoding, copiedUpTo);
  if (rest.includes(UNICODE_ESCAPE)) return undefined;
  pieces.push(rest);
  return { skeleton: pieces.join(''), strings };
}

/**
 * Puts the lifted strings back into the parsed skeleton, in place. False (the parsed value is then
 * unusable) unless every string that starts like a placeholder is the whole value of the "data"
 * key of a message (an object in the top-level "messages" array), and together they name every
 * lifted string exactly once: then none of them came from the body itself, each sits where its
 * string was, and each is a message's data, which publish decodes as base64.
 */
export function putBack(parsed: unknown, strings: string[]): boolean {
  const topMessages =
    typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>).messages : undefined;
  const messages = new Set(Array.isArray(topMessages) ? topMessages : []);
  const placed = new Array<boolean>(strings.length).fill(false);
  let count = 0;
  const claim = (text: string): number | undefined => {
    const index = placeholderIndex(text, strings.length);
    if (index === undefined || placed[index]) return undefined;
    placed[index] = true;
    count++;
    return index;
  };
  // An explicit stack: a deeply nested body must not overflow the call stack.
  const pending: unknown[] = [parsed];
  while (pending.length > 0) {
    const value = pending.pop();
    if (Array.isArray(value)) {
      for (const item of value) {
        if (typeof item === 'string' && item.startsWith(PLACEHOLDER_MARK)) return false;
        if (typeof item === 'object' && item !== null) pending.push(item);
      }
    } else if (typeof value === 'object' && value !== null) {
      const record = value as Record<string, unknown>;
      for (const key of Object.keys(record)) {
        const item = record[key];
        if (typeof item === 'string' && item.startsWith(PLACEHOLDER_MARK)) {
          const index = key === 'data' && messages.has(record) ? claim(item) : undefined;
          if (index === undefined) return false;
          record[key] = strings[index];
        } else if (typeof item === 'object' && item !== null) {
          pending.push(item);
        }
      }
    }
  }
  return count === strings.length;
}

function placeholderIndex(text: string, count: number): number | undefined {
  const digits = text.slice(PLACEHOLDER_MARK.length);
  if (!/^(0|[1-9]\d*)$/.test(digits)) return undefined;
  const index = Number(digits);
  return index < count ? index : undefined;
}

const OPEN_BRACKET = 0x5b;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACKET = 0x5d;
const CLOSE_BRACE = 0x7d;

/**
 * Whether JSON text nests arrays and objects deeper than `maxDepth`, read without parsing it:
 * JSON.parse takes seconds over millions of nested arrays (a 16 MiB publish holds 8 million), so
 * a large body is measured before it is parsed. Brackets inside strings do not count.
 */
export function nestsDeeperThan(text: string, maxDepth: number): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      for (i++; i < text.length && text.charCodeAt(i) !== QUOTE; i++) if (text.charCodeAt(i) === BACKSLASH) i++;
    } else if (c === OPEN_BRACKET || c === OPEN_BRACE) {
      if (++depth > maxDepth) return true;
    } else if (c === CLOSE_BRACKET || c === CLOSE_BRACE) depth--;
  }
  return false;
}
