/**
 * Message IDs are the message's sequence in its topic incarnation, and in a deployment with
 * regions the region that stores it: "<region>-<seq>".
 */
export function messageId(region: string, seq: number | string): string {
  return region ? `${region}-${seq}` : String(seq);
}

/** The region ('' without regions) and sequence of a message ID this broker issued (the bench counts by region). */
export function messageOrigin(id: string): { region: string; seq: number } {
  const dash = id.lastIndexOf('-');
  return { region: id.slice(0, Math.max(0, dash)), seq: Number(id.slice(dash + 1)) };
}
