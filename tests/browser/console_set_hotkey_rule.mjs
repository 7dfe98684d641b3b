#!/usr/bin/env node
// tests/browser/console_set_hotkey_rule.mjs: an operator sets a hot-key rule from its row.
//
// Usage: node console_set_hotkey_rule.mjs BASE_URL USERNAME PASSWORD REASON RULE_JSON
//
// Logs in, opens /switches, opens the change form of `rules/hotkeys/item`, types RULE_JSON as
// the new value, gives REASON, confirms and flips; waits for the live panel to report the flip
// applied by every instance, then for the row's Applied column to say so too (it read "0 / 1"
// while the banner said every instance had applied it). Exit codes as in harness.mjs.

import { STEP_TIMEOUT_MS, StepError, login, openHydrated, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [baseArg, username, password, reason, rule] = scenarioArgs(
  'node console_set_hotkey_rule.mjs BASE_URL USERNAME PASSWORD REASON RULE_JSON',
  5,
);
const base = baseArg.replace(/\/+$/, '');
const ROW = 'tr[data-path="rules/hotkeys/item"]';

await runScenario(async (page) => {
  await login(page, base, username, password);
  await openHydrated(page, base, '/switches');
  const row = page.locator(ROW);
  await step('open the change form of rules/hotkeys/item', () => row.locator('summary', { hasText: 'Change' }).click());
  await step('type the rule and the reason', async () => {
    await row.locator('[name=value]').fill(rule);
    await row.locator('textarea[name=reason]').fill(reason);
  });
  await step('confirm and flip', async () => {
    await row.locator('label.confirm input[type=checkbox]').check();
    await row.locator('button[type=submit]').click();
  });
  try {
    await page.waitForSelector('#flip-progress[data-state="complete"]', { timeout: STEP_TIMEOUT_MS });
  } catch {
    const shown = (await textOf(page, '#flip-progress')) || (await textOf(page, '[role=alert], .error'));
    throw new StepError(`the rule was not reported applied by every instance${shown ? ` (page says: ${shown})` : ''}`);
  }
  const total = await page.locator('#flip-progress li').count();
  // The banner has spoken; the row's figure must agree within a couple of the page's beats.
  try {
    await page.waitForFunction(
      ([selector, want]) => document.querySelector(selector)?.children[5]?.textContent?.trim() === want,
      [ROW, `${total} / ${total}`],
      { timeout: 3_000 },
    );
  } catch {
    throw new StepError(`the row's Applied column lags the banner: ${await textOf(page, ROW)}`);
  }
  console.log(`ok: ${username} set rules/hotkeys/item; applied ${total} / ${total}`);
});
