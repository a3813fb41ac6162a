/**
 * Summarises a V8 .cpuprofile (from BENCH_BROKER_NODE_ARGS="--cpu-prof --cpu-prof-dir=DIR"):
 * self time by function and by package/file, and inclusive time of selected functions.
 *
 *   node --import=tsx bench/cpuprofile-summary.ts DIR/CPU.*.cpuprofile [top=25] [stack-filter]
 *
 * With a stack filter (a regular expression), only samples with a frame matching it on their
 * stack ("name file", e.g. "pullOnce src/broker/delivery.ts") are counted.
 */
import fs from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: Node[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

const [file, topArg, filterArg] = process.argv.slice(2);
if (!file) {
  process.stderr.write('usage: bench/cpuprofile-summary.ts FILE.cpuprofile [top]\n');
  process.exit(1);
}
const top = Number(topArg ?? 25);
const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

const frameKey = (n: Node) => `${n.callFrame.functionName || '(anonymous)'} ${where(n.callFrame.url)}`;
const filter = filterArg ? new RegExp(filterArg) : undefined;
const kept = (id: number) => {
  if (!filter) return true;
  for (let n: number | undefined = id; n !== undefined; n = parent.get(n)) if (filter.test(frameKey(byId.get(n)!))) return true;
  return false;
};

// Self time per node from samples and time deltas (microseconds).
const selfUs = new Map<number, number>();
profile.samples.forEach((id, i) => {
  if (kept(id)) selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
});
const totalUs = [...selfUs.values()].reduce((a, b) => a + b, 0);

function where(url: string): string {
  if (!url) return '(native/V8)';
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (nm) return nm[1];
  if (url.startsWith('node:')) return url;
  const local = /\/(src|routes|bench)\/(.*)$/.exec(url);
  return local ? `${local[1]}/${local[2]}` : url;
}

const byFunction = new Map<string, number>();
const byWhere = new Map<string, number>();
let idleUs = 0;
for (const [id, us] of selfUs) {
  const frame = byId.get(id)!.callFrame;
  if (frame.functionName === '(idle)') idleUs += us;
  const key = `${frame.functionName || '(anonymous)'} ${where(frame.url)}:${frame.lineNumber + 1}`;
  byFunction.set(key, (byFunction.get(key) ?? 0) + us);
  const w = frame.url ? where(frame.url) : frame.functionName;
  byWhere.set(w, (byWhere.get(w) ?? 0) + us);
}

// Inclusive time of every function name (sample counted once per distinct name on its stack).
const inclusive = new Map<string, number>();
profile.samples.forEach((id, i) => {
  if (!kept(id)) return;
  const seen = new Set<string>();
  for (let n: number | undefined = id; n !== undefined; n = parent.get(n)) {
    const key = frameKey(byId.get(n)!);
    if (seen.has(key)) continue;
    seen.add(key);
    inclusive.set(key, (inclusive.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0));
  }
});

const busyUs = totalUs - idleUs;
const pct = (us: number) => `${((us / busyUs) * 100).toFixed(1).padStart(5)}%`;
const secs = (us: number) => `${(us / 1e6).toFixed(2).padStart(6)}s`;
const print = (title: string, map: Map<string, number>, n: number) => {
  process.stdout.write(`\n${title}\n`);
  for (const [k, v] of [...map].sort((a, b) => b[1] - a[1]).slice(0, n)) {
    process.stdout.write(`${secs(v)} ${pct(v)}  ${k}\n`);
  }
};
process.stdout.write(`profile ${secs(totalUs)} sampled, idle ${secs(idleUs)}, busy ${secs(busyUs)} (percentages of busy)\n`);
print('self time by package / file', byWhere, top);
print('self time by function', byFunction, top);
print('inclusive time by function', inclusive, top);
