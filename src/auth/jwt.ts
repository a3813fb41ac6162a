import { createLocalJWKSet, errors, type JSONWebKeySet, type JWTPayload, jwtVerify } from 'jose';
import { unauthenticated } from '../errors.ts';

/**
 * JWTs verified with `jose` against the keys of a JWKS file (AUTH_JWKS_FILE), and the issuer and
 * audience settings. The principal is the `email` claim, as `serviceAccount:<email>` for a
 * Google service account's address (ending in `gserviceaccount.com`) and `user:<email>` for any
 * other, unless `email_verified` is false; without one, the `sub` claim as
 * `serviceAccount:<sub>` (a token with no address names a workload, not a person).
 */
export interface JwtSettings {
  issuer: string;
  audience: string;
}

/** Clocks of the issuer and the broker may differ by this much around `exp` and `nbf`. */
const CLOCK_TOLERANCE_SECONDS = 30;

/** A compact JWS: three base64url parts. What is not one is looked up as an opaque token. */
export const looksLikeJwt = (token: string): boolean => /^[\w-]+\.[\w-]+\.[\w-]+$/.test(token);

export type KeySet = ReturnType<typeof createLocalJWKSet>;

/** The keys of a JWKS file's text; throws on anything that is not a JWKS with at least one key. */
export function parseJwks(text: string): KeySet {
  const jwks = JSON.parse(text) as JSONWebKeySet;
  if (!Array.isArray(jwks?.keys) || jwks.keys.length === 0) throw new Error('is not a JWKS: {"keys": [...]}');
  return createLocalJWKSet(jwks);
}

/** The principal a JWT names; UNAUTHENTICATED when its signature, issuer, audience or time fail. */
export async function jwtPrincipal(token: string, keys: KeySet, settings: JwtSettings): Promise<string> {
  let payload: JWTPayload;
  try {
    ({ payload } = await jwtVerify(token, keys, { ...settings, clockTolerance: CLOCK_TOLERANCE_SECONDS }));
  } catch (error) {
    throw unauthenticated(`Request had invalid authentication credentials: ${refusalOf(error)}.`);
  }
  const { email, email_verified: verified } = payload as JWTPayload & { email?: unknown; email_verified?: unknown };
  if (typeof email === 'string' && email !== '' && verified !== false) {
    return email.endsWith('gserviceaccount.com') ? `serviceAccount:${email}` : `user:${email}`;
  }
  if (typeof payload.sub === 'string' && payload.sub !== '') return `serviceAccount:${payload.sub}`;
  throw unauthenticated('Request had invalid authentication credentials: the token names no principal (email or sub).');
}

/** Why jose refused a token, in words that reveal nothing of the keys. */
function refusalOf(error: unknown): string {
  if (error instanceof errors.JWTExpired) return 'the token has expired';
  if (error instanceof errors.JWTClaimValidationFailed) {
    if (error.claim === 'iss') return 'the token has another issuer';
    if (error.claim === 'aud') return 'the token is for another audience';
    if (error.claim === 'nbf') return 'the token is not valid yet';
    return `its "${error.claim}" claim is not valid`;
  }
  if (error instanceof errors.JWSSignatureVerificationFailed) return 'the signature does not verify';
  if (error instanceof errors.JWKSNoMatchingKey) return 'no configured key signed it';
  return 'it is not a valid JWT';
}
