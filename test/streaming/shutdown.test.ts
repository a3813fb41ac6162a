// A stream that opens while the broker is shutting down (a client reconnecting at that moment)
// is ended with UNAVAILABLE, as the streams that were open are, so that the client reconnects to
// another broker instead of waiting on this one.

import { Redis } from 'ioredis';
import t from 'tap';
import { createBroker } from '../../src/broker/broker.ts';
import type { ApiError } from '../../src/errors.ts';
import { testRedisUrl, uniquePrefix } from '../helpers/redis.ts';
import { waitUntil } from '../helpers/wait.ts';

t.test('a stream opened during shutdown ends with UNAVAILABLE', async (t) => {
  const redis = new Redis(testRedisUrl());
  t.teardown(() => redis.disconnect());
  const broker = await createBroker({ redis, keyPrefix: uniquePrefix('shutdown') });
  const endings: ApiError[] = [];
  const transport = { send: () => true, close: (error: ApiError) => void endings.push(error) };
  broker.streams.open({ endpoint: 'internal', region: '' }, undefined, transport);
  const closing = broker.close();
  broker.streams.open({ endpoint: 'internal', region: '' }, undefined, transport);
  await closing;
  await waitUntil(() => endings.length === 2, 2000);
  t.same(
    endings.map((error) => error.status),
    ['UNAVAILABLE', 'UNAVAILABLE'],
    'the open stream and the one opened during shutdown',
  );
});
