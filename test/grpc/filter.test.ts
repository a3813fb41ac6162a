// Subscription filters through the official Node client over gRPC (PUBSUB_EMULATOR_HOST only): a
// filter set at creation reads back, a malformed one is refused with INVALID_ARGUMENT, and the
// streaming subscriber receives only the messages whose attributes match.

import t from 'tap';
import { waitUntil } from '../helpers/wait.ts';
import { type GoogleError, listeningBroker, type Message, pubsubFor, rejection, unique } from './_official.ts';

const broker = await listeningBroker(t, 'grpc-filter');
const pubsub = pubsubFor(broker.host);
t.teardown(() => pubsub.close());

t.test('a filtered subscription receives only what matches', async (t) => {
  const [topic] = await pubsub.createTopic(unique('filter-topic'));
  const filter = 'attributes.region = "eu" AND NOT attributes:test';
  const [subscription] = await topic.createSubscription(unique('filter-sub'), { filter });
  t.teardown(async () => {
    await subscription.close();
    await subscription.delete();
    await topic.delete();
  });
  const [metadata] = await subscription.getMetadata();
  t.equal(metadata.filter, filter, 'the filter reads back');

  const published: { data: string; attributes?: Record<string, string> }[] = [
    { data: 'eu-1', attributes: { region: 'eu' } },
    { data: 'us-1', attributes: { region: 'us' } },
    { data: 'eu-test', attributes: { region: 'eu', test: '1' } },
    { data: 'none', attributes: undefined },
    { data: 'eu-2', attributes: { region: 'eu' } },
  ];
  for (const { data, attributes } of published) await topic.publishMessage({ data: Buffer.from(data), attributes });

  const received: string[] = [];
  subscription.on('message', (message: Message) => {
    received.push(message.data.toString());
    message.ack();
  });
  t.ok(await waitUntil(() => received.length >= 2, 10_000), 'the matching messages arrive');
  await new Promise((resolve) => setTimeout(resolve, 500));
  t.strictSame(received.sort(), ['eu-1', 'eu-2'], 'and only those');
});

t.test('a malformed filter is refused with INVALID_ARGUMENT', async (t) => {
  const [topic] = await pubsub.createTopic(unique('filter-bad'));
  t.teardown(() => topic.delete());
  const error = await rejection<GoogleError>(() =>
    topic.createSubscription(unique('bad'), { filter: 'attributes.k = v' }),
  );
  t.equal(error.code, 3, 'INVALID_ARGUMENT');
  t.match(error.message, /filter/i);
});
