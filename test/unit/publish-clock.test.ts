// PublishClock (src/broker/clock.ts): stamps come from the last reading of the one clock moved on
// by the node's monotonic clock (driven by hand here); a reading older than a second is taken
// again; a retry stamps from its own refusal's reading; a manual test clock is used as it is.

import t from 'tap';
import { ManualClock, PublishClock, redisClock } from '../../src/broker/clock.ts';

function clockUnderTest() {
  let monotonicMs = 5_000;
  let oneClockUs = 1_764_000_000_000_000;
  let reads = 0;
  const clock = new PublishClock(
    redisClock,
    async () => {
      reads++;
      return oneClockUs;
    },
    () => monotonicMs,
  );
  return {
    clock,
    reads: () => reads,
    /** Time passes for both clocks alike. */
    pass(ms: number) {
      monotonicMs += ms;
      oneClockUs += ms * 1000;
    },
    /** Only the one clock moves (it is set anew). */
    step(us: number) {
      oneClockUs += us;
    },
  };
}

t.test('the first stamp reads the clock; later ones within a second move the reading on', async (t) => {
  const c = clockUnderTest();
  const first = await c.clock.stampUs();
  t.equal(c.reads(), 1);
  c.pass(400);
  t.equal(await c.clock.stampUs(), first + 400_000, 'moved on by the monotonic clock');
  c.step(7_000_000);
  c.pass(500);
  t.equal(await c.clock.stampUs(), first + 900_000, 'a step of the one clock is not seen yet');
  t.equal(c.reads(), 1, 'no second read within a second');
  c.pass(200);
  t.equal(await c.clock.stampUs(), first + 1_100_000 + 7_000_000, 'a reading over a second old is taken again');
  t.equal(c.reads(), 2);
});

t.test('a reading a script returns is used from then on', async (t) => {
  const c = clockUnderTest();
  await c.clock.stampUs();
  c.clock.observe(2_000_000_000_000_000);
  c.pass(250);
  t.equal(await c.clock.stampUs(), 2_000_000_000_250_000);
  t.equal(c.reads(), 1);
});

t.test('a retry stamps from its own refusal, whatever the clock observes meanwhile', async (t) => {
  const c = clockUnderTest();
  const refusal = c.clock.observe(3_000_000_000_000_000);
  c.clock.observe(4_000_000_000_000_000); // another publish's reply, say from another shard
  c.pass(10);
  t.equal(c.clock.stampFrom(refusal), 3_000_000_000_010_000);
});

t.test('a manual clock is stamped as it is', async (t) => {
  const manual = new ManualClock(1_000_000);
  const clock = new PublishClock(
    manual,
    async () => t.fail('must not read Redis') as never,
    () => 0,
  );
  t.equal(await clock.stampUs(), 1_000_000);
  manual.advanceSeconds(2);
  t.equal(await clock.stampUs(), 3_000_000);
});
