// The cost of a backlog page does not grow with the backlog (README.md, "Queryable backlog"):
// paged through a backlog of 100 and one of 6,000 messages in every state, on an unordered and
// an ordered subscription, every page examines at most about two page sizes of stored entries
// (plus a binary search of log2(n) entries to find where the last page ended), and costs the
// broker a number of Redis calls bounded by the page size, whatever the backlog. Counted, never timed: the
// script reports the entries Redis handed it, and the broker's connection counts its commands.

import t from 'tap';
import type { ListBacklogRequest } from '../../src/broker/backlog.ts';
import { resourceName } from '../../src/broker/names.ts';
import { b64, okApi, startBroker } from '../helpers/app.ts';
import { redisTargets } from '../helpers/redis.ts';

const PAGE = 10;

t.test('a page examines a bounded number of entries, whatever the backlog', async (t) => {
  const target = redisTargets()[0];
  const broker = await startBroker(t, { target, name: 'backlog-cost' });
  const { api, app } = broker;
  const ok = okApi(api);
  let commands = 0;
  const sendCommand = broker.redis.sendCommand;
  broker.redis.sendCommand = function (this: unknown, ...args: unknown[]) {
    commands++;
    return Reflect.apply(sendCommand, this, args);
  } as typeof sendCommand;

  /** A backlog of `size` messages in every state on two subscriptions (one ordered) of its topic. */
  const build = async (name: string, size: number) => {
    const topic = `/v1/projects/p/topics/${name}`;
    await ok('PUT', topic, {});
    const retry = { retryPolicy: { minimumBackoff: '600s', maximumBackoff: '600s' } };
    for (const [id, ordered] of [
      [`${name}-plain`, false],
      [`${name}-ordered`, true],
    ] as const) {
      await ok('PUT', `/v1/projects/p/subscriptions/${id}`, {
        topic: `projects/p/topics/${name}`,
        enableMessageOrdering: ordered,
        ...retry,
      });
    }
    const batch = Math.min(size / 6, 1000);
    for (let published = 0; published < size; published += batch) {
      const part = (published / batch) % 3;
      const messages = Array.from({ length: batch }, (_, i) => ({
        data: b64(`m${published + i}`),
        ...(part === 1 ? { orderingKey: `key-${published}` } : {}),
        ...(part === 2 ? { deliveryDelay: '3600s' } : {}),
      }));
      await ok('POST', `${topic}:publish`, { messages });
    }
    for (const id of [`${name}-plain`, `${name}-ordered`]) {
      // A third leased, and half of those nacked into their backoff.
      const pulled = await ok('POST', `/v1/projects/p/subscriptions/${id}:pull`, {
        maxMessages: Math.min(size / 3, 1000),
        returnImmediately: true,
      });
      const ackIds = (pulled.receivedMessages ?? []).map((m: any) => m.ackId);
      await ok('POST', `/v1/projects/p/subscriptions/${id}:modifyAckDeadline`, {
        ackIds: ackIds.slice(0, ackIds.length / 2),
        ackDeadlineSeconds: 0,
      });
    }
  };

  /** Pages through a subscription: the most entries and Redis calls one page cost, and what it saw. */
  const walk = async (id: string, conditions: Partial<ListBacklogRequest> = {}) => {
    const name = resourceName('subscriptions', 'p', id);
    let token = '';
    let mostExamined = 0;
    let mostCommands = 0;
    const seen = new Set<string>();
    const states = new Set<string>();
    let pages = 0;
    do {
      pages++;
      const before = commands;
      const page = await app.broker.backlog.list({} as never, name, {
        states: [],
        orderingKey: '',
        filter: '',
        pageSize: PAGE,
        pageToken: token,
        view: 'BASIC',
        ...conditions,
      });
      mostCommands = Math.max(mostCommands, commands - before);
      mostExamined = Math.max(mostExamined, page.examined);
      for (const item of page.messages) {
        seen.add(item.message.messageId);
        states.add(item.state);
      }
      token = page.nextPageToken ?? '';
    } while (token && pages < 2000); // a walk that never ends fails at once
    return { mostExamined, mostCommands, pages, seen: seen.size, states: [...states].sort() };
  };

  await build('cost-small', 120);
  await build('cost-large', 6000);
  for (const kind of ['plain', 'ordered']) {
    const small = await walk(`cost-small-${kind}`);
    const large = await walk(`cost-large-${kind}`);
    t.equal(small.seen, 120, `${kind}: every message of the small backlog`);
    t.equal(large.seen, 6000, `${kind}: every message of the large backlog`);
    t.same(large.states, ['AVAILABLE', 'BACKOFF', 'LEASED', 'SCHEDULED'], `${kind}: in every state`);
    // Full pages: finding where the last page ended takes nothing from the next one.
    t.ok(large.pages <= 6000 / PAGE + 5, `${kind}: ${large.pages} pages of ${PAGE} for 6000 messages`);
    const bound = 2 * PAGE + Math.ceil(Math.log2(6000)) + 1;
    t.ok(large.mostExamined <= bound, `${kind}: a page examined at most ${large.mostExamined} <= ${bound} entries`);
    // The record, the script, and one HMGET per body block the page's messages are in.
    t.ok(
      large.mostCommands <= 2 + PAGE && small.mostCommands <= 2 + PAGE,
      `${kind}: a page costs at most ${large.mostCommands} Redis calls on the large backlog, ${small.mostCommands} on the small`,
    );
    // A selective condition makes pages short, not dear.
    const filtered = await walk(`cost-large-${kind}`, { filter: 'attributes.none = "x"' });
    t.equal(filtered.seen, 0, `${kind}: the filter takes nothing`);
    t.ok(filtered.mostExamined <= bound, `${kind}: filtered pages examine at most ${filtered.mostExamined} entries`);
  }
});
