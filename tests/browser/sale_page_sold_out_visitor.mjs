#!/usr/bin/env node
// tests/browser/sale_page_sold_out_visitor.mjs: a visitor without a buyer token on a sold-out
// sale reads that it is sold out, not an invitation to sign in to buy.
//
// Usage: node sale_page_sold_out_visitor.mjs BASE_URL ACTIVITY_ID [SHOTS_DIR]
//
// Opens the page of an open, sold-out sale without a token, waits for "Sold out." and the
// item's units left at "sold out", and fails if the page says "Sign in to buy". Exit codes as
// in harness.mjs.

import { StepError, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [base, activityId, shots] = scenarioArgs('node sale_page_sold_out_visitor.mjs BASE_URL ACTIVITY_ID [SHOTS_DIR]', 2);

await runScenario(async (page) => {
  await step('open the sale page', () => page.goto(`${base}/sale/${activityId}/`, { waitUntil: 'load' }));
  await step('see "Sold out."', () =>
    page.waitForFunction(() => document.getElementById('phase').textContent === 'Sold out.', null, { timeout: 10_000 }),
  );
  await step('the units left say sold out', () =>
    page.waitForFunction(() => document.querySelector('.item .left')?.textContent === 'sold out'),
  );
  const message = await textOf(page, '#message');
  if (message.includes('Sign in')) throw new StepError(`a sold-out page says: ${message}`);
  if (shots) await page.screenshot({ path: `${shots}/sale-sold-out-visitor.png`, fullPage: true });
  console.log('ok: sold out, no invitation to sign in');
});
