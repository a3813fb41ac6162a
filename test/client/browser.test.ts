// The browser example in headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core): the page served by the broker subscribes with the client bundle, shows and
// acks what the test publishes over REST, and publishes from its form.
import t from 'tap';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Fastify from 'fastify';
import type { BrowserContext, Page } from 'playwright-core';
import { exampleRoutes } from '../../routes/examples.ts';
import { assertNothingLeft, startLiveBroker, type LiveBroker } from './_support.ts';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
const inCI = !['', '0', 'false'].includes((process.env.CI ?? '').toLowerCase());

if (!existsSync(CHROMIUM) && !inCI) {
  t.plan(
    0,
    `${CHROMIUM} is missing (apt-get install chromium); the browser test runs only where it is installed, and always in CI`,
  );
} else {
  t.test('browser example', async (t) => {
    t.ok(existsSync(CHROMIUM), `${CHROMIUM} is installed (CI must install it: see .ci/run)`);
    if (!existsSync(CHROMIUM)) return;
    const { chromium } = await import('playwright-core');
    const profile = mkdtempSync(join(tmpdir(), 'pubsub-chromium-'));
    const launchedAt = Date.now();
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: CHROMIUM_ARGS,
    });
    t.comment(`Chromium ${context.browser()?.version() ?? ''} up in ${Date.now() - launchedAt} ms`);
    t.teardown(async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    });

    t.test('same origin: the page shows and acks published messages, and publishes from its form', async (t) => {
      const broker = await startLiveBroker(t, { name: 'browser-same' });
      await broker.createPair('browser-topic', 'browser-sub');
      const page = await openPage(
        t,
        context,
        `${broker.url}/examples/browser?project=p&topic=browser-topic&subscription=browser-sub`,
      );

      const ids = await publish(broker, 'browser-topic', ['first', 'second ✓', 'third']);
      await waitForAcked(page, ids);
      const texts = await page.$$eval('#messages li .text', (items) => items.map((item) => item.textContent));
      t.same([...texts].sort(), ['first', 'second ✓', 'third'], 'the page shows each message');

      await page.fill('#lines', 'typed one\ntyped two');
      await page.click('button[type=submit]');
      await page.waitForFunction(() => document.getElementById('published')?.textContent?.startsWith('published #'));
      const publishedText = (await page.textContent('#published')) ?? '';
      const formIds = [...publishedText.matchAll(/#(\d+)/g)].map((match) => match[1]);
      t.equal(formIds.length, 2, 'the form published two messages');
      await waitForAcked(page, formIds);
      t.equal(await page.textContent('#count'), '5');

      await assertAllAckedAndEmpty(t, page, broker, 'browser-sub', 5);
    });

    t.test('?endpoint=: the page from one server streams from a broker on another origin', async (t) => {
      const broker = await startLiveBroker(t, { name: 'browser-cross' });
      await broker.createPair('cross-topic', 'cross-sub');
      // Chromium keeps its HTTP connection open: without this, close() waits for it to time out.
      const pages = Fastify({ forceCloseConnections: true });
      await pages.register(exampleRoutes);
      await pages.listen({ port: 0, host: '127.0.0.1' });
      t.teardown(() => pages.close());
      const { port } = pages.server.address() as { port: number };
      // The page server is "localhost", the broker "127.0.0.1": two origins.
      const url = `http://localhost:${port}/examples/browser?endpoint=${encodeURIComponent(broker.url)}&project=p&topic=cross-topic&subscription=cross-sub`;
      const page = await openPage(t, context, url);
      t.equal(await page.textContent('#endpoint'), broker.url, 'the page uses the endpoint parameter');
      const ids = await publish(broker, 'cross-topic', ['across', 'origins']);
      await waitForAcked(page, ids);
      await assertAllAckedAndEmpty(t, page, broker, 'cross-sub', 2);
    });
  });
}

async function openPage(
  t: { teardown(fn: () => unknown): void; comment(message: string): void },
  context: BrowserContext,
  url: string,
) {
  const page = await context.newPage();
  t.teardown(() => page.close());
  page.on('pageerror', (error) => t.comment(`page error: ${error.message}`));
  page.on('console', (message) => {
    if (message.type() === 'error') t.comment(`console: ${message.text()}`);
  });
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById('state')?.dataset.state === 'open', null, {
    timeout: 15_000,
  });
  return page;
}

async function publish(broker: LiveBroker, topic: string, texts: string[]): Promise<string[]> {
  const response = await broker.rest('POST', `/v1/projects/p/topics/${topic}:publish`, {
    messages: texts.map((text) => ({ data: Buffer.from(text).toString('base64'), attributes: { from: 'test' } })),
  });
  if (response.status !== 200) throw new Error(`publish failed: ${JSON.stringify(response.body)}`);
  return response.body.messageIds;
}

function waitForAcked(page: Page, ids: string[]) {
  return page.waitForFunction(
    (wanted) =>
      wanted.every(
        (id) => document.querySelector<HTMLElement>(`li[data-message-id="${id}"]`)?.dataset.status === 'acked',
      ),
    ids,
    { timeout: 15_000 },
  );
}

/** Closes the page's subscriber (which drains its acks), then checks the broker has nothing left. */
async function assertAllAckedAndEmpty(t: any, page: Page, broker: LiveBroker, subscription: string, count: number) {
  const ackIds = await page.evaluate(async () => {
    const demo = (window as any).demo;
    await demo.subscriber.close();
    return demo.messages.map((message: { ackId: string }) => message.ackId) as string[];
  });
  t.equal(ackIds.length, count, `the page received ${count} messages, each once`);
  t.equal(await page.textContent('#state'), 'closed');
  await assertNothingLeft(t, broker, subscription, ackIds);
}
