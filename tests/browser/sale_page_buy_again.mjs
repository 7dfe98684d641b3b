#!/usr/bin/env node
// tests/browser/sale_page_buy_again.mjs: a buyer whose limit is two buys twice.
//
// Usage: node sale_page_buy_again.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]
//
// On an open sale's page: clicks `#buy`, waits for the first order's pay state, then for the
// button to light again; reloads (the first order is shown again and the button is lit), clicks
// again and waits for a second, different order's pay state. Prints `first=ID`, `second=ID` and
// `request_ids=N` (the distinct X-Request-IDs of the buy requests). Exit codes as in harness.mjs.

import { StepError, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [base, activityId, token, shots] = scenarioArgs(
  'node sale_page_buy_again.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]',
  3,
);
const shot = async (page, name) => {
  if (shots) await page.screenshot({ path: `${shots}/again-${name}.png`, fullPage: true });
};

await runScenario(async (page) => {
  const requestIds = new Set();
  page.on('request', (request) => {
    if (request.method() === 'POST' && new URL(request.url()).pathname === '/api/seckill/buy') {
      requestIds.add(request.headers()['x-request-id']);
    }
  });
  const payState = async (what, notOrder) => {
    const selector = notOrder
      ? `#order[data-status="UNPAID"]:not([data-order="${notOrder}"])`
      : '#order[data-status="UNPAID"]';
    try {
      await page.waitForSelector(selector, { timeout: 30_000 });
    } catch {
      throw new StepError(`${what}: no pay state; the page says: ${await textOf(page, '#order')} / ${await textOf(page, '#message')}`);
    }
    return page.$eval('#order', (box) => box.dataset.order);
  };
  const lit = async (what) => {
    try {
      await page.waitForSelector('#buy:not([disabled])', { timeout: 20_000 });
    } catch {
      throw new StepError(`${what}: #buy stays grey ("${await textOf(page, '#buy')}"; ${await textOf(page, '#message')})`);
    }
  };

  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  await lit('the open sale');
  await step('click the button', () => page.click('#buy'));
  const first = await payState('the first order');
  await shot(page, '1-first-unpaid');
  await lit('after the first order reached its pay state');

  await step('reload the page', () => page.reload({ waitUntil: 'load' }));
  await step('see the first order after the reload', () =>
    page.waitForSelector(`#order[data-order="${first}"][data-status="UNPAID"]`, { timeout: 15_000 }),
  );
  await lit('after the reload');
  await step('click the button again', () => page.click('#buy'));
  const second = await payState('the second order', first);
  await shot(page, '2-second-unpaid');
  console.log(`first=${first}`);
  console.log(`second=${second}`);
  console.log(`request_ids=${requestIds.size}`);
}, 120_000);
