#!/usr/bin/env node
// tests/browser/sale_page_preparing.mjs: an order that stays PRE_CREATED (the pipeline holds
// it) is calmly said to be in preparation after 10 s, with a link to check again.
//
// Usage: node sale_page_preparing.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]
//
// Clicks `#buy` on an open sale whose orders are not completed, sees "Preparing your payment",
// then within 15 s "being prepared" with `#recheck` shown and no pay button; follows the link
// and sees the page read the order again. Prints `order=ID`. Exit codes as in harness.mjs.

import { StepError, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [base, activityId, token, shots] = scenarioArgs(
  'node sale_page_preparing.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]',
  3,
);

await runScenario(async (page) => {
  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  await step('wait for the button to light', () => page.waitForSelector('#buy:not([disabled])', { timeout: 15_000 }));
  await step('click the button', () => page.click('#buy'));
  await step('see "preparing"', () => page.waitForSelector('#order[data-status="PREPARING"]', { timeout: 10_000 }));
  const clicked = Date.now();
  try {
    await page.waitForSelector('#recheck:not([hidden])', { timeout: 15_000 });
  } catch {
    throw new StepError(`no "check again" link 15 s after the buy; the page says: ${await textOf(page, '#order')}`);
  }
  const waited = Date.now() - clicked;
  if (waited < 9_000) throw new StepError(`the page gave up waiting after ${waited} ms, before 10 s`);
  const said = await textOf(page, '#order-status');
  if (!said.includes('being prepared')) throw new StepError(`after 10 s the page says: ${said}`);
  if (await page.$eval('#pay', (pay) => !pay.hidden)) throw new StepError('a pay button for an order not yet payable');
  const order = await page.$eval('#order', (box) => box.dataset.order);
  // The page has just read the order and waits 5 s before the next read: a read within a
  // second of the click is the link's.
  const asked = page.waitForRequest((request) => request.url().endsWith(`/api/orders/${order}`), { timeout: 1_000 });
  await step('check again', () => page.click('#recheck'));
  await step('see the order read again at once', () => asked);
  if (shots) await page.screenshot({ path: `${shots}/preparing-recheck.png`, fullPage: true });
  console.log(`order=${order}`);
  console.log(`ok: preparing, then "being prepared" with a link to check again after ${waited} ms`);
}, 90_000);
