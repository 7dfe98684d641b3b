#!/usr/bin/env node
// tests/browser/console_dashboard_storm.mjs: SRE watches the live dashboard while a storm of
// buyers (seckill-load) sells an item out, and reads the funnel and the stock off the page.
//
// Usage: node tests/browser/console_dashboard_storm.mjs BASE_URL USERNAME PASSWORD ITEM_KEY TOTAL
//
// ITEM_KEY is "<activity>-<item>", TOTAL the item's stock. Logs in, opens /dashboard, waits for
// the stream and for the item's stock chart to show TOTAL units in Redis, then prints
// "watching". The driving test runs the storm, reads its own figures from /metrics and writes
// one line to stdin: "deduction=<passed> admission=<passed> stock=<units>". The page must come
// to show exactly those: the deduction and admission stages' passed counts summed over its
// window, and the Redis stock of the item, with a stock line drawn. It prints what it read.
// With SECKILL_SCREENSHOT_DIR set, it also saves a screenshot of the page there, and of the
// filtered audit log at 1366 and 390 px. Then, as SRE
// does after a storm, it opens the audit log, whose first page (the test writes newer
// actions) does not hold the activity's pre-warm, filters it on the server to the operator
// actions mentioning the activity (the filters go into the address), and must find the
// pre-warm (who loaded the stock the storm sold) in words, every row shown matching.
// Exit codes as in harness.mjs: 0 ok, 1 failure, 2 bad usage.

import { createInterface } from 'node:readline';
import { STEP_TIMEOUT_MS, StepError, login, openHydrated, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [baseArg, username, password, itemKey, total] = scenarioArgs(
  'node console_dashboard_storm.mjs BASE_URL USERNAME PASSWORD ITEM_KEY TOTAL',
  5,
);
const base = baseArg.replace(/\/+$/, '');
const item = `#dashboard figure[data-item="${itemKey}"]`;

/** What the page shows now: passed counts by stage, and the item's Redis stock. */
const readPage = (page) =>
  page.evaluate((item) => {
    const passed = {};
    for (const stage of document.querySelectorAll('#funnel g[data-stage]')) {
      passed[stage.dataset.stage] = Number(stage.dataset.passed);
    }
    const stock = document.querySelector(`${item} [data-redis-stock]`)?.textContent ?? null;
    const lines = document.querySelectorAll(`${item} polyline`).length;
    return { passed, stock, lines };
  }, item);

const expected = new Promise((resolve) => {
  const lines = createInterface({ input: process.stdin });
  lines.once('line', (line) => {
    lines.close();
    resolve(Object.fromEntries(line.trim().split(/\s+/).map((pair) => pair.split('='))));
  });
});

await runScenario(async (page) => {
  await login(page, base, username, password);
  await openHydrated(page, base, '/dashboard');
  try {
    await page.waitForSelector('#dashboard[data-link="live"]', { state: 'attached', timeout: STEP_TIMEOUT_MS });
    await page.waitForFunction(
      ({ item, total }) => document.querySelector(`${item} [data-redis-stock]`)?.textContent === total,
      { item, total },
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch {
    throw new StepError(`the item's full stock never showed (page says: ${await textOf(page, '#dashboard')})`);
  }
  console.log('watching');

  const want = await expected;
  try {
    await page.waitForFunction(
      ({ item, want }) => {
        const passed = (stage) => document.querySelector(`#funnel g[data-stage="${stage}"]`)?.dataset.passed;
        return (
          passed('deduction') === want.deduction &&
          passed('admission') === want.admission &&
          document.querySelector(`${item} [data-redis-stock]`)?.textContent === want.stock
        );
      },
      { item, want },
      { timeout: 30_000 },
    );
  } catch {
    throw new StepError(`the page never matched /metrics ${JSON.stringify(want)}: ${JSON.stringify(await readPage(page))}`);
  }
  const seen = await readPage(page);
  if (seen.lines === 0) throw new StepError('no stock line drawn');
  // For a person checking the charts by eye: SECKILL_SCREENSHOT_DIR keeps what the page showed.
  if (process.env.SECKILL_SCREENSHOT_DIR) {
    await page.screenshot({ path: `${process.env.SECKILL_SCREENSHOT_DIR}/dashboard-after-storm.png`, fullPage: true });
  }

  await openHydrated(page, base, '/audit');
  const activity = itemKey.split('-')[0];
  const mention = `activity:${activity}`;
  const prewarm = `#audit-list tbody tr[data-kind="ops"]:has-text("activity.prewarm"):has-text("${mention}")`;
  if ((await page.locator(prewarm).count()) > 0) {
    throw new StepError('the pre-warm is on the first page already: the test needs newer actions');
  }
  await step('filter the operator actions about the activity', async () => {
    await page.selectOption('#audit-filters select[name=kind]', 'ops');
    await page.fill('#audit-filters input[name=containing]', mention);
    await page.click('#audit-filters button[type=submit]');
    await page.waitForURL((url) => url.searchParams.get('containing') === mention && url.searchParams.get('kind') === 'ops');
  });
  try {
    await page.locator(prewarm).first().waitFor({ timeout: STEP_TIMEOUT_MS });
  } catch {
    throw new StepError(`the audit does not show the activity's pre-warm: ${await textOf(page, '#audit-list')}`);
  }
  const rows = await page.$$eval('#audit-list tbody tr', (trs) => trs.map((tr) => [tr.dataset.kind, tr.textContent]));
  const stray = rows.filter(([kind, text]) => kind !== 'ops' || !text.includes(mention));
  if (stray.length > 0) throw new StepError(`the filtered page shows other rows: ${JSON.stringify(stray)}`);
  if (process.env.SECKILL_SCREENSHOT_DIR) {
    for (const size of [{ width: 1366, height: 900 }, { width: 390, height: 844 }]) {
      await page.setViewportSize(size);
      await page.screenshot({ path: `${process.env.SECKILL_SCREENSHOT_DIR}/audit-filtered-${size.width}.png`, fullPage: true });
    }
  }
  const audited = await textOf(page, prewarm);
  if (!audited.includes('outcome: loaded')) throw new StepError(`the pre-warm's row reads: ${audited}`);
  console.log(`ok: ${username} saw ${JSON.stringify(seen)}; audited: ${audited}`);
}, 120_000);
