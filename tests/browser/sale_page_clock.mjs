#!/usr/bin/env node
// tests/browser/sale_page_clock.mjs: a visitor whose clock is off sees the buy button light at
// the server's start, not at his own clock's.
//
// Usage: node sale_page_clock.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN STARTS_AT_MS OFFSET_MS [SHOTS_DIR]
//
// Shifts the page's `Date` (now and new Date()) by OFFSET_MS before any script runs, opens the
// published page with the buyer's token in its fragment, checks the countdown shows and that
// the page's clock is really off, then watches `#buy` every 20 ms: it must be disabled at every
// look before STARTS_AT_MS (this process's clock is the machine's, which is the server's) and
// enabled at some look after it. Prints `lit_at=MS`, the first look that saw it enabled; the
// Rust test checks it against the start. Exit codes as in harness.mjs.

import { StepError, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [base, activityId, token, startsArg, offsetArg, shots] = scenarioArgs(
  'node sale_page_clock.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN STARTS_AT_MS OFFSET_MS [SHOTS_DIR]',
  5,
);
const startsAt = Number(startsArg);
const offset = Number(offsetArg);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

await runScenario(async (page) => {
  await page.addInitScript((shift) => {
    const RealDate = Date;
    class ShiftedDate extends RealDate {
      constructor(...args) {
        if (args.length === 0) super(RealDate.now() + shift);
        else super(...args);
      }
      static now() {
        return RealDate.now() + shift;
      }
    }
    globalThis.Date = ShiftedDate;
  }, offset);
  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  const skew = await page.evaluate(() => Date.now()) - Date.now();
  if (Math.abs(skew - offset) > 5_000) throw new StepError(`the page's clock is off by ${skew} ms, not ${offset}`);
  await step('wait for the countdown', () =>
    page.waitForFunction(() => /Starts in/.test(document.getElementById('countdown').textContent), null, { timeout: 10_000 }),
  );
  if (shots) await page.screenshot({ path: `${shots}/clock-${offset > 0 ? 'ahead' : 'behind'}-countdown.png`, fullPage: true });
  let looksBefore = 0;
  let litAt = null;
  const deadline = startsAt + 10_000;
  while (Date.now() < deadline) {
    const disabled = await page.$eval('#buy', (button) => button.disabled);
    const now = Date.now();
    if (!disabled) {
      litAt = now;
      break;
    }
    if (now < startsAt) looksBefore += 1;
    await sleep(20);
  }
  if (litAt === null) throw new StepError(`#buy never lit (phase: ${await textOf(page, '#phase')}, countdown: ${await textOf(page, '#countdown')})`);
  if (litAt < startsAt) throw new StepError(`#buy lit ${startsAt - litAt} ms before the server's start`);
  if (looksBefore < 10) throw new StepError(`only ${looksBefore} looks before the start: the page opened too late to tell`);
  if (shots) await page.screenshot({ path: `${shots}/clock-${offset > 0 ? 'ahead' : 'behind'}-lit.png`, fullPage: true });
  console.log(`lit_at=${litAt}`);
  console.log(`ok: clock off by ${offset} ms, grey at ${looksBefore} looks before the start, lit ${litAt - startsAt} ms after it`);
});
