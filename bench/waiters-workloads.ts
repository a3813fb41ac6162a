/**
 * Wake-ups with many waiting consumers: `waiters` long polls (`:pull`, returnImmediately unset,
 * one connection each) wait on a fresh subscription while single messages are published one at
 * a time. Per publish: how many scripts besides the publish itself the broker ran until the
 * message arrived and things settled (Redis `INFO commandstats`, EVALSHA and EVAL calls: with
 * nothing else going on, the pulls the wake-up set off), and the time from sending the publish to
 * the long poll's answer arriving.
 */
import type { Redis } from 'ioredis';
import { type PulledMessage, subscriptionPath, topicPath } from './broker-workloads.ts';
import { HttpClient } from './http.ts';
import { Latency, sleep } from './stats.ts';
import type { ThroughputResult } from './broker-workloads.ts';

/** How long a round waits after the message arrived for anything else the wake-up set off. */
const SETTLE_MS = 150;

/** Scripts Redis ran so far (EVALSHA and EVAL calls since the last RESETSTAT). */
export async function scriptCalls(admin: Redis): Promise<number> {
  const info = await admin.info('commandstats');
  let calls = 0;
  for (const match of info.matchAll(/^cmdstat_(evalsha|eval):calls=(\d+)/gm)) calls += Number(match[2]);
  return calls;
}

/** Waits until Redis has run no script for `quietMs` (every long poll has looked and sleeps). */
async function scriptsQuiet(admin: Redis, quietMs: number, timeoutMs: number): Promise<void> {
  const giveUpAt = Date.now() + timeoutMs;
  let last = await scriptCalls(admin);
  for (;;) {
    await sleep(quietMs);
    const now = await scriptCalls(admin);
    if (now === last) return;
    if (Date.now() > giveUpAt) throw new Error(`scripts still running after ${timeoutMs / 1000} s`);
    last = now;
  }
}

export async function longPollWakeupWorkload(options: {
  workload: string;
  baseUrl: string;
  admin: Redis;
  topicId: string;
  subscriptionId: string;
  waiters: number;
  rounds: number;
  timeoutMs: number;
}): Promise<ThroughputResult> {
  const { admin, waiters, rounds } = options;
  const polls = new HttpClient(options.baseUrl, waiters + 2);
  const pullPath = `${subscriptionPath(options.subscriptionId)}:pull`;
  const pullBody = JSON.stringify({ maxMessages: 1 });
  let stopping = false;
  /** The round's arrival: resolved with the message and when its answer came. */
  let arrived!: (value: { message: PulledMessage; atMs: number }) => void;
  /** A long poll that got the message waits for the round to end before it pulls again. */
  let roundOver: Promise<void> = Promise.resolve();
  const failures: Error[] = [];
  /** Long polls that ran out and waited again: a round with any does not count its scripts. */
  let ranOut = 0;

  const poller = async () => {
    while (!stopping) {
      const response = await polls.request('POST', pullPath, pullBody);
      const atMs = performance.now();
      if (response.status !== 200) throw new Error(`${options.workload}: pull -> HTTP ${response.status}`);
      const received = (JSON.parse(response.body.toString('utf8')).receivedMessages ?? []) as PulledMessage[];
      if (received.length === 0) {
        ranOut++; // the long poll ran out: wait again
        continue;
      }
      arrived({ message: received[0], atMs });
      await roundOver;
    }
  };
  // Every long poll's connection is opened first. A thousand opened at once may overflow the
  // listen queue, and a dropped SYN is sent again 1 s, then 3 s, later: a long poll that started
  // that late made its first look during a round, whose scripts then counted it.
  await Promise.all(
    Array.from({ length: waiters }, () => polls.request('GET', subscriptionPath(options.subscriptionId))),
  );
  const initialScripts = await scriptCalls(admin);
  const running = Array.from({ length: waiters }, () =>
    poller().catch((error: Error) => {
      failures.push(error);
    }),
  );
  const arrival = new Latency();
  const scriptsPerPublish: number[] = [];
  try {
    // Every long poll has looked once (one pull script each) and sleeps.
    const giveUpAt = Date.now() + options.timeoutMs;
    while ((await scriptCalls(admin)) - initialScripts < waiters) {
      if (Date.now() > giveUpAt) throw new Error(`${options.workload}: the long polls did not all start`);
      await sleep(50);
    }
    // Quiet for longer than a dropped SYN takes to be sent again (1 s): with a thousand
    // connections opened at once, some may arrive late and make their first look in a round.
    await scriptsQuiet(admin, 1500, options.timeoutMs);
    const started = performance.now();
    for (let round = 0; round < rounds; round++) {
      let endRound!: () => void;
      roundOver = new Promise((resolve) => (endRound = resolve));
      const got = new Promise<{ message: PulledMessage; atMs: number }>((resolve) => (arrived = resolve));
      const before = await scriptCalls(admin);
      const ranOutBefore = ranOut;
      const sentAt = performance.now();
      await polls.json('POST', `${topicPath(options.topicId)}:publish`, {
        messages: [{ data: Buffer.from(`round ${round}`).toString('base64') }],
      });
      const { message, atMs } = await got;
      arrival.record(atMs - sentAt);
      await sleep(SETTLE_MS);
      // Less the publish itself.
      const scripts = (await scriptCalls(admin)) - before - 1;
      if (ranOut === ranOutBefore) scriptsPerPublish.push(scripts);
      await polls.json('POST', `${subscriptionPath(options.subscriptionId)}:acknowledge`, { ackIds: [message.ackId] });
      // The long poll that got it waits again; the next round starts once it is asleep.
      endRound();
      await scriptsQuiet(admin, 100, options.timeoutMs);
      if (failures.length > 0) throw failures[0];
    }
    const seconds = (performance.now() - started) / 1000;
    if (scriptsPerPublish.length === 0) throw new Error(`${options.workload}: every round had a long poll run out`);
    const mean = scriptsPerPublish.reduce((sum, n) => sum + n, 0) / scriptsPerPublish.length;
    return {
      workload: options.workload,
      messages: rounds,
      seconds,
      msgPerSec: rounds / seconds,
      latency: { 'publish->arrival': arrival.summary() },
      notes: {
        waitingLongPolls: waiters,
        scriptsPerPublishMean: Math.round(mean * 100) / 100,
        scriptsPerPublishMax: Math.max(...scriptsPerPublish),
        roundsCounted: scriptsPerPublish.length,
      },
    };
  } finally {
    stopping = true;
    polls.close();
    await Promise.race([Promise.all(running), sleep(1000)]);
  }
}
