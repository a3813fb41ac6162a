/** How long pulls and dead-letter forwarding reuse a topic record they read. */
export const TOPIC_REMEMBERED_MS = 1000;
/** Records kept; past this, the longest kept is dropped. */
const MAX_REMEMBERED_RECORDS = 10_000;

/**
 * Records (of topics or subscriptions) reused for a short while instead of read again, by full
 * name, and that a name had none. What each use may rely on, and how it learns that a record
 * changed meanwhile, its owner says:
 * - topics for publishing (publish.ts): a publish needs only the incarnation, which the publish
 *   script checks;
 * - topics for their retention (pull.ts) and as dead-letter topics (dead-letters.ts);
 * - subscriptions for unary pulls, acknowledgements and deadline changes (delivery.ts): their
 *   scripts check the record's version.
 * `enabled` false: nothing is remembered (with regions, a topic's storage policy decides where a
 * publish goes, and a change to it applies from the next publish on).
 */
export class RememberedRecords<R> {
  private readonly records = new Map<string, { record: R | undefined; until: number }>();

  constructor(
    private readonly enabled: boolean,
    private readonly forMs: number,
  ) {}

  /** Remembers a record, or (undefined) that there is none. */
  remember(fullName: string, record: R | undefined): void {
    if (!this.enabled) return;
    if (this.records.size >= MAX_REMEMBERED_RECORDS) this.records.delete(this.records.keys().next().value!);
    this.records.set(fullName, { record, until: performance.now() + this.forMs });
  }

  /** What was remembered of the name within the time, if anything. */
  recall(fullName: string): { record: R | undefined } | undefined {
    const remembered = this.records.get(fullName);
    if (!remembered) return undefined;
    if (remembered.until > performance.now()) return remembered;
    this.records.delete(fullName);
    return undefined;
  }

  /** The remembered record, or `find`'s, which is remembered from then on. */
  async lookup(fullName: string, find: (fullName: string) => Promise<R | undefined>) {
    const seen = this.recall(fullName);
    if (seen) return seen.record;
    const record = await find(fullName);
    this.remember(fullName, record);
    return record;
  }

  forget(fullName: string): void {
    this.records.delete(fullName);
  }
}
