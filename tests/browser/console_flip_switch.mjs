#!/usr/bin/env node
// tests/browser/console_flip_switch.mjs: an operator flips a switch on the hydrated switch board.
//
// Usage: node tests/browser/console_flip_switch.mjs BASE_URL USERNAME PASSWORD REASON
//
// Logs in, opens /switches, opens the change form of `switches/entry`, picks `closed`, gives REASON,
// confirms and flips; then waits for the live panel (it polls the board every second) to report
// that every instance applied the flip, and for the table to show the new value. Exit codes as in
// harness.mjs: 0 ok, 1 failure with the page's messages, 2 bad usage.

import { STEP_TIMEOUT_MS, StepError, login, openHydrated, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [baseArg, username, password, reason] = scenarioArgs(
  'node console_flip_switch.mjs BASE_URL USERNAME PASSWORD REASON',
  4,
);
const base = baseArg.replace(/\/+$/, '');
const ROW = 'tr[data-path="switches/entry"]';

await runScenario(async (page) => {
  await login(page, base, username, password);
  await openHydrated(page, base, '/switches');

  const row = page.locator(ROW);
  await step('open the change form of switches/entry', () => row.locator('summary', { hasText: 'Change' }).click());
  await step('fill the change form', async () => {
    await row.locator('select[name=value]').selectOption('closed');
    await row.locator('textarea[name=reason]').fill(reason);
  });
  const confirmation = await textOf(page, `${ROW} label.confirm`);
  if (!confirmation.includes('from open to closed')) {
    throw new StepError(`the confirmation does not name the change: ${JSON.stringify(confirmation)}`);
  }
  // The browser itself refuses the form until the flip is confirmed.
  await step('submit without confirming', () => row.locator('button[type=submit]').click());
  await page.waitForTimeout(1_000);
  if ((await page.locator('#flip-progress').count()) > 0) {
    throw new StepError('the flip went through without its confirmation');
  }
  await step('confirm and flip', async () => {
    await row.locator('label.confirm input[type=checkbox]').check();
    await row.locator('button[type=submit]').click();
  });

  try {
    await page.waitForSelector('#flip-progress[data-state="complete"]', { timeout: STEP_TIMEOUT_MS });
  } catch {
    const shown = (await textOf(page, '#flip-progress')) || (await textOf(page, '[role=alert], .error'));
    throw new StepError(`the flip was not reported applied by every instance${shown ? ` (page says: ${shown})` : ''}`);
  }
  const summary = await textOf(page, '#flip-summary');
  try {
    await page.waitForFunction(
      (selector) => document.querySelector(selector)?.children[1]?.textContent?.trim().startsWith('closed'),
      ROW,
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch {
    throw new StepError(`the switch table does not show the new value: ${await textOf(page, ROW)}`);
  }
  console.log(`ok: ${username} closed switches/entry from the switch board; ${summary}`);
});
