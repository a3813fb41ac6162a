// Streaming pull over WebSocket and DetachSubscription: a stream open on the subscription when it
// is detached ends with FAILED_PRECONDITION (an error frame, then close 4009), idle or not, and a
// new stream on it is refused the same way. The broker listens for REST, WebSocket and gRPC on one
// port (test/grpc/_client.ts).

import t from 'tap';
import { b64 } from '../helpers/app.ts';
import { P, startGrpcBroker, subName } from '../grpc/_client.ts';
import { sleep, StreamClient } from './_ws.ts';

const detached = {
  error: {
    code: 400,
    status: 'FAILED_PRECONDITION',
    message: `The subscription ${subName('sub')} is detached from its topic: it has no messages to pull or acknowledge.`,
  },
};

t.test('a detach ends the streams of the subscription with FAILED_PRECONDITION (4009)', async (t) => {
  // Heartbeats (which re-read the subscription too) far apart: the streams learn of the detach
  // from the topic's config wake-up.
  const b = await startGrpcBroker(t, { heartbeatMs: 20_000 });
  await b.ok('PUT', `/v1/projects/${P}/topics/top`, {});
  await b.ok('PUT', `/v1/projects/${P}/subscriptions/sub`, { topic: `projects/${P}/topics/top` });
  const url = `ws://127.0.0.1:${b.port}/v1/projects/${P}/subscriptions/sub:streamingPull`;
  const open = async () => {
    const client = await StreamClient.connect(url);
    t.teardown(() => client.terminate());
    client.send({ streamAckDeadlineSeconds: 60 });
    await client.take((frame) => frame?.subscriptionProperties !== undefined, 3000, 'subscriptionProperties');
    return client;
  };
  const idle = await open();
  const holding = await open();
  await b.ok('POST', `/v1/projects/${P}/topics/top:publish`, { messages: [{ data: b64('held') }] });
  const [message] = await Promise.race([idle, holding].map((client) => client.takeMessages(1)));
  t.ok(message.ackId, 'one stream holds a message when the subscription is detached');
  await sleep(100);

  await b.ok('POST', `/v1/projects/${P}/subscriptions/sub:detach`);
  for (const [what, client] of [
    ['an idle stream', idle],
    ['a stream holding a message', holding],
  ] as const) {
    const close = await client.waitClose(2000);
    t.equal(close.code, 4009, `${what}: closed with 4009 within 2 s, with no publish`);
    // The reason is the error envelope, its message shortened to fit a close frame.
    t.match(
      JSON.parse(close.reason),
      { error: { code: 400, status: 'FAILED_PRECONDITION' } },
      `${what}: the close reason is the error`,
    );
    t.strictSame(client.frames.at(-1), detached, `${what}: after an error frame`);
  }

  const late = await StreamClient.connect(url);
  t.teardown(() => late.terminate());
  late.send({ streamAckDeadlineSeconds: 60 });
  const close = await late.waitClose(2000);
  t.equal(close.code, 4009, 'a stream opened after the detach is refused with 4009');
  t.strictSame(late.frames, [detached], 'with the error frame only');
});

t.test('a busy stream, pulling when the subscription is detached, ends with FAILED_PRECONDITION too', async (t) => {
  const b = await startGrpcBroker(t, { heartbeatMs: 20_000 });
  await b.ok('PUT', `/v1/projects/${P}/topics/top`, {});
  await b.ok('PUT', `/v1/projects/${P}/subscriptions/sub`, { topic: `projects/${P}/topics/top` });
  const client = await StreamClient.connect(
    `ws://127.0.0.1:${b.port}/v1/projects/${P}/subscriptions/sub:streamingPull`,
  );
  t.teardown(() => client.terminate());
  // Every message is acked as it comes, so that the stream keeps pulling while messages flow.
  client.onFrame = (frame) => {
    if (frame?.receivedMessages) client.send({ ackIds: frame.receivedMessages.map((m: { ackId: string }) => m.ackId) });
  };
  client.send({ streamAckDeadlineSeconds: 60 });
  let publishing = true;
  const publisher = (async () => {
    while (publishing) {
      const messages = Array.from({ length: 20 }, (_, i) => ({ data: b64(`m${i}`) }));
      await b.api('POST', `/v1/projects/${P}/topics/top:publish`, { messages });
    }
  })();
  await sleep(300);
  await b.ok('POST', `/v1/projects/${P}/subscriptions/sub:detach`);
  const close = await client.waitClose(2000);
  publishing = false;
  await publisher;
  t.ok(
    client.frames.some((frame) => frame?.receivedMessages),
    'messages were flowing',
  );
  t.equal(close.code, 4009, 'closed with FAILED_PRECONDITION, not NOT_FOUND');
});
