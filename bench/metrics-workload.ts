/**
 * The metrics workload: `GET /metrics` scraped ten times in a row with many subscriptions (each
 * topic published to once, so every subscription has a backlog and an oldest message). Rate =
 * scrapes per second; the bars read the broker's CPU per scrape from the phase and its RSS
 * growth over the ten from the notes.
 */
import { createTopic, deleteTopic, type ThroughputResult, topicPath } from './broker-workloads.ts';
import type { HttpClient } from './http.ts';
import { readRss } from './processes.ts';
import { Latency } from './stats.ts';

export const METRICS_SCRAPES = 10;

export interface MetricsLayout {
  subscriptions: number;
  topics: number;
}

const topicId = (t: number) => `bench-metrics-${t}`;
const subscriptionIds = (t: number, layout: MetricsLayout) => {
  const perTopic = Math.ceil(layout.subscriptions / layout.topics);
  const first = t * perTopic;
  const count = Math.max(0, Math.min(perTopic, layout.subscriptions - first));
  return Array.from({ length: count }, (_, i) => `bench-metrics-sub-${first + i}`);
};

/** The topics and subscriptions, `concurrency` topics at a time, and one message to each topic. */
export async function setUpMetricsWorkload(client: HttpClient, layout: MetricsLayout, concurrency: number) {
  let next = 0;
  const worker = async () => {
    for (let t = next++; t < layout.topics; t = next++) {
      await createTopic(
        client,
        topicId(t),
        subscriptionIds(t, layout).map((id) => ({ id })),
      );
      await client.json('POST', `${topicPath(topicId(t))}:publish`, { messages: [{ data: 'bWV0cmljcw==' }] });
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

/** Scrapes `/metrics` METRICS_SCRAPES times in a row; notes the broker's RSS growth over them. */
export async function scrapeMetrics(
  client: HttpClient,
  workload: string,
  brokerPid: number,
): Promise<ThroughputResult> {
  const latency = new Latency();
  const rssBefore = readRss(brokerPid)?.rss ?? Number.NaN;
  let bytes = 0;
  const started = performance.now();
  for (let i = 0; i < METRICS_SCRAPES; i++) {
    const scrapeStarted = performance.now();
    const response = await client.request('GET', '/metrics');
    latency.since(scrapeStarted);
    if (response.status !== 200) throw new Error(`${workload} -> HTTP ${response.status}`);
    bytes = response.body.length;
  }
  const seconds = (performance.now() - started) / 1000;
  const rssAfter = readRss(brokerPid)?.rss ?? Number.NaN;
  return {
    workload,
    messages: METRICS_SCRAPES,
    seconds,
    msgPerSec: METRICS_SCRAPES / seconds,
    latency: { scrape: latency.summary() },
    notes: { bytesPerScrape: bytes, rssGrowthBytes: rssAfter - rssBefore },
  };
}

export async function tearDownMetricsWorkload(client: HttpClient, layout: MetricsLayout): Promise<void> {
  for (let t = 0; t < layout.topics; t++) await deleteTopic(client, topicId(t), subscriptionIds(t, layout));
}
