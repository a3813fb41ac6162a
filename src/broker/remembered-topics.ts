import type { TopicRecord } from './records.ts';

/** Topic records kept for publishing; past this, the longest kept is dropped. */
const MAX_REMEMBERED_TOPICS = 10_000;

/**
 * Topic records a single-region broker reuses for the publishes of the next `forMs` (a second),
 * so that a publish need not read one. There the record gives publish nothing but the
 * incarnation (uid), and the publish script refuses a deleted one, so a remembered record cannot
 * take a message the topic would not; the time bounds how long a Redis that lost its data (say,
 * restarted without its append-only file) still sees publishes to topics it no longer has. With
 * regions, the record's storage policy decides where messages go, and a change to it applies
 * from the next publish on: nothing is remembered (`enabled` false).
 */
export class RememberedTopics {
  private readonly records = new Map<string, { record: TopicRecord; until: number }>();

  constructor(
    private readonly enabled: boolean,
    private readonly forMs: number,
  ) {}

  remember(record: TopicRecord): void {
    if (!this.enabled) return;
    if (this.records.size >= MAX_REMEMBERED_TOPICS) this.records.delete(this.records.keys().next().value!);
    this.records.set(record.name, { record, until: performance.now() + this.forMs });
  }

  get(fullName: string): TopicRecord | undefined {
    const remembered = this.records.get(fullName);
    if (!remembered) return undefined;
    if (remembered.until > performance.now()) return remembered.record;
    this.records.delete(fullName);
    return undefined;
  }

  forget(fullName: string): void {
    this.records.delete(fullName);
  }
}
