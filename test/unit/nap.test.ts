// A delivery loop's sleep (wakeups.ts Nap): it ends at its timeout, at its wake-up, or at a
// nudge; a nudge while the loop is awake ends the next sleep at once (a pusher or stream told to
// stop in the middle of a pull must not then sleep forever).

import t from 'tap';
import { Nap } from '../../src/broker/wakeups.ts';

const settledWithin = (promise: Promise<unknown>, ms: number) =>
  Promise.race([promise.then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), ms))]);

t.test('a sleep ends at its timeout, its wake-up or a nudge', async (t) => {
  const nap = new Nap();
  t.ok(await settledWithin(nap.sleep(5), 500), 'timeout');
  let wake!: () => void;
  const woken = new Promise<void>((resolve) => (wake = resolve));
  const sleeping = nap.sleep(undefined, woken);
  t.notOk(await settledWithin(sleeping, 50), 'no timeout: still asleep');
  wake();
  t.ok(await settledWithin(sleeping, 500), 'the wake-up ends it');
  const nudged = nap.sleep(undefined);
  nap.nudge();
  t.ok(await settledWithin(nudged, 500), 'a nudge ends it');
});

t.test('a nudge while awake ends the next sleep at once, once', async (t) => {
  const nap = new Nap();
  nap.nudge();
  t.ok(await settledWithin(nap.sleep(undefined), 500), 'the next sleep returns at once');
  t.notOk(await settledWithin(nap.sleep(undefined), 50), 'and only that one');
});
