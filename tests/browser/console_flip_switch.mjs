#!/usr/bin/env node
// tests/browser/console_flip_switch.mjs: an operator closes the entry switch on the hydrated
// switch board with the keyboard alone (or the mouse).
//
// Usage: node tests/browser/console_flip_switch.mjs BASE_URL USERNAME PASSWORD REASON [keyboard|mouse]
//
// Logs in, opens /switches and flips `switches/entry` to `closed` with REASON as `flip` in
// ops_steps.mjs does it: with `keyboard` (the default) every control is reached with Tab alone,
// each with a visible focus ring, and worked with Enter, Space and typing; the unconfirmed
// flip is refused and hands the focus to the confirmation. Then the table must show the new
// value. Exit codes as in harness.mjs: 0 ok, 1 failure with the page's messages, 2 bad usage.

import { STEP_TIMEOUT_MS, StepError, login, openHydrated, runScenario, scenarioArgs, textOf } from './harness.mjs';
import { flip } from './ops_steps.mjs';

const [baseArg, username, password, reason, input = 'keyboard'] = scenarioArgs(
  'node console_flip_switch.mjs BASE_URL USERNAME PASSWORD REASON [keyboard|mouse]',
  4,
);
const base = baseArg.replace(/\/+$/, '');
const ROW = 'tr[data-path="switches/entry"]';

await runScenario(async (page) => {
  await login(page, base, username, password);
  await openHydrated(page, base, '/switches');
  const summary = await flip(page, { path: 'switches/entry', value: 'closed', reason, input });
  try {
    await page.waitForFunction(
      (selector) => document.querySelector(selector)?.children[1]?.textContent?.trim().startsWith('closed'),
      ROW,
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch {
    throw new StepError(`the switch table does not show the new value: ${await textOf(page, ROW)}`);
  }
  console.log(`ok: ${username} closed switches/entry from the switch board by ${input}; ${summary}`);
});
