import { Command } from 'ioredis';

/**
 * A Redis command that ends in many large binary arguments (a publish's EVALSHA with 100
 * message bodies), written into one buffer in one pass.
 *
 * ioredis writes each Buffer argument as three pieces (length line, bytes, CRLF) and each string
 * as one, measuring each piece twice and writing each with its own native call, then copies the
 * lot into one buffer: ~120 µs for 100 values of 1 KB, about a microsecond per published
 * message. Here the leading string arguments are one string written with one call, and the
 * binary ones arrive already framed in one buffer (BulkStrings), copied once.
 *
 * Overriding Command.toWritable is how ioredis sends its own scripts (Script.ts). The Command's
 * own `args` get only `routing`, the arguments ioredis reads keys from (key-slot routing on
 * Redis Cluster): copying hundreds of arguments there cost as much again as writing them here.
 * ioredis's `keyPrefix` option is not applied: the broker never sets it (keys.ts adds
 * KEY_PREFIX to every key name itself).
 */
export class BinaryArgsCommand extends Command {
  readonly #payload: Buffer;

  constructor(name: string, args: string[], trailing: BulkStrings, routing: string[]) {
    super(name, routing);
    this.#payload = encodeCommand(name, args, trailing);
  }

  override toWritable(): Buffer {
    return this.#payload;
  }
}

/**
 * The RESP array of bulk strings for `name args... trailing...`. When the leading part fits in
 * the room `trailing` keeps in front of its strings, it is written there and the command is a
 * view of that buffer: the strings are not copied at all. Several commands made from the same
 * BulkStrings (retries) share that room, so each must have been written out before the next is
 * made: true of every caller, who makes the next only after the last one's reply (and never
 * after a command that timed out, which ioredis might still be sending).
 */
export function encodeCommand(name: string, args: string[], trailing: BulkStrings): Buffer {
  let text = `*${args.length + 1 + trailing.bulkCount}\r\n$${Buffer.byteLength(name)}\r\n${name}\r\n`;
  for (const arg of args) text += `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`;
  const inPlace = trailing.withLeading(text);
  if (inPlace) return inPlace;
  const textBytes = Buffer.byteLength(text);
  const out = Buffer.allocUnsafe(textBytes + trailing.bytes.length);
  out.write(text, 0);
  trailing.bytes.copy(out, textBytes);
  return out;
}

const DOLLAR = 0x24;
const CR = 0x0d;
const LF = 0x0a;
const ZERO = 0x30;

/**
 * Bulk strings laid out back to back in one buffer as RESP writes them (`$<length>\r\n<bytes>\r\n`
 * each), to end a command: each string's bytes are written in place by whoever produces them (a
 * publish decodes each message's base64 straight in here), and the command copies them all at
 * once, instead of one allocation and one copy per string.
 *
 * With `indexWidth`, each string is preceded by its index, zero-padded to that many digits, as a
 * bulk string of its own: the field/value pairs `000 s0 001 s1 ...` of an HSET (how publish
 * stores a batch's bodies, keys.ts).
 */
export class BulkStrings {
  /** The framed strings: string i's bytes are at starts[i] .. starts[i] + lengths[i]. */
  readonly bytes: Buffer;
  readonly starts: number[] = [];
  /** How many bulk strings `bytes` holds (twice the strings with index fields). */
  readonly bulkCount: number;
  /** The whole allocation: LEADING_ROOM bytes for a command's leading part, then `bytes`. */
  readonly #allocation: Buffer;

  constructor(
    readonly lengths: number[],
    { indexWidth }: { indexWidth?: number } = {},
  ) {
    const indexFields = indexWidth !== undefined;
    let room = 0;
    for (const length of lengths) room += length + 16 + 5 + (indexFields ? Math.max(indexWidth, 16) + 16 + 5 : 0);
    // Written in place in the allocation, then one view of it (a view costs about as much as
    // the rest of a small one's making).
    const allocation = Buffer.allocUnsafe(LEADING_ROOM + room);
    let used = LEADING_ROOM;
    for (let index = 0; index < lengths.length; index++) {
      if (indexFields) {
        // The index, zero-padded, written byte by byte (no string, no native call per field).
        const digits = digitCount(index);
        used = writeBulkHeader(allocation, used, Math.max(indexWidth, digits));
        for (let zeros = indexWidth - digits; zeros > 0; zeros--) allocation[used++] = ZERO;
        used = writeDigits(allocation, used, index);
        allocation[used++] = CR;
        allocation[used++] = LF;
      }
      used = writeBulkHeader(allocation, used, lengths[index]);
      this.starts.push(used - LEADING_ROOM);
      used += lengths[index];
      allocation[used++] = CR;
      allocation[used++] = LF;
    }
    this.#allocation = allocation;
    this.bytes = allocation.subarray(LEADING_ROOM, used);
    this.bulkCount = lengths.length * (indexFields ? 2 : 1);
  }

  /**
   * The strings of several, in order, in one: the same parts when there is one, else a copy. None
   * may have index fields.
   */
  static joined(parts: readonly BulkStrings[]): BulkStrings {
    if (parts.length === 1) return parts[0];
    const joined = new BulkStrings(parts.flatMap((part) => part.lengths));
    let at = 0;
    for (const part of parts) at += part.bytes.copy(joined.bytes, at);
    return joined;
  }

  /** How many strings (not counting index fields). */
  get count(): number {
    return this.lengths.length;
  }

  /** String i's bytes (a view, not a copy). */
  at(index: number): Buffer {
    return this.bytes.subarray(this.starts[index], this.starts[index] + this.lengths[index]);
  }

  /** `leading` followed by the strings, without a copy of them: undefined when it does not fit the room. */
  withLeading(leading: string): Buffer | undefined {
    const length = Buffer.byteLength(leading);
    if (length > LEADING_ROOM) return undefined;
    const start = LEADING_ROOM - length;
    this.#allocation.write(leading, start);
    return this.#allocation.subarray(start, LEADING_ROOM + this.bytes.length);
  }
}

/**
 * Room kept in front of bulk strings for the command that sends them: enough for a staged
 * publish's `HSET <staging key>` with a long key prefix (the EVALSHA of a small publish, whose
 * keys grow with its subscriptions, may not fit: it is copied, which is cheap for small ones).
 */
const LEADING_ROOM = 512;

function digitCount(value: number): number {
  let digits = 1;
  for (let rest = value; rest >= 10; rest = Math.floor(rest / 10)) digits++;
  return digits;
}

/** Writes a bulk string's header (`$<length>\r\n`) at `offset`; returns the offset after it. */
function writeBulkHeader(bytes: Buffer, offset: number, length: number): number {
  bytes[offset] = DOLLAR;
  const end = writeDigits(bytes, offset + 1, length);
  bytes[end] = CR;
  bytes[end + 1] = LF;
  return end + 2;
}

/** Writes a non-negative integer's decimal digits at `offset`; returns the offset after them. */
function writeDigits(bytes: Buffer, offset: number, value: number): number {
  const digits = digitCount(value);
  for (let i = offset + digits - 1, rest = value; i >= offset; i--, rest = Math.floor(rest / 10)) {
    bytes[i] = ZERO + (rest % 10);
  }
  return offset + digits;
}
