/** Reading the Prometheus text of `GET /metrics` in tests. */

export interface Sample {
  labels: Record<string, string>;
  value: number;
}

/** The samples of metric `name` (exactly: not its `_bucket`, `_sum` or `_count` series). */
export function samplesOf(metrics: string, name: string): Sample[] {
  const samples: Sample[] = [];
  for (const line of metrics.split('\n')) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    const labels: Record<string, string> = {};
    const braces = line.indexOf('{');
    const end = line.lastIndexOf('}');
    if (braces >= 0) {
      for (const match of line.slice(braces + 1, end).matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) {
        labels[match[1]] = match[2];
      }
    }
    samples.push({ labels, value: Number(line.slice(line.lastIndexOf(' ') + 1)) });
  }
  return samples;
}

/** The value of the one sample of `name` whose labels include `labels` (undefined: none). */
export function sampleValue(metrics: string, name: string, labels: Record<string, string>): number | undefined {
  const matching = samplesOf(metrics, name).filter((sample) =>
    Object.entries(labels).every(([key, value]) => sample.labels[key] === value),
  );
  if (matching.length > 1) throw new Error(`${name} ${JSON.stringify(labels)}: ${matching.length} samples`);
  return matching[0]?.value;
}

/** The un-acked counts of `subscription` (its full name) by region. */
export function unackedByRegion(metrics: string, subscription: string): Map<string, number> {
  const [, project, , id] = subscription.split('/');
  const counts = new Map<string, number>();
  for (const { labels, value } of samplesOf(metrics, 'pubsub_subscription_num_unacked_messages_by_region')) {
    if (labels.project === project && labels.subscription === id) counts.set(labels.region, value);
  }
  return counts;
}
