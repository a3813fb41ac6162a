/**
 * Summarises a V8 .cpuprofile (from BENCH_BROKER_NODE_ARGS="--cpu-prof --cpu-prof-dir=DIR"):
 * self time by function and by package/file, and inclusive time of selected functions.
 *
 *   node --import=tsx bench/cpuprofile-summary.ts DIR/CPU.*.cpuprofile [top=25] [stack-filter] \
 *        [--phase="streaming end-to-end"] [--results=bench/results/latest.json]
 *
 * With a stack filter (a regular expression), only samples with a frame matching it on their
 * stack ("name file", e.g. "pullOnce src/broker/delivery.ts") are counted. With --phase, only
 * samples taken during that bench phase: run.ts records each phase's start and end on the
 * monotonic clock (cpu[phase].monoStartUs/monoEndUs in the results JSON), which is the clock of
 * V8's profile timestamps, so the broker's profile can be cut to one workload.
 */
import fs from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number; columnNumber?: number };
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

const flags = new Map<string, string>();
const positional: string[] = [];
for (const arg of process.argv.slice(2)) {
  const flag = /^--([a-z]+)=(.*)$/.exec(arg);
  if (flag) flags.set(flag[1], flag[2]);
  else positional.push(arg);
}
const [file, topArg, filterArg] = positional;
if (!file) {
  process.stderr.write(
    'usage: bench/cpuprofile-summary.ts FILE.cpuprofile [top] [stack-filter] [--phase=NAME] [--results=FILE]\n',
  );
  process.exit(1);
}
/** [start, end] in monotonic microseconds, from --phase and the results JSON. */
let windowUs: [number, number] | undefined;
const phase = flags.get('phase');
if (phase !== undefined) {
  const resultsFile = flags.get('results') ?? 'bench/results/latest.json';
  const cpu = (
    JSON.parse(fs.readFileSync(resultsFile, 'utf8')) as {
      cpu: Record<string, { monoStartUs?: number; monoEndUs?: number }>;
    }
  ).cpu;
  const entry = cpu[phase];
  if (entry?.monoStartUs === undefined || entry.monoEndUs === undefined) {
    process.stderr.write(
      `no phase "${phase}" with a time window in ${resultsFile}; phases: ${Object.keys(cpu).join(', ')}\n`,
    );
    process.exit(1);
  }
  windowUs = [entry.monoStartUs, entry.monoEndUs];
}
const top = Number(topArg ?? 25);
const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

const frameKey = (n: Node) => `${n.callFrame.functionName || '(anonymous)'} ${where(n.callFrame.url)}`;
const filter = filterArg ? new RegExp(filterArg) : undefined;
const sampleTimes: number[] = [];
{
  let t = profile.startTime;
  for (const delta of profile.timeDeltas) sampleTimes.push((t += delta));
}
const inWindow = (i: number) => !windowUs || (sampleTimes[i] >= windowUs[0] && sampleTimes[i] <= windowUs[1]);
const kept = (id: number) => {
  if (!filter) return true;
  for (let n: number | undefined = id; n !== undefined; n = parent.get(n))
    if (filter.test(frameKey(byId.get(n)!))) return true;
  return false;
};

// Self time per node from samples and time deltas (microseconds).
const selfUs = new Map<number, number>();
profile.samples.forEach((id, i) => {
  if (inWindow(i) && kept(id)) selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0));
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
  // tsx strips whitespace (everything is on line 1): anonymous functions get their column too.
  const column = !frame.functionName && frame.url ? `:${frame.columnNumber ?? 0}` : '';
  const key = `${frame.functionName || '(anonymous)'} ${where(frame.url)}:${frame.lineNumber + 1}${column}`;
  byFunction.set(key, (byFunction.get(key) ?? 0) + us);
  const w = frame.url ? where(frame.url) : frame.functionName;
  byWhere.set(w, (byWhere.get(w) ?? 0) + us);
}

// Inclusive time of every function name (sample counted once per distinct name on its stack).
const inclusive = new Map<string, number>();
profile.samples.forEach((id, i) => {
  if (!inWindow(i) || !kept(id)) return;
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
if (windowUs) process.stdout.write(`phase "${phase}": ${((windowUs[1] - windowUs[0]) / 1e6).toFixed(2)} s\n`);
process.stdout.write(
  `profile ${secs(totalUs)} sampled, idle ${secs(idleUs)}, busy ${secs(busyUs)} (percentages of busy)\n`,
);
print('self time by package / file', byWhere, top);
print('self time by function', byFunction, top);
print('inclusive time by function', inclusive, top);
