// Push flow control on an injected clock: the window's slow start, halving and bounds, and the
// push backoff, which doubles per failure seen after a pause, is capped, and a success resets;
// room and pause always from one reading of the clock.

import t from 'tap';
import { INITIAL_WINDOW, MAX_BACKOFF_MS, MAX_WINDOW, PushWindow } from '../../src/broker/push-window.ts';

function windowAt(start = 1_000_000) {
  const clock = { now: start };
  return { clock, window: new PushWindow(() => clock.now) };
}

t.test('slow start: one more request per success, up to the maximum', async (t) => {
  const { window } = windowAt();
  t.equal(window.now(0).room, INITIAL_WINDOW, 'starts small');
  t.equal(window.now(INITIAL_WINDOW).room, 0, 'full');
  for (let i = 0; i < INITIAL_WINDOW; i++) window.succeeded();
  t.equal(window.limit, 2 * INITIAL_WINDOW, 'a round of successes doubles it');
  for (let i = 0; i < 2 * MAX_WINDOW; i++) window.succeeded();
  t.equal(window.limit, MAX_WINDOW, 'never above the maximum');
  t.equal(window.now(MAX_WINDOW + 5).room, 0, 'no negative room');
});

t.test('a failure halves the window (never below one) and pauses new requests', async (t) => {
  const { clock, window } = windowAt();
  for (let i = 0; i < 13; i++) window.succeeded();
  t.equal(window.limit, 16);
  t.equal(window.failed(), 100, 'first backoff 100 ms');
  t.equal(window.limit, 8, 'halved');
  t.equal(window.now(0).room, 0, 'paused');
  t.equal(window.now(0).pauseLeftMs, 100);
  clock.now += 99;
  t.equal(window.now(0).room, 0, 'still paused 1 ms before the end');
  clock.now += 1;
  t.equal(window.now(0).room, 8, 'open again when the backoff ends');
  t.equal(window.now(0).pauseLeftMs, 0);
  for (let i = 0; i < 10; i++) {
    clock.now += 1_000_000;
    window.failed();
  }
  t.equal(window.limit, 1, 'never below one');
});

t.test('backoff doubles per failure after a pause, is capped, and a success resets it', async (t) => {
  const { clock, window } = windowAt();
  const seen: number[] = [];
  for (let i = 0; i < 12; i++) {
    seen.push(window.failed());
    clock.now += window.now(0).pauseLeftMs;
  }
  t.same(seen.slice(0, 5), [100, 200, 400, 800, 1600], 'doubling');
  t.equal(seen.at(-1), MAX_BACKOFF_MS, 'capped');
  t.ok(
    seen.every((ms) => ms <= MAX_BACKOFF_MS),
    'never above the cap',
  );
  window.succeeded();
  t.equal(window.now(0).pauseLeftMs, 0, 'a success ends the pause');
  t.equal(window.failed(), 100, 'and the next failure starts over');
});

t.test('failures of requests already under way during a pause do not lengthen it', async (t) => {
  const { clock, window } = windowAt();
  t.equal(window.failed(), 100);
  clock.now += 10;
  // Requests sent before the pause fail one after another: the same failure count.
  t.equal(window.failed(), 100, 'a concurrent timeout: still the first backoff');
  t.equal(window.failed(), 100);
  t.equal(window.now(0).pauseLeftMs, 100, 'the pause runs from the latest of them');
  clock.now += 100;
  t.equal(window.failed(), 200, 'a request sent after the pause fails: the next backoff');
});

t.test('room and pause come from one reading of the clock', async (t) => {
  // A clock that moves 1 ms at every reading: a pause ending between two readings would answer
  // no room and no pause, and the pusher would wait for a request that was never sent.
  let now = 1_000_000;
  const window = new PushWindow(() => now++);
  const pauseMs = window.failed();
  for (let i = 0; i < pauseMs + 5; i++) {
    const { room, pauseLeftMs } = window.now(0);
    if (room === 0 && pauseLeftMs === 0) {
      t.fail(`no room and no pause at ${now}`);
      return;
    }
  }
  t.pass('every answer has room or a pause left');
});
