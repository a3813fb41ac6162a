// Preload for a process whose wall clock is off: `node --import=./test/helpers/skew-clock.mjs ...`
// makes Date.now(), new Date() and Date() read CLOCK_SKEW_MS milliseconds off (default +5
// minutes; negative values put the clock behind). Timers and performance.now() are untouched,
// as on a machine whose clock is simply set wrong. Plain JavaScript so that it loads with or
// without tsx. Prints one line to stderr so a test can see that the skew is in effect.
const skewMs = Number(process.env.CLOCK_SKEW_MS ?? 5 * 60 * 1000);
if (!Number.isFinite(skewMs)) throw new Error(`CLOCK_SKEW_MS is not a number: ${process.env.CLOCK_SKEW_MS}`);

const RealDate = globalThis.Date;

function SkewedDate(...args) {
  if (!new.target) return new RealDate(RealDate.now() + skewMs).toString();
  return args.length === 0 ? new RealDate(RealDate.now() + skewMs) : new RealDate(...args);
}
Object.setPrototypeOf(SkewedDate, RealDate);
SkewedDate.prototype = RealDate.prototype;
SkewedDate.now = () => RealDate.now() + skewMs;
SkewedDate.parse = RealDate.parse;
SkewedDate.UTC = RealDate.UTC;

globalThis.Date = SkewedDate;
process.stderr.write(`[skew-clock] Date is skewed by ${skewMs} ms\n`);
