// Wake-ups proportional to work (wakeups.ts): a wake-up for n messages wakes, per subscription,
// the longest-waiting waiters until their capacities cover n, never more; a waiter re-arms at the
// back (no waiter is starved); a wake-up a waiter leaves unused goes to the next one (passOn);
// `config` wakes every waiter; a group's timer for what becomes available by time alone wakes one
// waiter; each subscription of the topic is woken on its own.

import { EventEmitter } from 'node:events';
import t from 'tap';
import type { RedisClient } from '../../src/redis/client.ts';
import { CONFIG_CHANGED, type Waiter, wakeMessage, Wakeups } from '../../src/broker/wakeups.ts';

/** A subscriber connection that delivers what `publish` sends, and counts its subscriptions. */
function fakeSubscriber() {
  const emitter = new EventEmitter();
  const channels = new Set<string>();
  const subscriber = Object.assign(emitter, {
    subscribe: async (channel: string) => channels.add(channel),
    unsubscribe: async (channel: string) => channels.delete(channel),
  });
  return {
    subscriber: subscriber as unknown as RedisClient,
    channels,
    publish: (channel: string, message: string) => emitter.emit('message', channel, message),
  };
}

/** Which of `waiters` have been woken by now (their woken promises settled). */
async function wokenOnes(waiters: Waiter[]): Promise<number[]> {
  const woken: number[] = [];
  await Promise.all(
    waiters.map((waiter, i) =>
      Promise.race([waiter.woken.then(() => woken.push(i)), new Promise((resolve) => setImmediate(resolve))]),
    ),
  );
  return woken.sort((a, b) => a - b);
}

const CHANNEL = 'wake:t1';

t.test('a count wakes the longest-waiting waiters until their capacities cover it', async (t) => {
  const { subscriber, publish } = fakeSubscriber();
  const wakeups = new Wakeups(subscriber);
  const capacities = [1, 2, 5, 1, 1];
  const waiters = await Promise.all(capacities.map((capacity) => wakeups.arm(CHANNEL, 's1', capacity)));
  publish(CHANNEL, wakeMessage(1));
  t.same(await wokenOnes(waiters), [0], 'one message: the first waiter only');
  publish(CHANNEL, wakeMessage(3));
  t.same(await wokenOnes(waiters), [0, 1, 2], 'three: the next two (capacities 2 and 5 cover it)');
  publish(CHANNEL, wakeMessage(0));
  t.same(await wokenOnes(waiters), [0, 1, 2], 'nothing new: nobody');
  t.equal(waiters[0].cancel(), true, 'cancel tells that the waiter had been woken');
  t.equal(waiters[3].cancel(), false, 'and that one had not');
  publish(CHANNEL, wakeMessage(1));
  t.same(await wokenOnes(waiters), [0, 1, 2, 3, 4], 'a cancelled waiter is skipped');
});

t.test('a waiter that re-arms waits behind the others: every waiter gets its turn', async (t) => {
  const { subscriber, publish } = fakeSubscriber();
  const wakeups = new Wakeups(subscriber);
  const turns = [0, 0, 0, 0];
  const armed = await Promise.all(turns.map(() => wakeups.arm(CHANNEL, 's1', 10)));
  for (let round = 0; round < 12; round++) {
    publish(CHANNEL, wakeMessage(1));
    const woken = await wokenOnes(armed);
    t.equal(woken.length, 1, `round ${round}: one waiter`);
    turns[woken[0]]++;
    armed[woken[0]].cancel();
    armed[woken[0]] = await wakeups.arm(CHANNEL, 's1', 10);
  }
  t.same(turns, [3, 3, 3, 3], 'round robin');
});

t.test('passOn wakes the next waiter of that subscription only', async (t) => {
  const { subscriber, publish } = fakeSubscriber();
  const wakeups = new Wakeups(subscriber);
  const s1 = await Promise.all([1, 2].map(() => wakeups.arm(CHANNEL, 's1', 1)));
  const s2 = await wakeups.arm(CHANNEL, 's2', 1);
  wakeups.passOn(CHANNEL, 's1');
  t.same(await wokenOnes([...s1, s2]), [0], 'the first waiter of s1');
  wakeups.passOn(CHANNEL, 's1');
  t.same(await wokenOnes([...s1, s2]), [0, 1], 'then the next');
  wakeups.passOn(CHANNEL, 's1');
  wakeups.passOn(CHANNEL, 'gone');
  t.same(await wokenOnes([s2]), [], 'with nobody left in s1, nothing happens');
  publish(CHANNEL, wakeMessage(1));
  t.same(await wokenOnes([s2]), [0], 'every subscription of the topic gets its own count');
});

t.test('config wakes every waiter of the channel, with its message', async (t) => {
  const { subscriber, publish } = fakeSubscriber();
  const wakeups = new Wakeups(subscriber);
  const waiters = await Promise.all(['s1', 's1', 's2'].map((group) => wakeups.arm(CHANNEL, group, 100)));
  publish(CHANNEL, CONFIG_CHANGED);
  t.same(await Promise.all(waiters.map((waiter) => waiter.woken)), [CONFIG_CHANGED, CONFIG_CHANGED, CONFIG_CHANGED]);
});

t.test('the group timer wakes one waiter, at the earliest time reported', async (t) => {
  const { subscriber } = fakeSubscriber();
  const wakeups = new Wakeups(subscriber);
  const waiters = await Promise.all([1, 2, 3].map(() => wakeups.arm(CHANNEL, 's1', 1)));
  waiters[2].lookAgainIn(60_000);
  waiters[1].lookAgainIn(20);
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.same(await wokenOnes(waiters), [0], 'one waiter, the first, when the earliest time came');
  await new Promise((resolve) => setTimeout(resolve, 100));
  t.same(await wokenOnes(waiters), [0], 'once');
  for (const waiter of waiters) waiter.cancel();
});

t.test('the channel is listened to while any waiter is armed, woken or not', async (t) => {
  const { subscriber, channels, publish } = fakeSubscriber();
  const wakeups = new Wakeups(subscriber);
  const first = await wakeups.arm(CHANNEL, 's1', 1);
  const second = await wakeups.arm(CHANNEL, 's2', 1);
  publish(CHANNEL, wakeMessage(1));
  first.cancel();
  t.ok(channels.has(CHANNEL), 'still subscribed for the other subscription');
  second.cancel();
  t.notOk(channels.has(CHANNEL), 'unsubscribed with nobody armed');
  await wakeups.close();
  const late = await wakeups.arm(CHANNEL, 's1', 1);
  t.equal(await late.woken, '', 'closed: a new waiter is released at once');
});
