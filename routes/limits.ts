/** Request bodies up to 1 MiB, except publish (10 MB of data travels base64-encoded). */
export const DEFAULT_BODY_LIMIT = 1024 * 1024;
export const PUBLISH_BODY_LIMIT = 16 * 1024 * 1024;

/** Largest client frame of a streaming pull; bigger ones close the stream with INVALID_ARGUMENT. */
export const MAX_STREAM_FRAME_BYTES = 1024 * 1024;
