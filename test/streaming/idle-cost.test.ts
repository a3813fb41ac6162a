// Idle streams: each heartbeat tick of an open stream looks at its subscription's record (so that
// an idle stream learns of a PATCH, a delete or a detach without a publish), from the one copy
// of the records its process keeps (subscription-records.ts), checked once per tick however many
// streams are open: no stream reads its record itself. Counted, never timed.

import { Redis } from 'ioredis';
import t from 'tap';
import { createBroker } from '../../src/broker/broker.ts';
import type { CallContext } from '../../src/broker/call-context.ts';
import type { StreamingPullResponse } from '../../src/broker/streaming.ts';
import type { ApiError } from '../../src/errors.ts';
import { countCommands } from '../helpers/commands.ts';
import { watchScripts } from '../helpers/script-calls.ts';
import { testRedisUrl, uniquePrefix } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';

const caller: CallContext = { endpoint: 'internal', region: '' };
const HEARTBEAT_MS = 200;
const TICK_MS = HEARTBEAT_MS / 2;
const SUBSCRIPTIONS = 20;
const STREAMS_PER_SUBSCRIPTION = 10;
const name = (kind: 'topics' | 'subscriptions', id: string) => ({ project: 'p', id, full: `projects/p/${kind}/${id}` });

t.test(
  'idle streams share one look at the subscription records per tick, and still learn of a delete or a detach',
  async (t) => {
    const redis = new Redis(testRedisUrl());
    t.teardown(() => redis.disconnect());
    const broker = await createBroker({
      redis,
      keyPrefix: uniquePrefix('idle-streams'),
      streamHeartbeatMs: HEARTBEAT_MS,
    });
    t.teardown(() => broker.close());
    await broker.topics.create(caller, name('topics', 'idle'), {});
    for (let s = 0; s < SUBSCRIPTIONS; s++) {
      await broker.subscriptions.create(caller, name('subscriptions', `idle-${s}`), {
        topic: 'projects/p/topics/idle',
      });
    }
    const scripts = watchScripts();
    t.teardown(() => scripts.stop());
    const streams: { subscription: number; opened: boolean; closed?: ApiError }[] = [];
    for (let s = 0; s < SUBSCRIPTIONS; s++) {
      for (let i = 0; i < STREAMS_PER_SUBSCRIPTION; i++) {
        const stream: (typeof streams)[number] = { subscription: s, opened: false };
        streams.push(stream);
        const session = broker.streams.open(caller, name('subscriptions', `idle-${s}`), {
          send(response: StreamingPullResponse) {
            if (response.subscriptionProperties) stream.opened = true;
            return true;
          },
          close: (error: ApiError) => void (stream.closed = error),
        });
        session.receive(() => ({ streamAckDeadlineSeconds: 60 }));
      }
    }
    t.ok(await waitUntil(() => streams.every((stream) => stream.opened), 10_000), `${streams.length} streams open`);

    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
    // Each stream's first look (a pull) may still be under way on a loaded machine: counted from
    // the first stretch of a few ticks in which no stream pulled.
    for (let stretch = 0; stretch < 50; stretch++) {
      const settling = countCommands(redis);
      await sleep(4 * TICK_MS);
      settling.stop();
      if (settling.of('EVALSHA') <= SUBSCRIPTIONS) break;
    }
    const count = countCommands(redis);
    const startedAt = Date.now();
    await sleep(8 * TICK_MS);
    count.stop();
    const ticks = Math.ceil((Date.now() - startedAt) / TICK_MS);
    t.equal(count.of('HGET'), 0, 'no stream reads its subscription record');
    const counted = JSON.stringify(Object.fromEntries(count.byName));
    // One GET of the records' count of changes per tick (each stream ticked at least 7 times).
    t.ok(count.of('GET') <= ticks + 2, `${count.of('GET')} GETs in ${ticks} ticks (${counted})`);
    // A stream's tick records its subscription's use (its expiration counts from it) once in the process.
    t.ok(count.of('EVALSHA') <= SUBSCRIPTIONS, `at most one touch per subscription (${counted})`);
    t.equal(count.total(), count.of('GET') + count.of('EVALSHA'), `nothing else (${counted})`);
    scripts.stop();
    const touches = scripts.scripts.filter((name) => name === 'touch-subscription').length;
    t.ok(touches <= SUBSCRIPTIONS, `${touches} touches since the streams opened: at most one per subscription`);

    // A change's wake-up is what streams hear first; without it (lost, or published in another
    // region), the heartbeat's look still ends the streams of a deleted or detached subscription.
    const publish = redis.publish;
    redis.publish = (async () => 0) as unknown as typeof redis.publish;
    await broker.subscriptions.detach(caller, name('subscriptions', 'idle-0'));
    await broker.subscriptions.delete(caller, name('subscriptions', 'idle-1'));
    redis.publish = publish;
    const ended = (s: number) =>
      streams.filter((stream) => stream.subscription === s).map((stream) => stream.closed?.status);
    t.ok(
      await waitUntil(() => [0, 1].every((s) => ended(s).every((status) => status !== undefined)), 10_000),
      'every stream of the detached and the deleted subscription ended',
    );
    t.same(new Set(ended(0)), new Set(['FAILED_PRECONDITION']), 'the streams of the detached one: FAILED_PRECONDITION');
    t.same(new Set(ended(1)), new Set(['NOT_FOUND']), 'the streams of the deleted one: NOT_FOUND');
    t.ok(
      streams.filter((stream) => stream.subscription > 1).every((stream) => stream.closed === undefined),
      'the other streams stay open',
    );
  },
);
