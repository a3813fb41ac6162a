// Publish bodies over 128 KB are parsed with their "data" strings lifted out (src/json-body.ts).
// Through the HTTP API: what such a publish stores is exactly what it sent, bodies that the
// lifted path hands over (escapes, a spelled-out NUL) are stored just as well, and broken or
// poisoned large bodies are refused as malformed, exactly like small ones.

import t from 'tap';
import { LIFT_ABOVE_BYTES } from '../../src/json-body.ts';
import { startBroker, type TestBroker } from '../helpers/app.ts';
import { client } from './_support.ts';
import { randomFromEnv } from '../helpers/random.ts';

const TOPIC = '/v1/projects/p/topics/large-bodies';
const SUB = '/v1/projects/p/subscriptions/large-bodies';

const send = (broker: TestBroker, text: string) =>
  client(broker).raw({ method: 'POST', url: `${TOPIC}:publish`, payload: text });

/** A body over 128 KB: 120 messages of 1,000 bytes of `fill` (base64: `data`), then `extra` if given. */
function largeBody(fill: number, extra?: string): { text: string; data: string } {
  const data = Buffer.alloc(1000, fill).toString('base64');
  const messages = Array.from({ length: 120 }, () => `{"data":"${data}"}`);
  if (extra !== undefined) messages.push(extra);
  return { text: `{"messages":[${messages.join(',')}]}`, data };
}

async function pullAll(broker: TestBroker): Promise<any[]> {
  const received: any[] = [];
  for (;;) {
    const { body } = await broker.api('POST', `${SUB}:pull`, { maxMessages: 1000, returnImmediately: true });
    if (!body.receivedMessages) return received;
    received.push(...body.receivedMessages.map((m: any) => m.message));
    await broker.api('POST', `${SUB}:acknowledge`, { ackIds: body.receivedMessages.map((m: any) => m.ackId) });
  }
}

t.test('large publish bodies', async (t) => {
  const broker = await startBroker(t, { name: 'large-bodies' });
  await broker.api('PUT', TOPIC, {});
  await broker.api('PUT', SUB, { topic: 'projects/p/topics/large-bodies' });

  t.test('what a large publish stores is what it sent', async (t) => {
    const random = randomFromEnv(t);
    const messages = Array.from({ length: 150 }, (_, i) => ({
      data: Buffer.from(Array.from({ length: random.int(1, 1500) }, () => random.int(0, 255))).toString(
        random.chance(0.2) ? 'base64url' : 'base64',
      ),
      ...(random.chance(0.5) ? { attributes: { data: `attribute ${i}`, é: '"quoted" \\ 日本' } } : {}),
    }));
    const text = JSON.stringify({ messages });
    t.ok(text.length > LIFT_ABOVE_BYTES, `the body is large (${text.length} bytes)`);
    const published = await send(broker, text);
    t.equal(published.status, 200);
    const received = await pullAll(broker);
    t.equal(received.length, messages.length, 'every message delivered once');
    const decode = (data: string) => Buffer.from(data, 'base64').toString('hex');
    for (const [i, message] of received.entries()) {
      if (
        decode(message.data) !== decode(messages[i].data) ||
        JSON.stringify(message.attributes) !== JSON.stringify(messages[i].attributes)
      ) {
        t.fail(`message ${i} differs`);
        break;
      }
    }
  });

  t.test('bodies the lifted path hands over are stored just as well', async (t) => {
    const cases = [
      ['an escaped slash in a data string', '{"data":"AAAA\\/w=="}', Buffer.from([0, 0, 0, 255])],
      ['a spelled-out NUL in an attribute', '{"data":"AQID","attributes":{"nul":"\\u0000"}}', Buffer.from([1, 2, 3])],
    ] as const;
    for (const [what, extra, lastData] of cases) {
      const { text } = largeBody(7, extra);
      t.ok(text.length > LIFT_ABOVE_BYTES, `${what}: the body is large`);
      t.equal((await send(broker, text)).status, 200, `${what}: accepted`);
      const received = await pullAll(broker);
      t.equal(received.length, 121, `${what}: every message delivered`);
      t.same(Buffer.from(received[120].data, 'base64'), lastData, `${what}: the odd message arrived intact`);
    }
  });

  t.test('a byte order mark is ignored in large and small bodies alike', async (t) => {
    const large = largeBody(5).text;
    const small = '{"messages":[{"data":"QUJD"}]}';
    for (const [what, text, count] of [
      ['large', large, 120],
      ['small', small, 1],
    ] as const) {
      const published = await send(broker, `\ufeff${text}`);
      t.equal(published.status, 200, `${what}: accepted`);
      t.equal((await pullAll(broker)).length, count, `${what}: every message stored`);
    }
  });

  t.test('broken or poisoned large bodies are refused like small ones', async (t) => {
    const { text: body, data: filler } = largeBody(9);
    const cases = [
      ['cut short', body.slice(0, -3)],
      [
        'a raw newline in a data string',
        body.replace(`"data":"${filler.slice(0, 10)}`, `"data":"${filler.slice(0, 5)}\n${filler.slice(5, 10)}`),
      ],
      ['a raw tab in an attribute named data', body.replace('{"data"', '{"attributes":{"data":"a\tb"},"data"')],
      [
        'a raw newline in the last data string, after a message that breaks a publish rule',
        body
          .replace('{"data"', '{"attributes":{"goog-reserved":"x"},"data"')
          .replace(/"data":"([^"]{5})([^"]*)"\}\]\}$/, '"data":"$1\n$2"}]}'),
      ],
      ['a __proto__ key', body.replace('{"data"', '{"__proto__":{"polluted":"yes"},"data"')],
      ['a __proto__ key spelled with escapes', body.replace('{"data"', '{"attributes":{"\\u005f_proto__":"x"},"data"')],
    ];
    for (const [what, text] of cases) {
      const refused = await send(broker, text);
      t.same(
        [refused.status, refused.body.error?.message],
        [400, 'Invalid JSON payload received. Body is not valid JSON.'],
        `${what}: refused as malformed, as in a small body`,
      );
      const small = text.replace(/,\{"data":"[^"]*"\}/g, '');
      t.ok(small.length < LIFT_ABOVE_BYTES, `${what}: the small version is small`);
      t.equal((await send(broker, small)).status, 400, `${what}: the small version is refused too`);
    }
    t.same(await pullAll(broker), [], 'nothing was stored');
    t.equal(({} as Record<string, unknown>).polluted, undefined, 'no prototype was touched');
  });

  t.test(
    'an escaped control character in data is valid JSON and invalid base64, in large and small bodies',
    async (t) => {
      // `\n` takes a large body down the lifted path (the other messages' data are lifted, this one
      // is not: it has an escape), `\u0001` down the whole-text one.
      for (const escaped of ['{"data": "QU\\nJD"}', '{"data":"QU\\u0001JD"}']) {
        const { text: large } = largeBody(3, escaped);
        for (const [what, text] of [
          ['large', large],
          ['small', `{"messages":[${escaped}]}`],
        ] as const) {
          const refused = await send(broker, text);
          t.same(
            [refused.status, refused.body.error?.message],
            [400, `Message ${what === 'large' ? 120 : 0}: "data" is not valid base64.`],
            `${escaped}, ${what}`,
          );
        }
      }
      t.same(await pullAll(broker), [], 'nothing was stored');
    },
  );
});
