/**
 * What every service call carries besides its request: who is calling and how. Front ends make
 * it (routes/caller.ts for REST and WebSocket); nothing checks identity yet, but this is where
 * authentication and IAM will find the caller.
 */
export interface CallContext {
  /** The authenticated principal, once a front end authenticates callers. */
  principal?: string;
  /**
   * The address the caller connects from (the rate limit tells callers without a principal
   * apart by it: limits.ts).
   */
  address?: string;
  /** The front end the call came through. */
  endpoint: 'rest' | 'websocket' | 'grpc' | 'internal';
  /** The region whose endpoint took the call ('' without regions). */
  region: string;
  /** Aborted when the caller goes away (or its deadline passes): long polls stop waiting. */
  signal?: AbortSignal;
}
