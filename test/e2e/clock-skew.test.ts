// Two broker processes on the same Redis, one with a clock minutes off, must not break any
// guarantee: leases are judged by one clock, Redis TIME (README.md, Semantics, "One clock").
//
// Real broker processes (src/server.ts) share the standalone test Redis and one KEY_PREFIX:
//   A  normal clock
//   B  clock 5 minutes ahead  (test/helpers/skew-clock.mjs, CLOCK_SKEW_MS=+300000)
//   C  clock 5 minutes behind (the same preload with a negative skew; catches the opposite
//      mistake, a lease computed from a clock that is behind and so already expired elsewhere)
// On an exactly-once subscription (ackDeadlineSeconds 10): a message leased through one node is
// not delivered through another; acks and modacks through a skewed node succeed while the lease
// is valid; nacks through any node take effect for all; publish times come from Redis; many
// concurrent pulls through all three nodes never hand out one message twice. Nothing here waits
// for a lease to expire: every check happens well within the 10 s deadline.
import { execFile } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import t from 'tap';
import { call, startBrokerProcess, type BrokerProcess } from '../helpers/processes.ts';
import { testRedisUrl, uniquePrefix } from '../helpers/redis.ts';

const SKEW_PRELOAD = pathToFileURL(new URL('../helpers/skew-clock.mjs', import.meta.url).pathname).href;
const SKEW_MS = 5 * 60 * 1000;
const P = '/v1/projects/skew';

const b64 = (text: string) => Buffer.from(text).toString('base64');

/** Stops a broker process: SIGTERM, then SIGKILL if it has not exited after 5 s. */
async function stop(broker: BrokerProcess | undefined): Promise<void> {
  const child = broker?.child;
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((done) => child.once('exit', done));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

t.test('the skew preload shifts Date.now and new Date() by the given amount', async (t) => {
  const script = 'process.stdout.write(JSON.stringify([Date.now(), new Date().getTime()]))';
  for (const skew of [SKEW_MS, -SKEW_MS]) {
    const before = Date.now();
    const { stdout } = await promisify(execFile)(process.execPath, [`--import=${SKEW_PRELOAD}`, '-e', script], {
      env: { ...process.env, CLOCK_SKEW_MS: String(skew) },
    });
    const after = Date.now();
    const [now, dateNow] = JSON.parse(stdout) as [number, number];
    for (const value of [now, dateNow]) {
      t.ok(value >= before + skew && value <= after + skew, `the child's clock reads ${skew / 60000} minutes off`);
    }
  }
});

t.test(
  'broker processes on one Redis, with clocks 5 minutes ahead and behind, keep every exactly-once guarantee',
  async (t) => {
    const env = {
      REDIS_URL: testRedisUrl(),
      KEY_PREFIX: uniquePrefix('clock-skew'),
      LOG_LEVEL: 'silent',
      PULL_WAIT_SECONDS: '1',
    };
    const started: BrokerProcess[] = [];
    t.teardown(() => Promise.all(started.map(stop)));
    const launch = (extra: Record<string, string>, nodeArgs: string[]) =>
      startBrokerProcess({ ...env, ...extra }, nodeArgs).then((broker) => {
        started.push(broker);
        return broker;
      });
    // allSettled: when one fails to start, the others are still registered for teardown.
    const launched = await Promise.allSettled([
      launch({}, []),
      launch({ CLOCK_SKEW_MS: String(SKEW_MS) }, [`--import=${SKEW_PRELOAD}`]),
      launch({ CLOCK_SKEW_MS: String(-SKEW_MS) }, [`--import=${SKEW_PRELOAD}`]),
    ]);
    for (const result of launched) if (result.status === 'rejected') throw result.reason;
    const [a, b, c] = launched.map((result) => (result as PromiseFulfilledResult<BrokerProcess>).value);
    t.match(b.output(), /Date is skewed by 300000 ms/, 'B runs with its clock 5 minutes ahead');
    t.match(c.output(), /Date is skewed by -300000 ms/, 'C runs with its clock 5 minutes behind');
    t.notMatch(a.output(), /skewed/, 'A runs with the real clock');
    const nodes = { A: a, B: b, C: c };

    const api = async (node: keyof typeof nodes, method: string, path: string, body?: unknown) => {
      const response = await call(nodes[node].url, method, `${P}${path}`, body);
      if (response.status === 0) throw new Error(`${node} did not answer ${method} ${path}:\n${nodes[node].output()}`);
      return response;
    };
    const pull = async (node: keyof typeof nodes, sub: string, maxMessages = 10) => {
      const response = await api(node, 'POST', `/subscriptions/${sub}:pull`, { maxMessages, returnImmediately: true });
      if (response.status !== 200)
        throw new Error(`pull via ${node}: ${response.status} ${JSON.stringify(response.body)}`);
      return (response.body.receivedMessages ?? []) as {
        ackId: string;
        message: { messageId: string; publishTime: string };
      }[];
    };
    const ack = (node: keyof typeof nodes, sub: string, ackIds: string[]) =>
      api(node, 'POST', `/subscriptions/${sub}:acknowledge`, { ackIds });
    const modack = (node: keyof typeof nodes, sub: string, ackIds: string[], ackDeadlineSeconds: number) =>
      api(node, 'POST', `/subscriptions/${sub}:modifyAckDeadline`, { ackIds, ackDeadlineSeconds });
    const isEodFailure = (response: { status: number; body: any }, ackId: string) =>
      response.status === 400 &&
      response.body?.error?.status === 'INVALID_ARGUMENT' &&
      response.body?.error?.details?.[0]?.reason === 'EXACTLY_ONCE_ACKID_FAILURE' &&
      response.body?.error?.details?.[0]?.metadata?.[ackId] === 'PERMANENT_FAILURE_INVALID_ACK_ID';

    /** One exactly-once subscription per pair of nodes; X leases, Y must respect the lease. */
    const scenario = (x: keyof typeof nodes, y: keyof typeof nodes) =>
      t.test(`leased via ${x}, then used via ${y}`, async (t) => {
        const id = `${x}-${y}`.toLowerCase();
        t.equal((await api(x, 'PUT', `/topics/t-${id}`, {})).status, 200, `topic created via ${x}`);
        const created = await api(y, 'PUT', `/subscriptions/s-${id}`, {
          topic: `projects/skew/topics/t-${id}`,
          ackDeadlineSeconds: 10,
          enableExactlyOnceDelivery: true,
        });
        t.equal(created.status, 200, `exactly-once subscription created via ${y}`);

        // 1. Leased via X: Y must not hand it out; Y's modack and ack succeed while it is leased.
        const published = await api(x, 'POST', `/topics/t-${id}:publish`, { messages: [{ data: b64('first') }] });
        t.equal(published.status, 200, `published via ${x}`);
        const [first] = await pull(x, `s-${id}`);
        t.equal(first?.message.messageId, published.body.messageIds[0], `pulled via ${x}`);
        t.same(await pull(y, `s-${id}`), [], `${y} does not deliver the message leased via ${x}`);
        t.same((await modack(y, `s-${id}`, [first.ackId], 20)).body, {}, `receipt modack via ${y} succeeds`);
        t.same(await pull(x, `s-${id}`), [], `${x} does not deliver it either`);
        const acked = await ack(y, `s-${id}`, [first.ackId]);
        t.equal(acked.status, 200, `ack via ${y} succeeds while the lease is valid`);
        t.same(acked.body, {});
        t.ok(
          isEodFailure(await ack(x, `s-${id}`, [first.ackId]), first.ackId),
          `acking it again via ${x} fails: it is acked`,
        );
        t.same(await pull(x, `s-${id}`), [], `gone via ${x}`);
        t.same(await pull(y, `s-${id}`), [], `gone via ${y}`);

        // 2. Leased via Y: X must not redeliver it before the deadline; a nack via X works for both.
        const second = await api(y, 'POST', `/topics/t-${id}:publish`, { messages: [{ data: b64('second') }] });
        t.equal(second.status, 200, `published via ${y}`);
        const [leased] = await pull(y, `s-${id}`);
        t.equal(leased?.message.messageId, second.body.messageIds[0], `pulled via ${y}`);
        const publishTime = Date.parse(leased.message.publishTime);
        t.ok(
          Math.abs(publishTime - Date.now()) < SKEW_MS / 5,
          `the publish time comes from Redis, not from ${y}'s clock`,
        );
        t.same(await pull(x, `s-${id}`), [], `${x} does not redeliver the message leased via ${y}`);
        t.same(await pull(y, `s-${id}`), [], `nor does ${y}`);
        t.same((await modack(x, `s-${id}`, [leased.ackId], 30)).body, {}, `extension via ${x} succeeds`);
        t.same((await modack(x, `s-${id}`, [leased.ackId], 0)).body, {}, `nack via ${x} succeeds`);
        const [again] = await pull(x, `s-${id}`);
        t.equal(
          again?.message.messageId,
          second.body.messageIds[0],
          `the nacked message is available via ${x} at once`,
        );
        t.ok(isEodFailure(await ack(y, `s-${id}`, [leased.ackId]), leased.ackId), `the nacked ack ID fails via ${y}`);
        t.same((await ack(y, `s-${id}`, [again.ackId])).body, {}, `the new ack ID works via ${y}`);
        t.same(await pull(x, `s-${id}`), [], 'nothing left');
        t.same(await pull(y, `s-${id}`), [], 'nothing left');
      });

    for (const [x, y] of [
      ['A', 'B'],
      ['B', 'A'],
      ['A', 'C'],
      ['C', 'A'],
      ['B', 'C'],
      ['C', 'B'],
    ] as const) {
      await scenario(x, y);
    }

    t.test('concurrent pulls through all three nodes never hand out a message twice', async (t) => {
      t.equal((await api('A', 'PUT', '/topics/t-many', {})).status, 200);
      t.equal(
        (
          await api('B', 'PUT', '/subscriptions/s-many', {
            topic: 'projects/skew/topics/t-many',
            ackDeadlineSeconds: 600, // far beyond this test's run time: no lease may expire here
            enableExactlyOnceDelivery: true,
          })
        ).status,
        200,
      );
      const published: string[] = [];
      for (let batch = 0; batch < 3; batch++) {
        const response = await api('C', 'POST', '/topics/t-many:publish', {
          messages: Array.from({ length: 100 }, (_, i) => ({ data: b64(`m${batch * 100 + i}`) })),
        });
        published.push(...response.body.messageIds);
      }
      const deliveries: { node: string; ackId: string; messageId: string }[] = [];
      const puller = async (node: keyof typeof nodes) => {
        for (let empty = 0; empty < 2; ) {
          const received = await pull(node, 's-many', 7);
          if (received.length === 0) empty++;
          for (const r of received) deliveries.push({ node, ackId: r.ackId, messageId: r.message.messageId });
        }
      };
      await Promise.all((['A', 'B', 'C', 'A', 'B', 'C'] as const).map(puller));
      const ids = deliveries.map((d) => d.messageId);
      t.equal(new Set(ids).size, ids.length, 'no message was delivered twice');
      t.same([...ids].sort(), [...published].sort(), 'every message was delivered');
      t.ok(new Set(deliveries.map((d) => d.node)).size === 3, 'all three nodes delivered some');

      // Ack each through a node other than the one that delivered it, concurrently.
      const other = { A: 'B', B: 'C', C: 'A' } as const;
      const results = await Promise.all(
        (['A', 'B', 'C'] as const).map((node) =>
          ack(
            other[node],
            's-many',
            deliveries.filter((d) => d.node === node).map((d) => d.ackId),
          ),
        ),
      );
      t.same(
        results.map((r) => [r.status, r.body]),
        [
          [200, {}],
          [200, {}],
          [200, {}],
        ],
        'every ack succeeds',
      );
      for (const node of ['A', 'B', 'C'] as const)
        t.same(await pull(node, 's-many', 100), [], `nothing left via ${node}`);
    });
  },
);
