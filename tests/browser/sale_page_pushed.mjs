#!/usr/bin/env node
// tests/browser/sale_page_pushed.mjs: the sale page learns its order's states from the event
// stream (GET /api/events), not by polling.
//
// Usage: node sale_page_pushed.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]
//
// The sale's orders are recorded, not completed, until the test replays them. Opens the page,
// sees its stream open, clicks `#buy`, sees "preparing" and prints `preparing` and
// `order=ID`; then waits for `replayed` on stdin (the test has handed the order to the
// pipeline). Must see the pay button with the amount, pay, and see "paid". Every read of the
// order (`GET /api/orders/ID`) is recorded with the state it answered: none may answer
// `PRE_CREATED` (a poll while the order is prepared), and none may follow the payment (the
// stream says paid). Prints `reads=N`. Exit codes as in harness.mjs.

import { StepError, runScenario, scenarioArgs, stdinWords, step, textOf } from './harness.mjs';

const [base, activityId, token, shots] = scenarioArgs(
  'node sale_page_pushed.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]',
  3,
);
const stdin = stdinWords();

await runScenario(async (page) => {
  const reads = [];
  page.on('response', async (response) => {
    if (!/\/api\/orders\/[0-9a-f-]+$/.test(new URL(response.url()).pathname)) return;
    const body = await response.json().catch(() => null);
    reads.push(body ? body.status : `http ${response.status()}`);
  });
  const opened = page.waitForResponse((response) => response.url().includes('/api/events?') && response.status() === 200);
  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  await step('see the event stream open', () => opened);
  await step('wait for the button to light', () => page.waitForSelector('#buy:not([disabled])', { timeout: 15_000 }));
  await step('click the button', () => page.click('#buy'));
  await step('see "preparing"', () => page.waitForSelector('#order[data-status="PREPARING"]', { timeout: 10_000 }));
  const order = await page.$eval('#order', (box) => box.dataset.order);
  console.log('preparing');
  console.log(`order=${order}`);
  await stdin.told('replayed');
  try {
    await page.waitForSelector('#pay:not([hidden])', { timeout: 15_000 });
  } catch {
    throw new StepError(`no pay button after the order was handed on; the page says: ${await textOf(page, '#order')}`);
  }
  const amount = await textOf(page, '#order-amount');
  if (!amount.includes('¥49.90') || !amount.includes('pay by')) throw new StepError(`the amount shown is "${amount}"`);
  if (shots) await page.screenshot({ path: `${shots}/pushed-ready.png`, fullPage: true });
  const beforePaying = reads.length;
  await step('pay', () => page.click('#pay'));
  try {
    await page.waitForSelector('#order[data-status="PAID"]', { timeout: 20_000 });
  } catch {
    throw new StepError(`the order never showed paid: ${await textOf(page, '#order')}`);
  }
  stdin.close();
  if (reads.includes('PRE_CREATED')) throw new StepError(`the page polled the order while it was prepared: ${reads.join(', ')}`);
  if (reads.length !== beforePaying) throw new StepError(`the page read the order after paying: ${reads.join(', ')}`);
  console.log(`reads=${reads.length}`);
  console.log(`ok: the order's states came by the stream (${reads.length} read, for the amount)`);
}, 90_000);
