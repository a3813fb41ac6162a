// Wake-ups (wakeups.ts): a wake-up message on a topic's channel wakes every waiter armed on it
// (each subscription has one waiter per process, its leaser or pusher: leaser.ts), with the
// message; the channel is listened to while any waiter is armed; closing releases every waiter.

import { EventEmitter } from 'node:events';
import t from 'tap';
import type { RedisClient } from '../../src/redis/client.ts';
import { CONFIG_CHANGED, type Waiter, Wakeups } from '../../src/broker/wakeups.ts';

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

t.test('a count wakes every waiter of the channel, once', async (t) => {
  const { subscriber, publish } = fakeSubscriber();
  const wakeups = new Wakeups(subscriber);
  const waiters = await Promise.all([1, 2].map(() => wakeups.arm(CHANNEL)));
  const other = await wakeups.arm('wake:t2');
  publish(CHANNEL, '3');
  t.same(await wokenOnes([...waiters, other]), [0, 1], 'the waiters of that channel only');
  t.same(await Promise.all(waiters.map((waiter) => waiter.woken)), ['3', '3'], 'with the count');
  other.cancel();
  t.equal(await other.woken, '', 'a cancelled waiter resolves with nothing');
});

t.test('config wakes every waiter of the channel, with its message', async (t) => {
  const { subscriber, publish } = fakeSubscriber();
  const wakeups = new Wakeups(subscriber);
  const waiters = await Promise.all([1, 2, 3].map(() => wakeups.arm(CHANNEL)));
  publish(CHANNEL, CONFIG_CHANGED);
  t.same(await Promise.all(waiters.map((waiter) => waiter.woken)), [CONFIG_CHANGED, CONFIG_CHANGED, CONFIG_CHANGED]);
});

t.test('the channel is listened to while any waiter is armed, woken or not', async (t) => {
  const { subscriber, channels, publish } = fakeSubscriber();
  const wakeups = new Wakeups(subscriber);
  const first = await wakeups.arm(CHANNEL);
  const second = await wakeups.arm(CHANNEL);
  publish(CHANNEL, '1');
  first.cancel();
  t.ok(channels.has(CHANNEL), 'still subscribed for the other waiter');
  second.cancel();
  t.notOk(channels.has(CHANNEL), 'unsubscribed with nobody armed');
  await wakeups.close();
  const late = await wakeups.arm(CHANNEL);
  t.equal(await late.woken, '', 'closed: a new waiter is released at once');
});
