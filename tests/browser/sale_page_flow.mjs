#!/usr/bin/env node
// tests/browser/sale_page_flow.mjs: a buyer's whole flow on the published sale page.
//
// Usage: node sale_page_flow.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]
//
// Opens the page (token in the fragment) before the start and sees the countdown, waits for
// `#buy` to light, double-clicks it (and clicks once more), sees "preparing", reloads the page
// (the token now comes from local storage) and must see the same order, waits for the pay
// button with the amount (in yuan, with the time to pay by) and the units left one lower, pays,
// and waits for "paid". Before the start it checks the price's currency sign, the times with
// UTC and the units left (10). Counts the buy requests the page sent.
// Prints `order=ID` and `buys=N`. Exit codes as in harness.mjs.

import { StepError, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [base, activityId, token, shots] = scenarioArgs(
  'node sale_page_flow.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]',
  3,
);
const shot = async (page, name) => {
  if (shots) await page.screenshot({ path: `${shots}/flow-${name}.png`, fullPage: true });
};

await runScenario(async (page) => {
  let buys = 0;
  page.on('request', (request) => {
    if (request.method() === 'POST' && new URL(request.url()).pathname === '/api/seckill/buy') buys += 1;
  });
  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  if (page.url().includes('token=')) throw new StepError('the token stayed in the address bar');
  await step('see the countdown', () =>
    page.waitForFunction(() => /Starts in/.test(document.getElementById('countdown').textContent), null, { timeout: 10_000 }),
  );
  if (!(await page.$eval('#buy', (button) => button.disabled))) throw new StepError('#buy is lit before the start');
  const price = await textOf(page, '.item .price');
  if (price !== '¥49.90') throw new StepError(`the price reads "${price}", without its currency sign`);
  const times = await textOf(page, '.times');
  if (!times.includes('UTC')) throw new StepError(`the sale's times read "${times}", without UTC`);
  await step('see the units left', () =>
    page.waitForFunction(() => document.querySelector('.item .left')?.textContent === '10 left', null, { timeout: 10_000 }),
  );
  await shot(page, '1-countdown');
  await step('wait for the button to light', () => page.waitForSelector('#buy:not([disabled])', { timeout: 20_000 }));
  await shot(page, '2-lit');
  await step('double-click the button, then click it again', async () => {
    await page.dblclick('#buy', { force: true });
    await page.click('#buy', { force: true, timeout: 2_000 }).catch(() => {});
  });
  await step('see the order being prepared', () =>
    page.waitForSelector('#order:not([hidden])[data-order]', { timeout: 10_000 }),
  );
  const order = await page.$eval('#order', (box) => box.dataset.order);
  const first = await textOf(page, '#order-status');
  if (!/Preparing your payment|ready to pay/.test(first)) throw new StepError(`after the click the page says: ${first}`);
  if (!(await page.$eval('#buy', (button) => button.disabled))) throw new StepError('#buy is lit again right after the click');
  await shot(page, '3-preparing');

  await step('reload the page', () => page.reload({ waitUntil: 'load' }));
  await step('see the same order after the reload', () =>
    page.waitForSelector(`#order:not([hidden])[data-order="${order}"]`, { timeout: 10_000 }),
  );
  await step('wait for the pay button', () => page.waitForSelector('#pay:not([hidden])', { timeout: 30_000 }));
  const amount = await textOf(page, '#order-amount');
  if (!amount.includes('¥49.90') || !amount.includes('pay by')) {
    throw new StepError(`the amount shown is "${amount}", not ¥49.90 with the time to pay by`);
  }
  await step('see the units left move', () =>
    page.waitForFunction(() => document.querySelector('.item .left')?.textContent === '9 left', null, { timeout: 10_000 }),
  );
  await shot(page, '4-pay');
  await step('pay', () => page.click('#pay'));
  try {
    await page.waitForSelector('#order[data-status="PAID"]', { timeout: 30_000 });
  } catch {
    throw new StepError(`the order never showed paid: ${await textOf(page, '#order')}`);
  }
  await shot(page, '5-paid');
  console.log(`order=${order}`);
  console.log(`buys=${buys}`);
  console.log(`ok: countdown, lit, ${buys} buy request(s), preparing, same order after a reload, ${amount}, paid`);
}, 120_000);
