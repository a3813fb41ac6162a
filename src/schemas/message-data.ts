/**
 * Message data travels base64-encoded in JSON (proto3 JSON bytes: the standard or the URL-safe
 * alphabet, with or without padding). A publish's data strings are all decoded into one Buffer,
 * each message's data a view of it: one allocation per request, and each string decoded once.
 */

/** The length of the bytes a base64 string of this shape decodes to; undefined when no base64 has it. */
function decodedLength(base64: string): number | undefined {
  const padding = base64.endsWith('==') ? 2 : base64.endsWith('=') ? 1 : 0;
  const length = base64.length - padding;
  if (length % 4 === 1 || (padding > 0 && base64.length % 4 !== 0)) return undefined;
  return Math.floor((length * 3) / 4);
}

/**
 * Decodes the data of every message (absent: empty). Node's decoder reads both alphabets and
 * skips anything else, so a string is well-formed exactly when it decodes to the length its shape
 * implies. Returns the index of the first message whose data is not base64, or the bytes.
 */
export function decodeMessageData(data: (string | undefined)[]): Buffer[] | { invalidData: number } {
  const lengths: number[] = [];
  let total = 0;
  for (let i = 0; i < data.length; i++) {
    const length = decodedLength(data[i] ?? '');
    if (length === undefined) return { invalidData: i };
    lengths.push(length);
    total += length;
  }
  const bytes = Buffer.allocUnsafe(total);
  const decoded: Buffer[] = [];
  let offset = 0;
  for (let i = 0; i < data.length; i++) {
    const length = lengths[i];
    if (length > 0 && bytes.write(data[i]!, offset, length, 'base64') !== length) return { invalidData: i };
    decoded.push(bytes.subarray(offset, offset + length));
    offset += length;
  }
  return decoded;
}
