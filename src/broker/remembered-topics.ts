import type { TopicRecord } from './records.ts';

/** How long dead-letter forwarding and pulls reuse a topic record they read. */
export const TOPIC_REMEMBERED_MS = 1000;
/** Topic records kept; past this, the longest kept is dropped. */
const MAX_REMEMBERED_TOPICS = 10_000;

/**
 * Topic records reused for a short while instead of read again. Dead-letter forwarding
 * (dead-letters.ts) remembers its topics, and that they are missing, for a second; so do pulls
 * (pull.ts), for the topic's retention.
 *
 * Publishing: topic records a single-region broker reuses for the publishes of the next `forMs` (a second),
 * so that a publish need not read one. There the record gives publish nothing but the
 * incarnation (uid), and the publish script refuses a deleted one, so a remembered record cannot
 * take a message the topic would not; the time bounds how long a Redis that lost its data (say,
 * restarted without its append-only file) still sees publishes to topics it no longer has. With
 * regions, the record's storage policy decides where messages go, and a change to it applies
 * from the next publish on: nothing is remembered (`enabled` false).
 */
export class RememberedTopics {
  private readonly records = new Map<string, { record: TopicRecord | undefined; until: number }>();

  constructor(
    private readonly enabled: boolean,
    private readonly forMs: number,
  ) {}

  /** Remembers a topic's record, or (undefined) that it does not exist. */
  remember(fullName: string, record: TopicRecord | undefined): void {
    if (!this.enabled) return;
    if (this.records.size >= MAX_REMEMBERED_TOPICS) this.records.delete(this.records.keys().next().value!);
    this.records.set(fullName, { record, until: performance.now() + this.forMs });
  }

  /** What was remembered of the topic within the time, if anything. */
  recall(fullName: string): { record: TopicRecord | undefined } | undefined {
    const remembered = this.records.get(fullName);
    if (!remembered) return undefined;
    if (remembered.until > performance.now()) return remembered;
    this.records.delete(fullName);
    return undefined;
  }

  /** The remembered record, or `find`'s, which is remembered from then on. */
  async lookup(fullName: string, find: (fullName: string) => Promise<TopicRecord | undefined>) {
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
