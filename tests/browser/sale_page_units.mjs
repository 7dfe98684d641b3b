#!/usr/bin/env node
// tests/browser/sale_page_units.mjs: on an open sale's page, the units left follow other
// buyers' purchases as they happen, pushed by the buyer's event stream: /status is not asked.
//
// Usage: node sale_page_units.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN STOCK [SHOTS_DIR]
//
// Opens the page (the token in the fragment, so the page opens its event stream), sees
// "STOCK left", then makes /status unreachable (every later read of it fails), so a figure
// can only move by the stream, and says `watching`. The test has other buyers take units and
// writes `left=N` on stdin for each figure to come; the page must show "N left" ("sold out"
// for 0, with the phase saying so) within 5 s, far inside the 20 s between two reads of
// /status. Prints `seen=N` for each, and `status_reads=N`: the refused reads after
// `watching`. The browser's errors are watched (harness.mjs). Exit codes as there.

import { createInterface } from 'node:readline';
import { StepError, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [base, activityId, token, stock, shots] = scenarioArgs(
  'node sale_page_units.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN STOCK [SHOTS_DIR]',
  4,
);
const LEFT = '.item .left';
const shot = async (page, name) => {
  if (!shots) return;
  for (const size of [{ width: 1366, height: 900 }, { width: 390, height: 844 }]) {
    await page.setViewportSize(size);
    await page.screenshot({ path: `${shots}/units-${name}-${size.width}.png`, fullPage: true });
  }
};
const showing = async (page, text, what) => {
  try {
    await page.waitForFunction(([selector, t]) => document.querySelector(selector)?.textContent === t, [LEFT, text], { timeout: 5_000 });
  } catch {
    throw new StepError(`${what}: the page still says "${await textOf(page, LEFT)}", not "${text}"`);
  }
};

await runScenario(async (page) => {
  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  try {
    await page.waitForFunction(([selector, t]) => document.querySelector(selector)?.textContent === t, [LEFT, `${stock} left`], { timeout: 10_000 });
  } catch {
    throw new StepError(`the page does not show ${stock} left: "${await textOf(page, LEFT)}"`);
  }
  let statusReads = 0;
  await page.route(`**/api/activities/${activityId}/status`, (route) => {
    statusReads += 1;
    return route.abort();
  });
  console.log('watching');
  const input = createInterface({ input: process.stdin });
  for await (const line of input) {
    const left = Number(line.trim().replace(/^left=/, ''));
    if (!Number.isInteger(left)) throw new StepError(`the test said "${line}"`);
    await showing(page, left === 0 ? 'sold out' : `${left} left`, `after other buyers took units, ${left} left`);
    if (left === 0) {
      const phase = await textOf(page, '#phase');
      if (phase !== 'Sold out.') throw new StepError(`sold out, the page says "${phase}"`);
      if (!(await page.$eval('#buy', (button) => button.disabled))) throw new StepError('#buy is lit on a sold-out sale');
      await shot(page, 'sold-out');
    } else {
      await shot(page, `left-${left}`);
    }
    console.log(`seen=${left}`);
    if (left === 0) break;
  }
  input.close();
  console.log(`status_reads=${statusReads}`);
}, 60_000);
