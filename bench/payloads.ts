/**
 * Pre-built request payloads, so the client spends its (shared) CPU on HTTP rather than on
 * generating random data. A pool of distinct random 1 KB messages is cycled through; every
 * message still carries its own 1024 random bytes, base64-encoded as on the wire.
 */
import { randomBytes } from 'node:crypto';

/** `count` distinct messages of exactly `bytes` random bytes each, base64-encoded. */
export function randomPayloads(count: number, bytes: number): string[] {
  return Array.from({ length: count }, () => randomBytes(bytes).toString('base64'));
}

/**
 * `bodies` distinct publish request bodies of `batch` messages each, as ready-to-send Buffers
 * (`{"messages":[{"data":"..."}, ...]}`); `attributesOf(i)` gives message i of a request its
 * attributes.
 */
export function publishBodies(
  bodies: number,
  batch: number,
  bytes: number,
  attributesOf?: (index: number) => Record<string, string>,
): Buffer[] {
  return Array.from({ length: bodies }, () => {
    const messages = randomPayloads(batch, bytes).map((data, i) =>
      attributesOf ? `{"data":"${data}","attributes":${JSON.stringify(attributesOf(i))}}` : `{"data":"${data}"}`,
    );
    return Buffer.from(`{"messages":[${messages.join(',')}]}`);
  });
}

/**
 * Publish bodies for ordered publishing: `batch` messages that all carry one ordering key
 * ("key-0000" ... with a fixed width). Built once as templates from distinct random messages;
 * `body()` copies a template and writes the key into it, so the client pays a memcpy, not
 * JSON building, per request.
 */
export class OrderedBodies {
  private readonly width: number;
  private readonly templates: { buffer: Buffer; offsets: number[] }[];

  constructor(
    count: number,
    readonly batch: number,
    bytes: number,
    readonly keys: number,
  ) {
    this.width = Math.max(4, String(keys - 1).length);
    const placeholder = '0'.repeat(this.width);
    this.templates = Array.from({ length: count }, () => {
      const offsets: number[] = [];
      let text = '{"messages":[';
      randomPayloads(batch, bytes).forEach((data, i) => {
        text += `${i > 0 ? ',' : ''}{"data":"${data}","orderingKey":"key-`;
        offsets.push(text.length); // ASCII only: string offsets are byte offsets
        text += `${placeholder}"}`;
      });
      return { buffer: Buffer.from(`${text}]}`), offsets };
    });
  }

  keyName(key: number): string {
    return `key-${String(key).padStart(this.width, '0')}`;
  }

  /** The body of request `index` with every message under ordering key number `key`. */
  body(index: number, key: number): Buffer {
    const template = this.templates[index % this.templates.length];
    const buffer = Buffer.from(template.buffer);
    const digits = String(key).padStart(this.width, '0');
    for (const offset of template.offsets) buffer.write(digits, offset, 'latin1');
    return buffer;
  }
}

/**
 * Publish bodies that carry their send time: the first 9 bytes of each message's data are the
 * client's performance.now() (float64 LE) and a zero byte, i.e. the first 12 base64
 * characters; the other 1015 bytes come from a pool of random messages.
 */
export class StampedBodies {
  private readonly tails: string[];
  private next = 0;

  constructor(pool: number, bytes: number) {
    if (bytes < 9) throw new Error('stamped messages need at least 9 bytes');
    this.tails = randomPayloads(pool, bytes).map((data) => data.slice(12));
  }

  body(batch: number, sentAtMs: number): Buffer {
    const stampBytes = Buffer.alloc(9);
    stampBytes.writeDoubleLE(sentAtMs, 0);
    const stamp = stampBytes.toString('base64');
    const messages: string[] = [];
    for (let i = 0; i < batch; i++) messages.push(`{"data":"${stamp}${this.tails[this.next++ % this.tails.length]}"}`);
    return Buffer.from(`{"messages":[${messages.join(',')}]}`);
  }

  /** The send time written into a message's (base64) data. */
  static sentAt(data: string): number {
    return Buffer.from(data.slice(0, 12), 'base64').readDoubleLE(0);
  }
}

/**
 * Publish bodies whose every message carries an idempotency key no other message of the run has
 * ("<run>-<request>-<message>"): `body(i)` builds request i by copying one of a few templates and
 * writing i's digits into its keys, so the client pays a memcpy, not JSON building, per request.
 */
export function idempotentBodies(batch: number, bytes: number, run: string): (request: number) => Buffer {
  const WIDTH = 10;
  const placeholder = '0'.repeat(WIDTH);
  const templates = Array.from({ length: 16 }, () => {
    const messages = randomPayloads(batch, bytes).map(
      (data, i) => `{"data":"${data}","idempotencyKey":"${run}-${placeholder}-${i}"}`,
    );
    const text = `{"messages":[${messages.join(',')}]}`;
    const offsets: number[] = [];
    for (let at = text.indexOf(`"${run}-`); at >= 0; at = text.indexOf(`"${run}-`, at + 1)) {
      offsets.push(at + run.length + 2);
    }
    return { buffer: Buffer.from(text, 'latin1'), offsets };
  });
  return (request) => {
    const { buffer, offsets } = templates[request % templates.length];
    const body = Buffer.from(buffer);
    const digits = String(request).padStart(WIDTH, '0');
    for (const offset of offsets) body.write(digits, offset, 'latin1');
    return body;
  };
}
