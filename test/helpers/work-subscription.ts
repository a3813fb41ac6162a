// Consumers of one subscription ('work' on topic 'jobs') through the broker core, in the test's
// own process: long polls, and streams on a transport that records what it gets and acks it after
// a delay. Used by the wake-up and leaser tests (src/broker/wakeups.ts, src/broker/leaser.ts).

import type { Test } from 'tap';
import type { CallContext } from '../../src/broker/call-context.ts';
import { parseResourceName } from '../../src/broker/names.ts';
import type { ReceivedMessage } from '../../src/broker/pull.ts';
import type { StreamingPullResponse, StreamingSession } from '../../src/broker/streaming.ts';
import { b64, startBroker, type TestBroker } from './app.ts';

const P = '/v1/projects/p';
export const WORK = parseResourceName('subscriptions', 'projects/p/subscriptions/work');
export const caller = (signal?: AbortSignal): CallContext => ({ endpoint: 'internal', region: '', signal });

/** A broker with the topic 'jobs' and its subscription 'work' (with `settings`); long polls wait a minute. */
export async function workBroker(t: Test, name: string, settings: object = {}): Promise<TestBroker> {
  const broker = await startBroker(t, { name, pullWaitMs: 60_000 });
  await broker.api('PUT', `${P}/topics/jobs`, {});
  await broker.api('PUT', `${P}/subscriptions/work`, { topic: 'projects/p/topics/jobs', ...settings });
  return broker;
}

export const publish = (broker: TestBroker, texts: string[], orderingKey?: string) =>
  broker.api('POST', `${P}/topics/jobs:publish`, {
    messages: texts.map((text) => ({ data: b64(text), ...(orderingKey === undefined ? {} : { orderingKey }) })),
  });

export const textOf = (received: ReceivedMessage) => received.message.data?.toString() ?? '';

/** How many of `scripts` are pull scripts. */
export const pullScripts = (scripts: string[]) => scripts.filter((name) => name === 'pull').length;

/** Long polls of the work subscription, `maxMessages` each; abort() ends those still waiting. */
export function longPolls(broker: TestBroker, count: number, maxMessages: number) {
  const stop = new AbortController();
  const answers: ReceivedMessage[][] = [];
  const done = Array.from({ length: count }, () =>
    broker.app.broker.delivery
      .pull(caller(stop.signal), WORK, { maxMessages })
      .then((received) => void answers.push(received)),
  );
  return {
    answers,
    /** The long polls that answered with messages. */
    answered: () => answers.filter((received) => received.length > 0),
    abort: async () => {
      stop.abort();
      await Promise.all(done);
    },
  };
}

export interface TestStream {
  /** The texts received, in order. */
  received: string[];
  ackIds: string[];
  acked(): number;
  session: StreamingSession;
  close(): void;
}

/**
 * A stream of the work subscription on a transport that acks what it gets after `ackDelayMs()`
 * (never, when that is undefined); `onMessages` sees each frame's messages first.
 */
export function openStream(
  broker: TestBroker,
  maxOutstandingMessages: number,
  ackDelayMs: () => number | undefined,
  onMessages?: (messages: ReceivedMessage[]) => void,
): TestStream {
  const received: string[] = [];
  const ackIds: string[] = [];
  let acked = 0;
  const session = broker.app.broker.streams.open(caller(), WORK, {
    send(response: StreamingPullResponse) {
      const messages = response.receivedMessages ?? [];
      if (messages.length === 0) return true;
      onMessages?.(messages);
      received.push(...messages.map(textOf));
      const batch = messages.map((message) => message.ackId);
      ackIds.push(...batch);
      const delayMs = ackDelayMs();
      if (delayMs === undefined) return true;
      setTimeout(() => {
        session.receive(() => ({ ackIds: batch }));
        acked += batch.length;
      }, delayMs);
      return true;
    },
    close() {},
  });
  session.receive(() => ({ streamAckDeadlineSeconds: 60, maxOutstandingMessages }));
  return {
    received,
    ackIds,
    acked: () => acked,
    session,
    close: () => broker.app.broker.streams.closed(session),
  };
}
