#!/usr/bin/env node
// tests/browser/sale_page_lottery.mjs: a registrant of a lottery sees the draw's outcome
// reach the sale page without reloading it, and buys with his code.
//
// Usage: node sale_page_lottery.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]
//
// Opens the page of an open lottery sale the buyer registered for; waits until it says he
// is registered with the buy button dark, and says `registered`; the test then makes the
// draw happen and writes `drawn` on stdin. Waits (no reload) for `won` and the button to
// light, clicks, waits for the order and for `bought`, and prints `bought`. Exit codes as in
// harness.mjs.

import { StepError, runScenario, scenarioArgs, stdinWords, step, textOf } from './harness.mjs';

const [base, activityId, token, shots] = scenarioArgs(
  'node sale_page_lottery.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]',
  3,
);
const { told, close } = stdinWords();

await runScenario(async (page) => {
  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  await step('read that he is registered', () =>
    page.waitForSelector('#lottery[data-status="registered"]', { timeout: 15_000 }),
  );
  if (!(await page.$eval('#buy', (button) => button.disabled))) {
    throw new StepError('the buy button lit for a buyer without a code');
  }
  if (shots) await page.screenshot({ path: `${shots}/lottery-registered.png`, fullPage: true });
  const drawn = told('drawn');
  console.log('registered');
  await drawn;
  await step('read that he won, without a reload', () =>
    page.waitForSelector('#lottery[data-status="won"]', { timeout: 15_000 }),
  );
  await step('wait for the button to light', () => page.waitForSelector('#buy:not([disabled])', { timeout: 15_000 }));
  const won = await textOf(page, '#lottery');
  if (!won.includes('left')) throw new StepError(`no countdown of the code in "${won}"`);
  if (shots) await page.screenshot({ path: `${shots}/lottery-won.png`, fullPage: true });
  await step('click the button', () => page.click('#buy'));
  await step('see the order', () => page.waitForSelector('#order[data-status]:not([hidden])', { timeout: 15_000 }));
  await step('read that he bought', () =>
    page.waitForSelector('#lottery[data-status="bought"]', { timeout: 15_000 }),
  );
  if (shots) await page.screenshot({ path: `${shots}/lottery-bought.png`, fullPage: true });
  console.log('bought');
  close();
});
