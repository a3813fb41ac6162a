import { Counter, collectDefaultMetrics, Histogram, Registry } from 'prom-client';
import { BacklogGauges } from './backlog-gauges.ts';
import type { SubscriptionRecords } from './subscription-records.ts';
import { resourceId } from './names.ts';
import type { SubscriptionRecord } from './records.ts';
import type { Regions } from './regions.ts';

/**
 * The broker's Prometheus metrics (`GET /metrics`), named after Pub/Sub's Cloud Monitoring
 * metrics (`pubsub.googleapis.com/subscription/...` becomes `pubsub_subscription_...`). Two kinds:
 *   - global gauges, read from Redis at each scrape (the same from every broker process): a
 *     subscription's backlog, outstanding messages and oldest unacknowledged message
 *     (backlog-gauges.ts);
 *   - per-process counters and histograms of what this process did (`..._total`), through
 *     prom-client: a deployment of several processes sums them over its instances, as
 *     Prometheus does for any counter; and the process's own metrics.
 * Subscription series are labelled `project`, `subscription` and `topic` (IDs).
 */
export class BrokerMetrics {
  readonly registry = new Registry();
  private readonly subscriptionLabels = ['project', 'subscription', 'topic'] as const;
  private readonly acked = this.counter(
    'pubsub_subscription_ack_message_count_total',
    'Messages acknowledged through this process.',
  );
  private readonly sent = this.counter(
    'pubsub_subscription_sent_message_count_total',
    'Messages this process leased for delivery to a subscriber (pull, stream or push).',
  );
  private readonly expired = this.counter(
    'pubsub_subscription_expired_ack_deadlines_count_total',
    "Leases this process found past their deadline (a pull's reclaim, or an acknowledgement after it).",
  );
  private readonly exactlyOnceWarnings = this.counter(
    'pubsub_subscription_exactly_once_warning_count_total',
    'Acknowledgements and deadline changes on exactly-once subscriptions that failed, by reason: client (an ack ID expired, stale, malformed or out of order) or server (a store that could not be reached).',
    ['reason', 'operation_type'],
  );
  private readonly deadLettered = this.counter(
    'pubsub_subscription_dead_letter_message_count_total',
    'Messages this process forwarded to the dead-letter topic.',
  );
  private readonly sendRequests = new Counter({
    name: 'pubsub_topic_send_request_count_total',
    help: 'Publish requests through this process, by response code.',
    labelNames: ['project', 'topic', 'response_code'],
    registers: [this.registry],
  });
  private readonly sentMessages = new Counter({
    name: 'pubsub_topic_send_message_operation_count_total',
    help: 'Messages published through this process.',
    labelNames: ['project', 'topic'],
    registers: [this.registry],
  });
  private readonly messageSizes = new Histogram({
    name: 'pubsub_topic_message_sizes',
    help: 'Sizes in bytes of the messages published through this process (data and attributes).',
    labelNames: ['project', 'topic'],
    buckets: [100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000],
    registers: [this.registry],
  });
  private readonly requests = new Counter({
    name: 'pubsub_request_count_total',
    help: 'Requests this process answered, by method and response code.',
    labelNames: ['method', 'response_code'],
    registers: [this.registry],
  });
  private readonly latencies = new Histogram({
    name: 'pubsub_request_latencies_seconds',
    help: 'How long this process took to answer requests, by method.',
    labelNames: ['method'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  /**
   * Label sets, by what names them: prom-client is handed the same object for each series
   * instead of one made per update. Making one (splitting a resource name, spreading an object)
   * cost more than the update itself, several times per request. As many as the series
   * prom-client keeps in any case.
   */
  private readonly labelSets = {
    topics: new LabelSets<{ project: string; topic: string }>(),
    subscriptions: new LabelSets<{ project: string; subscription: string; topic: string }>(),
    sendRequests: new LabelSets<{ project: string; topic: string; response_code: string }>(),
    requests: new LabelSets<{ method: string; response_code: string }>(),
    latencies: new LabelSets<{ method: string }>(),
  };
  /** A scrape under way: a second one at the same time shares its reading of Redis. */
  private scraping: Promise<string[]> | undefined;

  private readonly backlogGauges: BacklogGauges;

  constructor(regions: Regions, records: SubscriptionRecords) {
    this.backlogGauges = new BacklogGauges(regions, records);
  }

  /**
   * The metrics in Prometheus text format, in pieces to send one after the other (see
   * backlog-gauges.ts): the global gauges read from Redis now, then the rest.
   */
  scrape(): Promise<string[]> {
    this.scraping ??= this.readAndFormat().finally(() => (this.scraping = undefined));
    return this.scraping;
  }

  acknowledged(record: SubscriptionRecord, count: number): void {
    if (count > 0) this.acked.inc(this.subscriptionLabelsOf(record), count);
  }

  leased(record: SubscriptionRecord, count: number): void {
    if (count > 0) this.sent.inc(this.subscriptionLabelsOf(record), count);
  }

  deadlinesExpired(record: SubscriptionRecord, count: number): void {
    if (count > 0) this.expired.inc(this.subscriptionLabelsOf(record), count);
  }

  exactlyOnceWarning(record: SubscriptionRecord, reason: 'client' | 'server', operation: 'ack' | 'modack'): void {
    this.exactlyOnceWarnings.inc({ ...this.subscriptionLabelsOf(record), reason, operation_type: operation });
  }

  forwardedToDeadLetters(record: SubscriptionRecord, count: number): void {
    if (count > 0) this.deadLettered.inc(this.subscriptionLabelsOf(record), count);
  }

  /** A publish request to `topic` (full name) answered with `code` ('OK' or the error's status). */
  publishRequest(topic: string, code: string): void {
    this.sendRequests.inc(
      this.labelSets.sendRequests.get(code, topic, () => ({ ...this.topicLabelsOf(topic), response_code: code })),
    );
  }

  /** Messages stored in `topic` (full name), by a publish or an acknowledge-and-publish. */
  published(topic: string, messageSizes: readonly number[]): void {
    const labels = this.topicLabelsOf(topic);
    this.sentMessages.inc(labels, messageSizes.length);
    for (const size of messageSizes) this.messageSizes.observe(labels, size);
  }

  /** A request answered: `method` names the call ("POST /v1/projects/:project/topics/:topic:publish", a gRPC path). */
  request(method: string, code: string, seconds: number): void {
    this.requests.inc(this.labelSets.requests.get(code, method, () => ({ method, response_code: code })));
    this.latencies.observe(
      this.labelSets.latencies.get(method, '', () => ({ method })),
      seconds,
    );
  }

  private topicLabelsOf(topic: string): { project: string; topic: string } {
    return this.labelSets.topics.get(topic, '', () => ({ project: projectOf(topic), topic: resourceId(topic) }));
  }

  private subscriptionLabelsOf(record: SubscriptionRecord): { project: string; subscription: string; topic: string } {
    return this.labelSets.subscriptions.get(record.name, record.topic, () => ({
      project: projectOf(record.name),
      subscription: resourceId(record.name),
      topic: resourceId(record.topic),
    }));
  }

  private counter(name: string, help: string, extra: string[] = []): Counter {
    return new Counter({ name, help, labelNames: [...this.subscriptionLabels, ...extra], registers: [this.registry] });
  }

  private async readAndFormat(): Promise<string[]> {
    const gauges = await this.backlogGauges.text();
    return [...gauges, await this.registry.metrics(), await processMetrics().metrics()];
  }
}

const projectOf = (fullName: string) => fullName.split('/')[1];

/**
 * The process's own metrics (CPU, memory, event loop, garbage collection): one registry per
 * process, however many brokers it runs, since what they measure is the process.
 */
let processRegistry: Registry | undefined;
function processMetrics(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

/**
 * Label sets made once per pair of strings naming them and handed out again
 * (BrokerMetrics.labelSets); found by the strings themselves, not a key made of them.
 */
class LabelSets<T extends object> {
  private readonly sets = new Map<string, Map<string, T>>();

  get(first: string, second: string, make: () => T): T {
    let byFirst = this.sets.get(first);
    if (!byFirst) this.sets.set(first, (byFirst = new Map()));
    let set = byFirst.get(second);
    if (!set) byFirst.set(second, (set = make()));
    return set;
  }
}
