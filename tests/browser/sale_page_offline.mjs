#!/usr/bin/env node
// tests/browser/sale_page_offline.mjs: the sale page with the API unreachable still shows
// everything static and says the sale's status is unknown.
//
// Usage: node sale_page_offline.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN TITLE PRICE [SHOTS_DIR]
//
// Fails every request to /api/ (as a CDN serving the page while the origin is down would),
// opens the page and checks it shows TITLE and PRICE, says "Sale status unknown" with the phase
// `unknown`, keeps `#buy` disabled, and keeps asking /status. Exit codes as in harness.mjs.

import { StepError, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const [base, activityId, token, title, price, shots] = scenarioArgs(
  'node sale_page_offline.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN TITLE PRICE [SHOTS_DIR]',
  5,
);

await runScenario(async (page) => {
  let refused = 0;
  await page.route('**/api/**', (route) => {
    refused += 1;
    return route.abort('connectionrefused');
  });
  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  await step('wait for the page to try /status twice', () =>
    page.waitForFunction(() => document.getElementById('phase').textContent.includes('cannot be reached'), null, { timeout: 10_000 }),
  );
  const main = await textOf(page, 'main');
  for (const wanted of [title, price]) {
    if (!main.includes(wanted)) throw new StepError(`the page without its API does not show "${wanted}": ${main}`);
  }
  const phase = await page.$eval('#phase', (p) => [p.dataset.phase, p.textContent]);
  if (phase[0] !== 'unknown' || !phase[1].includes('Sale status unknown')) {
    throw new StepError(`the phase says ${JSON.stringify(phase)}`);
  }
  if (!(await page.$eval('#buy', (button) => button.disabled))) throw new StepError('#buy is lit without the API');
  const before = refused;
  const deadline = Date.now() + 5_000;
  while (refused <= before) {
    if (Date.now() > deadline) throw new StepError(`the page stopped asking the API after ${before} requests`);
    await sleep(50);
  }
  if (shots) await page.screenshot({ path: `${shots}/offline.png`, fullPage: true });
  console.log(`ok: title and price shown, status unknown, ${refused} API requests refused`);
});
