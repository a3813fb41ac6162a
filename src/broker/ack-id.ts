import { hash } from 'node:crypto';

/**
 * Ack IDs name one delivery: subscription uid, message sequence and delivery generation,
 * sealed with a tag under a secret every broker node shares (kept in Redis): the first 132 bits
 * of SHA-256(secret ":" body). Truncation rules out length extension, and one-shot hashing costs
 * a fraction of an HMAC object per ack ID (it runs twice per message: on pull and on ack). They are
 * opaque to clients, cannot be forged to reach another subscription or delivery, and a
 * stale one never matches a newer delivery because the generation differs.
 *
 *   [<region>.]<subscriptionUid>-<seq base36>-<generation base36>-<tag: 22 base64url characters>
 *
 * In a deployment with regions the ack ID starts with the region that stores the message (the
 * tag covers it), so an ack through any region's endpoint goes where the lease lives.
 */
export interface Delivery {
  /** '' without regions. */
  region: string;
  subscriptionUid: string;
  seq: string;
  generation: number;
}

/** Base36 numbers as encode writes them: no leading zeros. */
const ACK_ID =
  /^(?:([a-z][a-z0-9-]{0,62})\.)?([0-9a-f]{16})-(0|[1-9a-z][0-9a-z]{0,12})-(0|[1-9a-z][0-9a-z]{0,9})-[A-Za-z0-9_-]{22}$/;
/** 22 base64url characters: 132 bits of the digest. */
const TAG_LENGTH = 22;

export class AckIdCodec {
  private readonly keyPrefix: string;

  constructor(secret: Buffer) {
    this.keyPrefix = `${secret.toString('hex')}:`;
  }

  encode(delivery: Delivery): string {
    const region = delivery.region ? `${delivery.region}.` : '';
    const body = `${region}${delivery.subscriptionUid}-${Number(delivery.seq).toString(36)}-${delivery.generation.toString(36)}`;
    return `${body}-${this.tag(body)}`;
  }

  /**
   * Returns the delivery, or undefined for anything malformed or not sealed by us. Only the
   * exact spelling we issued is accepted: the tag covers the ack ID's text, and the pattern
   * admits one spelling per number.
   */
  decode(ackId: string): Delivery | undefined {
    const match = ACK_ID.exec(ackId);
    if (!match) return undefined;
    const bodyLength = ackId.length - TAG_LENGTH - 1;
    if (!sameInConstantTime(this.tag(ackId.slice(0, bodyLength)), ackId.slice(bodyLength + 1))) return undefined;
    return {
      region: match[1] ?? '',
      subscriptionUid: match[2],
      seq: String(parseInt(match[3], 36)),
      generation: parseInt(match[4], 36),
    };
  }

  private tag(body: string): string {
    return hash('sha256', this.keyPrefix + body, 'base64url').slice(0, TAG_LENGTH);
  }
}

/** String equality whose time does not depend on where the strings differ (no Buffers needed). */
function sameInConstantTime(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let difference = 0;
  for (let i = 0; i < a.length; i++) difference |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return difference === 0;
}

/**
 * The shared secret: created once per deployment (SET NX), then read by every node. Loaded on
 * first use so that building the app never needs Redis; a failed load is retried next time.
 */
export function ackIdCodecLoader(load: () => Promise<Buffer>): () => Promise<AckIdCodec> {
  let codec: Promise<AckIdCodec> | undefined;
  return () => {
    codec ??= load().then(
      (secret) => new AckIdCodec(secret),
      (error: unknown) => {
        codec = undefined;
        throw error;
      },
    );
    return codec;
  };
}
