#!/usr/bin/env node
// tests/browser/sale_page_refusal.mjs: a refused buy is said in words on the sale page.
//
// Usage: node sale_page_refusal.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN CODE WORDS [SHOTS_DIR]
//
// Opens the page of an open sale, waits for `#buy` to light and says `lit`; the test then
// makes the refusal happen (another buyer takes the last unit, or the item's window) and
// writes `click` on stdin. Clicks, waits for `#message` to carry CODE, checks its text holds
// WORDS and prints `shown=TEXT`. Exit codes as in harness.mjs.

import { StepError, runScenario, scenarioArgs, stdinWords, step, textOf } from './harness.mjs';

const [base, activityId, token, code, words, shots] = scenarioArgs(
  'node sale_page_refusal.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN CODE WORDS [SHOTS_DIR]',
  5,
);
const { told, close } = stdinWords();

await runScenario(async (page) => {
  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  await step('wait for the button to light', () => page.waitForSelector('#buy:not([disabled])', { timeout: 15_000 }));
  const click = told('click');
  console.log('lit');
  await click;
  await step('click the button', () => page.click('#buy'));
  try {
    await page.waitForSelector(`#message[data-code="${code}"]`, { timeout: 10_000 });
  } catch {
    throw new StepError(`no ${code} message; the page says: ${await textOf(page, '#message')}`);
  }
  const shown = await textOf(page, '#message');
  if (!shown.includes(words)) throw new StepError(`the ${code} message "${shown}" does not say "${words}"`);
  if (shots) await page.screenshot({ path: `${shots}/refusal-${code}.png`, fullPage: true });
  console.log(`shown=${shown}`);
  close();
});
