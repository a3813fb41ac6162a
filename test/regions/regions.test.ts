// Regions in one process: three regions (a, b, c), each with its own redis-server and its own
// broker app. Global metadata, publish anywhere / pull anywhere, acks through any region, the
// storage policy and enforceInTransit, a region's Redis going down and coming back, and the
// backlog metric. The multi-process run with random traffic is multi-region-processes.test.ts.

import t from 'tap';
import { b64, unb64 } from '../helpers/app.ts';
import { unackedByRegion } from '../helpers/metrics.ts';
import { startRegions, type Deployment } from '../helpers/regions.ts';
import { waitUntil } from '../helpers/wait.ts';
import { StreamClient } from '../streaming/_ws.ts';

const P = '/v1/projects/p';
const topicPath = (id: string) => `${P}/topics/${id}`;
const subPath = (id: string) => `${P}/subscriptions/${id}`;

const ORDERED_FORWARD_REFUSAL =
  "Cannot publish messages that contain ordering keys to topic projects/p/topics/only-a due a message storage policy on the topic that would require the messages to be forwarded to another region. Please either change the topic's message storage policy or publish to an allowed region using the appropriate regional Cloud Pub/Sub endpoint.";

async function publish(d: Deployment, region: string, topic: string, texts: string[], orderingKey?: string) {
  const messages = texts.map((text) => ({ data: b64(text), ...(orderingKey ? { orderingKey } : {}) }));
  return d.api(region, 'POST', `${topicPath(topic)}:publish`, { messages });
}

async function pullAll(d: Deployment, region: string, sub: string, max = 100) {
  const { status, body } = await d.api(region, 'POST', `${subPath(sub)}:pull`, {
    maxMessages: max,
    returnImmediately: true,
  });
  if (status !== 200) throw new Error(`pull through ${region}: ${status} ${JSON.stringify(body)}`);
  return (body.receivedMessages ?? []) as { ackId: string; message: { messageId: string; data?: string } }[];
}

async function backlog(d: Deployment, region: string, sub: string): Promise<Record<string, number>> {
  const { body } = await d.api(region, 'GET', '/metrics');
  return Object.fromEntries(unackedByRegion(String(body), `projects/p/subscriptions/${sub}`));
}

t.test('regions', async (t) => {
  // Long polls wait up to 10 s: a pull woken by a publish answers long before that.
  const d = await startRegions(t, ['a', 'b', 'c'], { pullWaitMs: 10_000 });

  t.test('metadata made through any region is visible through every region when the call returns', async (t) => {
    t.equal((await d.api('a', 'PUT', topicPath('meta'), { labels: { v: '1' } })).status, 200);
    for (const region of ['a', 'b', 'c']) {
      t.same((await d.api(region, 'GET', topicPath('meta'))).body.labels, { v: '1' }, `topic through ${region}`);
    }
    t.equal(
      (await d.api('c', 'PATCH', topicPath('meta'), { topic: { labels: { v: '2' } }, updateMask: 'labels' })).status,
      200,
    );
    t.same((await d.api('a', 'GET', topicPath('meta'))).body.labels, { v: '2' }, 'an update through c, read through a');
    t.equal((await d.api('b', 'PUT', subPath('meta-sub'), { topic: 'projects/p/topics/meta' })).status, 200);
    t.same((await d.api('c', 'GET', `${topicPath('meta')}/subscriptions`)).body, {
      subscriptions: ['projects/p/subscriptions/meta-sub'],
    });
    t.equal(
      (await d.api('a', 'PUT', subPath('meta-sub'), { topic: 'projects/p/topics/meta' })).status,
      409,
      'a duplicate through another region',
    );
    t.equal((await d.api('a', 'DELETE', topicPath('meta'))).status, 200);
    t.equal((await d.api('c', 'GET', topicPath('meta'))).status, 404, 'the delete reached c');
    t.equal((await d.api('b', 'GET', subPath('meta-sub'))).body.topic, '_deleted-topic_');
    const orphanPull = await d.api('b', 'POST', `${subPath('meta-sub')}:pull`, {
      maxMessages: 1,
      returnImmediately: true,
    });
    t.same([orphanPull.status, orphanPull.body], [200, {}], 'a subscription of a deleted topic can still be pulled');
    t.equal((await d.api('c', 'DELETE', subPath('meta-sub'))).status, 200);
    t.equal((await d.api('a', 'GET', subPath('meta-sub'))).status, 404);
    // Created again after the delete: the tombstone's higher version does not hide the new one.
    t.equal((await d.api('b', 'PUT', topicPath('meta'), {})).status, 200, 'a deleted name can be created again');
    t.equal((await d.api('a', 'GET', topicPath('meta'))).status, 200);
    await d.api('a', 'PUT', subPath('meta-sub'), { topic: 'projects/p/topics/meta' });
    t.equal(
      (
        await d.api('c', 'PATCH', subPath('meta-sub'), {
          subscription: { ackDeadlineSeconds: 42 },
          updateMask: 'ackDeadlineSeconds',
        })
      ).status,
      200,
    );
    for (const region of ['a', 'b', 'c']) {
      const { ctx } = d.brokers.get(region)!.app.broker;
      const record = JSON.parse((await ctx.redis.hget(ctx.keys.subscriptions, 'projects/p/subscriptions/meta-sub'))!);
      const config = ctx.keys.topicData(record.topicUid).subscription(record.uid).config;
      t.equal(
        await ctx.redis.hget(config, 'ackDeadlineUs'),
        '42000000',
        `the update reached the delivery settings in ${region}`,
      );
      t.equal(await ctx.redis.zcard(ctx.keys.pendingCleanups), 0, `no clean-up left pending in ${region}`);
    }
  });

  t.test('two creates of one name through different regions at once: exactly one wins', async (t) => {
    for (let round = 0; round < 5; round++) {
      const id = `race-${round}`;
      const results = await Promise.all(['a', 'b', 'c'].map((region) => d.api(region, 'PUT', topicPath(id), {})));
      t.same(results.map((r) => r.status).sort(), [200, 409, 409], `round ${round}`);
    }
  });

  t.test('two nodes that disagree on the arbiter (one has not synced it yet): still one create wins', async (t) => {
    // Broker b does not count region a as usable yet, as while a's Redis is coming back, so it
    // decides at b while broker a decides at a.
    const aSeenFromB = d.brokers.get('b')!.app.broker.regions.byName('a')!;
    aSeenFromB.synced = false;
    t.teardown(() => void d.brokers.get('b')!.app.broker.controlPlane.requestSync());
    for (let round = 0; round < 10; round++) {
      const id = `split-${round}`;
      const [viaA, viaB] = await Promise.all(
        ['a', 'b'].map((region) =>
          d.api(region, 'PUT', subPath(id), { topic: 'projects/p/topics/race-0', labels: { via: region } }),
        ),
      );
      const winners = [viaA, viaB].filter((response) => response.status === 200);
      t.equal(winners.length, 1, `round ${round}: one 200 (${viaA.status}, ${viaB.status})`);
      t.equal([viaA, viaB].find((response) => response.status !== 200)?.body.error.status, 'ALREADY_EXISTS');
      await d.brokers.get('c')!.app.broker.controlPlane.requestSync();
      for (const region of ['a', 'b', 'c']) {
        const { body } = await d.api(region, 'GET', subPath(id));
        t.same(
          body.labels,
          winners[0]?.body.labels,
          `round ${round}: region ${region} holds the winner's subscription`,
        );
      }
    }
  });

  t.test(
    'publish through every region, pull through one: all arrive, the local region first; acks anywhere',
    async (t) => {
      await d.api('a', 'PUT', topicPath('spread'), {});
      await d.api('a', 'PUT', subPath('spread-eo'), {
        topic: 'projects/p/topics/spread',
        enableExactlyOnceDelivery: true,
      });
      for (const region of ['a', 'b', 'c']) {
        const { body } = await publish(d, region, 'spread', [`from ${region}`]);
        t.match(body.messageIds, [new RegExp(`^${region}-\\d+$`)], `the message ID names region ${region}`);
      }
      t.same(await backlog(d, 'a', 'spread-eo'), { a: 1, b: 1, c: 1 }, 'one message stored in each region');
      const received = await pullAll(d, 'b', 'spread-eo');
      t.same(
        received.map((m) => unb64(m.message.data)),
        ['from b', 'from a', 'from c'],
        'b first, then the others in name order',
      );
      t.ok(
        received.every((m) => m.ackId.startsWith(`${m.message.messageId.split('-')[0]}.`)),
        'ack IDs name the region',
      );

      // Every ack through a region that does not store the message.
      const ack = await d.api('c', 'POST', `${subPath('spread-eo')}:acknowledge`, {
        ackIds: received.map((m) => m.ackId),
      });
      t.same(ack, { status: 200, body: {} });
      const again = await d.api('a', 'POST', `${subPath('spread-eo')}:acknowledge`, {
        ackIds: received.map((m) => m.ackId),
      });
      t.equal(again.status, 400, 'acked twice: exactly-once refuses');
      t.same(Object.values(again.body.error.details[0].metadata), Array(3).fill('PERMANENT_FAILURE_INVALID_ACK_ID'));
      t.same(await backlog(d, 'b', 'spread-eo'), { a: 0, b: 0, c: 0 });

      // The tag covers the region: an ack ID moved to another region is not ours.
      await publish(d, 'a', 'spread', ['moved']);
      const [moved] = await pullAll(d, 'a', 'spread-eo');
      const forged = `b${moved.ackId.slice(1)}`;
      const refused = await d.api('a', 'POST', `${subPath('spread-eo')}:acknowledge`, { ackIds: [forged] });
      t.same(refused.body.error.details[0].metadata, { [forged]: 'PERMANENT_FAILURE_INVALID_ACK_ID' });
      t.same(
        (
          await d.api('b', 'POST', `${subPath('spread-eo')}:modifyAckDeadline`, {
            ackIds: [moved.ackId],
            ackDeadlineSeconds: 0,
          })
        ).body,
        {},
      );
      const [back] = await pullAll(d, 'c', 'spread-eo');
      t.equal(back.message.messageId, moved.message.messageId, 'a nack through b made the message available again');
      t.same((await d.api('b', 'POST', `${subPath('spread-eo')}:acknowledge`, { ackIds: [back.ackId] })).body, {});
    },
  );

  t.test('a long-polling pull through one region is woken by a publish through another', async (t) => {
    await d.api('b', 'PUT', topicPath('wake'), {});
    await d.api('b', 'PUT', subPath('wake-sub'), { topic: 'projects/p/topics/wake' });
    const pulling = d.api('a', 'POST', `${subPath('wake-sub')}:pull`, { maxMessages: 5 });
    await new Promise((resolve) => setTimeout(resolve, 50));
    await publish(d, 'c', 'wake', ['late']);
    // Without the wake-up the pull would still find the message, but only at the end of its wait.
    let bound: NodeJS.Timeout | undefined;
    const result = await Promise.race([
      pulling,
      new Promise<'waited out'>((resolve) => (bound = setTimeout(resolve, 5_000, 'waited out'))),
    ]);
    clearTimeout(bound);
    t.not(result, 'waited out', 'the publish woke the pull');
    if (result === 'waited out') return;
    t.same(
      result.body.receivedMessages?.map((m: any) => unb64(m.message.data)),
      ['late'],
    );
  });

  t.test('a stream through one region receives messages published through the others', async (t) => {
    await d.api('a', 'PUT', topicPath('streamed'), {});
    await d.api('a', 'PUT', subPath('streamed-sub'), {
      topic: 'projects/p/topics/streamed',
      enableExactlyOnceDelivery: true,
    });
    const app = d.brokers.get('b')!.app;
    const address = await app.listen({ port: 0, host: '127.0.0.1' });
    const client = await StreamClient.connect(
      `${address.replace('http', 'ws')}${subPath('streamed-sub')}:streamingPull`,
    );
    t.teardown(() => client.ws.terminate());
    client.send({ streamAckDeadlineSeconds: 60 });
    await publish(d, 'a', 'streamed', ['via a']);
    await publish(d, 'c', 'streamed', ['via c']);
    const messages = await client.takeMessages(2, 5000);
    t.same(messages.map((m) => unb64(m.message.data)).sort(), ['via a', 'via c']);
    client.send({ ackIds: messages.map((m) => m.ackId) });
    const confirmation = await client.take((frame) => frame.acknowledgeConfirmation);
    t.same(
      confirmation.acknowledgeConfirmation.ackIds.sort(),
      messages.map((m) => m.ackId).sort(),
      'both acks confirmed',
    );
  });

  t.test('a message dead-lettered through any endpoint is stored in its own region, once', async (t) => {
    await d.api('a', 'PUT', topicPath('dl-source'), {});
    await d.api('a', 'PUT', topicPath('dl-dead'), {});
    await d.api('b', 'PUT', subPath('dl-dead'), { topic: 'projects/p/topics/dl-dead' });
    await d.api('c', 'PUT', subPath('dl-source'), {
      topic: 'projects/p/topics/dl-source',
      deadLetterPolicy: { deadLetterTopic: 'projects/p/topics/dl-dead', maxDeliveryAttempts: 5 },
    });
    await publish(d, 'b', 'dl-source', ['from-b']);
    // Each delivery through another endpoint: the nacks go to region b, where the message is.
    for (const region of ['a', 'c', 'a', 'c', 'a']) {
      const [received] = await pullAll(d, region, 'dl-source');
      t.equal(received?.message.messageId.split('-')[0], 'b', `delivered through ${region}`);
      await d.api(region, 'POST', `${subPath('dl-source')}:modifyAckDeadline`, {
        ackIds: [received.ackId],
        ackDeadlineSeconds: 0,
      });
    }
    t.same(await pullAll(d, 'c', 'dl-source'), [], 'forwarded instead of delivered a sixth time');
    const copies = await pullAll(d, 'a', 'dl-dead');
    t.same(
      copies.map((m) => [m.message.messageId.split('-')[0], unb64(m.message.data)]),
      [['b', 'from-b']],
      'on the dead-letter topic, in region b',
    );
  });

  t.test('a change of messageStoragePolicy applies to the next publish through any endpoint', async (t) => {
    // With regions the broker never reuses a topic record for publishing (DeliveryService rememberTopic).
    t.equal(
      (await d.api('a', 'PUT', topicPath('moving'), { messageStoragePolicy: { allowedPersistenceRegions: ['a'] } }))
        .status,
      200,
    );
    t.match((await publish(d, 'b', 'moving', ['first'])).body.messageIds, [/^a-\d+$/], 'through b, stored in a');
    const moved = await d.api('c', 'PATCH', topicPath('moving'), {
      topic: { messageStoragePolicy: { allowedPersistenceRegions: ['c'] } },
      updateMask: 'messageStoragePolicy',
    });
    t.equal(moved.status, 200);
    await waitUntil(
      async () =>
        (await d.api('b', 'GET', topicPath('moving'))).body.messageStoragePolicy?.allowedPersistenceRegions?.[0] ===
        'c',
      15_000,
      20,
    );
    t.match(
      (await publish(d, 'b', 'moving', ['second'])).body.messageIds,
      [/^c-\d+$/],
      'through b right after the change: stored in c',
    );
  });

  t.test('messageStoragePolicy: forwarding to an allowed region, keyed refusal, enforceInTransit', async (t) => {
    const onlyA = { messageStoragePolicy: { allowedPersistenceRegions: ['a'] } };
    t.equal((await d.api('b', 'PUT', topicPath('only-a'), onlyA)).status, 200);
    await d.api('b', 'PUT', subPath('only-a-sub'), { topic: 'projects/p/topics/only-a', enableMessageOrdering: true });
    const forwarded = await publish(d, 'b', 'only-a', ['forwarded']);
    t.match(forwarded.body.messageIds, [/^a-\d+$/], 'published through b, stored in a');
    t.same(await backlog(d, 'c', 'only-a-sub'), { a: 1, b: 0, c: 0 });
    const keyed = await publish(d, 'b', 'only-a', ['keyed'], 'k1');
    t.same(keyed, {
      status: 400,
      body: { error: { code: 400, message: ORDERED_FORWARD_REFUSAL, status: 'FAILED_PRECONDITION' } },
    });
    t.match(
      (await publish(d, 'a', 'only-a', ['keyed'], 'k1')).body.messageIds,
      [/^a-\d+$/],
      'keyed through the allowed region',
    );
    t.same(
      (await pullAll(d, 'c', 'only-a-sub')).map((m) => unb64(m.message.data)),
      ['forwarded', 'keyed'],
      'pulling is not restricted',
    );

    const enforced = { messageStoragePolicy: { allowedPersistenceRegions: ['a', 'c'], enforceInTransit: true } };
    await d.api('a', 'PUT', topicPath('in-transit'), enforced);
    await d.api('a', 'PUT', subPath('in-transit-sub'), { topic: 'projects/p/topics/in-transit' });
    const refusedPublish = await publish(d, 'b', 'in-transit', ['no']);
    t.equal(refusedPublish.body.error?.status, 'FAILED_PRECONDITION', 'publish through b refused');
    t.match(refusedPublish.body.error.message, /region b is not one of them/);
    const pullThroughB = await d.api('b', 'POST', `${subPath('in-transit-sub')}:pull`, {
      maxMessages: 1,
      returnImmediately: true,
    });
    t.equal(pullThroughB.body.error?.status, 'FAILED_PRECONDITION', 'pull through b refused');
    // Streaming pull through b too (b's app listens since the streaming test above).
    const { port } = d.brokers.get('b')!.app.server.address() as { port: number };
    const stream = await StreamClient.connect(`ws://127.0.0.1:${port}${subPath('in-transit-sub')}:streamingPull`);
    stream.send({ streamAckDeadlineSeconds: 60 });
    const closed = await stream.closed;
    t.equal(closed.code, 4009, 'a stream through b is closed with FAILED_PRECONDITION');
    t.match(closed.reason, /FAILED_PRECONDITION/);
    t.match((await publish(d, 'c', 'in-transit', ['yes'])).body.messageIds, [/^c-\d+$/]);
    const [message] = await pullAll(d, 'a', 'in-transit-sub');
    const ackThroughB = await d.api('b', 'POST', `${subPath('in-transit-sub')}:acknowledge`, {
      ackIds: [message.ackId],
    });
    t.equal(ackThroughB.body.error?.status, 'FAILED_PRECONDITION', 'ack through b refused');
    t.same(
      (await d.api('c', 'POST', `${subPath('in-transit-sub')}:acknowledge`, { ackIds: [message.ackId] })).body,
      {},
    );
    // When b cannot read the topic (its Redis fails right then), the check must not be skipped.
    const topics = d.brokers.get('b')!.app.broker.topics;
    const find = topics.find.bind(topics);
    topics.find = async () => {
      topics.find = find;
      throw new Error('Connection is closed.');
    };
    const unreadable = await d.api('b', 'POST', `${subPath('in-transit-sub')}:pull`, {
      maxMessages: 1,
      returnImmediately: true,
    });
    t.same(
      [unreadable.status, unreadable.body.error?.status],
      [503, 'UNAVAILABLE'],
      'an unreadable topic fails the pull, not the policy',
    );

    const empty = await d.api('a', 'PUT', topicPath('no-region'), {
      messageStoragePolicy: { allowedPersistenceRegions: [] },
    });
    t.equal(empty.status, 400, 'an empty list is refused');
    const unknown = await d.api('a', 'PUT', topicPath('no-region'), {
      messageStoragePolicy: { allowedPersistenceRegions: ['mars'] },
    });
    t.match(unknown.body.error.message, /unknown region mars/);
    const patchEmpty = await d.api('a', 'PATCH', topicPath('only-a'), {
      topic: { messageStoragePolicy: { allowedPersistenceRegions: [] } },
      updateMask: 'messageStoragePolicy',
    });
    t.equal(patchEmpty.status, 400, 'an update to an empty list is refused');
    t.equal((await d.api('c', 'GET', topicPath('no-region'))).status, 404, 'nothing was created');
  });

  t.test("a region's Redis goes down and comes back", async (t) => {
    await d.api('a', 'PUT', topicPath('outage'), {});
    await d.api('a', 'PUT', subPath('outage-sub'), {
      topic: 'projects/p/topics/outage',
      enableExactlyOnceDelivery: true,
    });
    const before = await publish(d, 'c', 'outage', ['stored in c before']);
    t.equal(before.status, 200);
    // Leased through a, not acked yet: its ack must wait for c.
    await publish(d, 'c', 'outage', ['leased from c']);
    const [leased] = (await pullAll(d, 'a', 'outage-sub', 1)).filter(
      (m) => unb64(m.message.data) === 'stored in c before',
    );
    t.ok(leased, 'pulled one message stored in c');

    await d.redis.get('c')!.kill();
    const down = await publish(d, 'c', 'outage', ['nowhere']);
    t.equal(down.status, 503, 'a publish through c fails');
    t.equal(down.body.error.status, 'UNAVAILABLE');
    t.equal(
      (await d.api('c', 'POST', `${subPath('outage-sub')}:pull`, { maxMessages: 1, returnImmediately: true })).status,
      503,
    );
    t.equal((await d.api('c', 'GET', topicPath('outage'))).status, 503, "c's endpoint needs c's Redis");
    const readiness = await d.api('a', 'GET', '/readyz');
    t.same(readiness, {
      status: 200,
      body: {
        status: 'ready',
        region: 'a',
        regions: {
          a: { reachable: true, synced: true },
          b: { reachable: true, synced: true },
          c: { reachable: false, synced: false },
        },
      },
    });
    t.equal((await d.api('c', 'GET', '/readyz')).status, 503);

    // The others keep working, and metadata keeps changing.
    t.match((await publish(d, 'a', 'outage', ['via a while c is down'])).body.messageIds, [/^a-/]);
    t.match((await publish(d, 'b', 'outage', ['via b while c is down'])).body.messageIds, [/^b-/]);
    const during = await pullAll(d, 'b', 'outage-sub');
    t.same(
      during.map((m) => unb64(m.message.data)).sort(),
      ['via a while c is down', 'via b while c is down'],
      "c's messages wait",
    );
    const ackWhileDown = await d.api('a', 'POST', `${subPath('outage-sub')}:acknowledge`, {
      ackIds: [...during.map((m) => m.ackId), leased.ackId],
    });
    t.same(
      ackWhileDown.body.error.details[0].metadata,
      { [leased.ackId]: 'TRANSIENT_FAILURE_OTHER' },
      "only c's ack fails, transiently",
    );
    t.equal((await d.api('a', 'PUT', subPath('outage-new'), { topic: 'projects/p/topics/outage' })).status, 200);
    t.equal(
      (
        await d.api('b', 'PATCH', topicPath('outage'), {
          topic: { labels: { during: 'outage' } },
          updateMask: 'labels',
        })
      ).status,
      200,
    );
    t.equal((await d.api('a', 'DELETE', subPath('spread-eo'))).status, 200);

    await d.redis.get('c')!.start();
    await d.waitReady('c');
    t.same((await d.api('c', 'GET', topicPath('outage'))).body.labels, { during: 'outage' }, 'the update reached c');
    t.equal((await d.api('c', 'GET', subPath('outage-new'))).status, 200, 'the new subscription reached c');
    t.equal((await d.api('c', 'GET', subPath('spread-eo'))).status, 404, 'the delete reached c');
    t.match((await publish(d, 'c', 'outage', ['via c after'])).body.messageIds, [/^c-/]);
    const late = await pullAll(d, 'a', 'outage-new');
    t.same(
      late.map((m) => unb64(m.message.data)),
      ['via c after'],
      'the subscription created while c was down gets what c stores after it returned',
    );

    t.same(
      (await d.api('b', 'POST', `${subPath('outage-sub')}:acknowledge`, { ackIds: [leased.ackId] })).body,
      {},
      'the ack retried after c returned',
    );
    const rest = await pullAll(d, 'a', 'outage-sub');
    t.same(
      rest.map((m) => unb64(m.message.data)).sort(),
      ['leased from c', 'via c after'],
      "c's messages are delivered once it is back",
    );
    t.same(
      (await d.api('a', 'POST', `${subPath('outage-sub')}:acknowledge`, { ackIds: rest.map((m) => m.ackId) })).body,
      {},
    );
    t.same(await backlog(d, 'a', 'outage-sub'), { a: 0, b: 0, c: 0 }, 'nothing left anywhere');
  });

  t.test('a region whose Redis hangs does not stall the others', async (t) => {
    await d.api('a', 'PUT', topicPath('hung'), {});
    await d.api('a', 'PUT', subPath('hung-sub'), { topic: 'projects/p/topics/hung' });
    await publish(d, 'b', 'hung', ['stored in b']);
    d.redis.get('b')!.pause();
    t.teardown(() => d.redis.get('b')!.resume());
    t.match((await publish(d, 'a', 'hung', ['stored in a'])).body.messageIds, [/^a-/], 'a publish through a');
    const readiness = await d.api('c', 'GET', '/readyz');
    t.equal(readiness.status, 200, 'c stays ready');
    t.same(readiness.body.regions.b, { reachable: false, synced: false }, 'b is reported unreachable');
    const received = await pullAll(d, 'c', 'hung-sub');
    t.same(
      received.map((m) => unb64(m.message.data)),
      ['stored in a'],
      "a pull through c skips b's Redis",
    );
    d.redis.get('b')!.resume();
    // The pull through c gave up on b, whose script then ran late and leased b's message to
    // nobody: c nacks it as soon as that answer comes, so it is available again at once.
    let late: Awaited<ReturnType<typeof pullAll>> = [];
    await waitUntil(async () => (late = await pullAll(d, 'a', 'hung-sub')).length > 0, 8_000, 50);
    t.same(
      late.map((m) => unb64(m.message.data)),
      ['stored in b'],
      "b's message, without waiting for the 10 s lease",
    );
  });

  t.test('a region whose Redis lost a copy catches up by the periodic sync', async (t) => {
    await d.api('a', 'PUT', topicPath('healed'), {});
    // Simulate a write that reached a and b but not c (a partition between the writer and c).
    const c = d.brokers.get('c')!.app.broker;
    const { keys } = c.ctx;
    await c.ctx.redis.hdel(keys.topics, 'projects/p/topics/healed');
    await c.ctx.redis.zrem(keys.topicIndex, 'projects/p/topics/healed');
    t.equal((await d.api('c', 'GET', topicPath('healed'))).status, 404, 'c lost it');
    await d.brokers.get('a')!.app.broker.controlPlane.requestSync();
    t.equal((await d.api('c', 'GET', topicPath('healed'))).status, 200, 'a sync by any node restores it');
  });

  t.test('IAM policies are global: set through one region, read through every other, healed by the sync', async (t) => {
    await d.api('a', 'PUT', topicPath('guarded'), {});
    const policy = { bindings: [{ role: 'roles/pubsub.publisher', members: ['user:alice@example.com'] }] };
    const onTopic = await d.api('b', 'POST', `${topicPath('guarded')}:setIamPolicy`, { policy });
    const onProject = await d.api('c', 'POST', '/v1/projects/p:setIamPolicy', { policy: { bindings: [] } });
    t.equal(onTopic.status, 200);
    for (const region of ['a', 'b', 'c']) {
      t.same(
        (await d.api(region, 'GET', `${topicPath('guarded')}:getIamPolicy`)).body,
        onTopic.body,
        `topic policy through ${region}`,
      );
      t.same(
        (await d.api(region, 'GET', '/v1/projects/p:getIamPolicy')).body,
        onProject.body,
        `project policy through ${region}`,
      );
    }
    // A project policy write that missed region c (a partition) reaches it with the next sync.
    const c = d.brokers.get('c')!.app.broker;
    await c.ctx.redis.hdel(c.ctx.keys.projectPolicies, 'projects/p');
    t.same((await d.api('c', 'GET', '/v1/projects/p:getIamPolicy')).body, { version: 1, etag: 'ACAB' }, 'c lost it');
    await d.brokers.get('a')!.app.broker.controlPlane.requestSync();
    t.same((await d.api('c', 'GET', '/v1/projects/p:getIamPolicy')).body, onProject.body, 'the sync restores it');
  });
});
