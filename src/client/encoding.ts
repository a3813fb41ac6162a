// Byte helpers that run in browsers and in Node 20 alike: no Buffer, only web globals
// (TextEncoder, TextDecoder, btoa, atob).

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** UTF-8 bytes of a string. */
export const utf8Encode = (text: string): Uint8Array => encoder.encode(text);

/** The string that UTF-8 bytes spell (invalid sequences become U+FFFD). */
export const utf8Decode = (bytes: Uint8Array): string => decoder.decode(bytes);

/** Standard base64 (the proto3 JSON encoding of `bytes`). */
export function toBase64(bytes: Uint8Array): string {
  let binary = '';
  const CHUNK = 0x8000; // keeps String.fromCharCode's argument list small
  for (let i = 0; i < bytes.length; i += CHUNK) {
    binary += String.fromCharCode.apply(null, bytes.subarray(i, i + CHUNK) as unknown as number[]);
  }
  return btoa(binary);
}

/** Decodes standard or URL-safe base64, padded or not. */
export function fromBase64(text: string): Uint8Array {
  let normalized = text.replace(/-/g, '+').replace(/_/g, '/');
  while (normalized.length % 4 !== 0) normalized += '=';
  const binary = atob(normalized);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  return bytes;
}

/** A random identifier (32 hex digits). crypto.getRandomValues works in insecure browser contexts too. */
export function randomId(): string {
  const bytes = new Uint8Array(16);
  globalThis.crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('');
}
