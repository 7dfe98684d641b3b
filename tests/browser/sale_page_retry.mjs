#!/usr/bin/env node
// tests/browser/sale_page_retry.mjs: a buy whose answer is lost in a timeout is sent again
// with the same X-Request-ID, and the page shows the one order it made.
//
// Usage: node sale_page_retry.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]
//
// Holds the answer to the page's first buy request (the server has made the order) for
// longer than the page waits, so the page gives up on it and retries; lets the retries
// through. Checks every buy request carried the same X-Request-ID and there were at least
// two, waits for the order to show. Prints `order=ID` and `request_id=ID`.
// Exit codes as in harness.mjs.

import { StepError, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [base, activityId, token, shots] = scenarioArgs(
  'node sale_page_retry.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]',
  3,
);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// Longer than the page's own wait for one buy request.
const HOLD_MS = 6_000;

await runScenario(async (page) => {
  const ids = [];
  await page.route('**/api/seckill/buy', async (route) => {
    ids.push(route.request().headers()['x-request-id']);
    if (ids.length > 1) return route.continue();
    const answer = await route.fetch();
    await sleep(HOLD_MS);
    // The page gave up on this request by now.
    await route.fulfill({ response: answer }).catch(() => {});
  });
  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  await step('wait for the button to light', () => page.waitForSelector('#buy:not([disabled])', { timeout: 15_000 }));
  await step('click the button', () => page.click('#buy'));
  await step('see the retry said', () =>
    page.waitForSelector('#message[data-code="RETRYING"]', { timeout: 10_000 }),
  );
  if (shots) await page.screenshot({ path: `${shots}/retry-1-slow.png`, fullPage: true });
  try {
    await page.waitForSelector('#order:not([hidden])[data-order]', { timeout: 20_000 });
  } catch {
    throw new StepError(`no order shown after the retry; the page says: ${await textOf(page, '#message')}`);
  }
  if (ids.length < 2) throw new StepError(`the page sent ${ids.length} buy request(s), expected a retry`);
  if (new Set(ids).size !== 1) throw new StepError(`the retries changed the X-Request-ID: ${ids.join(', ')}`);
  const order = await page.$eval('#order', (box) => box.dataset.order);
  if (shots) await page.screenshot({ path: `${shots}/retry-2-order.png`, fullPage: true });
  console.log(`order=${order}`);
  console.log(`request_id=${ids[0]}`);
  console.log(`ok: ${ids.length} buy requests with one X-Request-ID, order ${order}`);
}, 90_000);
