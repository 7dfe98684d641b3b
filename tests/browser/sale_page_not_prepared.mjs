#!/usr/bin/env node
// tests/browser/sale_page_not_prepared.mjs: a sale page published before its pre-warm says
// the sale is not open yet (its /status answers 404 until then), never that the shop cannot
// be reached, and moves on to the countdown once the sale is pre-warmed.
//
// Usage: node sale_page_not_prepared.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]
//
// Opens the page, waits for the phase `not-ready` saying "not open yet" and says `not-ready`;
// the test then pre-warms the sale and writes `prewarmed` on stdin. Waits (within 15 s) for
// the phase `upcoming` and its countdown and prints `ok`. Exit codes as in harness.mjs.

import { StepError, runScenario, scenarioArgs, stdinWords, step, textOf } from './harness.mjs';

const [base, activityId, token, shots] = scenarioArgs(
  'node sale_page_not_prepared.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]',
  3,
);
const { told, close } = stdinWords();

await runScenario(async (page) => {
  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  try {
    await page.waitForSelector('#phase[data-phase="not-ready"]', { timeout: 10_000 });
  } catch {
    throw new StepError(`the page does not say the sale is not open yet: ${await textOf(page, '#phase')}`);
  }
  const said = await textOf(page, '#phase');
  if (!said.includes('not open yet') || said.includes('cannot be reached')) {
    throw new StepError(`before the pre-warm the page says: ${said}`);
  }
  if (shots) await page.screenshot({ path: `${shots}/sale-not-prepared.png`, fullPage: true });
  const prewarmed = told('prewarmed');
  console.log('not-ready');
  await prewarmed;
  await step('see the countdown once pre-warmed', () =>
    page.waitForSelector('#phase[data-phase="upcoming"]', { timeout: 15_000 }),
  );
  console.log('ok');
  close();
});
