#!/usr/bin/env node
// tests/browser/sale_page_stream_cut.mjs: the sale page whose event stream is cut mid-flow
// falls back to polling and still ends right.
//
// Usage: node sale_page_stream_cut.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]
//
// BASE_URL goes through a proxy the test can cut. The sale's orders are recorded until the test
// replays them. Opens the page, sees its stream open, clicks `#buy`, sees "preparing"; from then
// on the stream may not be opened again (its requests are aborted); prints `cut` and waits for
// `cut` on stdin (the test has cut every connection and handed the order to the pipeline). Must
// then see the page read the order by itself, show the pay button, pay, and see "paid".
// Prints `order=ID` and `reads=N`. Exit codes as in harness.mjs.

import { StepError, runScenario, scenarioArgs, stdinWords, step, textOf } from './harness.mjs';

const [base, activityId, token, shots] = scenarioArgs(
  'node sale_page_stream_cut.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN [SHOTS_DIR]',
  3,
);
const stdin = stdinWords();

await runScenario(async (page) => {
  let reads = 0;
  page.on('request', (request) => {
    if (/\/api\/orders\/[0-9a-f-]+$/.test(new URL(request.url()).pathname)) reads += 1;
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
  await page.route('**/api/events?**', (route) => route.abort());
  console.log('cut');
  await stdin.told('cut');
  stdin.close();
  try {
    await page.waitForSelector('#pay:not([hidden])', { timeout: 20_000 });
  } catch {
    throw new StepError(`no pay button after the stream was cut; the page says: ${await textOf(page, '#order')}`);
  }
  if (reads === 0) throw new StepError('the pay button came without a read of the order');
  if (shots) await page.screenshot({ path: `${shots}/cut-ready.png`, fullPage: true });
  await step('pay', () => page.click('#pay'));
  try {
    await page.waitForSelector('#order[data-status="PAID"]', { timeout: 20_000 });
  } catch {
    throw new StepError(`the order never showed paid: ${await textOf(page, '#order')}`);
  }
  console.log(`order=${order}`);
  console.log(`reads=${reads}`);
  console.log(`ok: with the stream cut, ${reads} reads of the order brought it to paid`);
}, 90_000);
