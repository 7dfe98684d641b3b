#!/usr/bin/env node
// tests/browser/console_reconcile.mjs: an operator starts a repair run on the hydrated
// reconciliation page and follows it to its findings.
//
// Usage: node tests/browser/console_reconcile.mjs BASE_URL USERNAME PASSWORD ACTIVITY_ID REASON
//
// Logs in, opens /reconciliations, picks the activity in the start form and ticks "repair"; the
// browser then asks for a reason (the box makes the reason required). Gives REASON and starts the
// run, lands on the run's page, waits for the page (it follows a running run every second) to
// show the run done with every item counted, and for the findings. Exit codes as in
// harness.mjs: 0 ok, 1 failure with the page's messages, 2 bad usage.

import { STEP_TIMEOUT_MS, StepError, login, openHydrated, pathOf, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [baseArg, username, password, activityId, reason] = scenarioArgs(
  'node console_reconcile.mjs BASE_URL USERNAME PASSWORD ACTIVITY_ID REASON',
  5,
);
const base = baseArg.replace(/\/+$/, '');
const FORM = '#start-run';

await runScenario(async (page) => {
  await login(page, base, username, password);
  await openHydrated(page, base, '/reconciliations');

  const form = page.locator(FORM);
  const reasonBox = form.locator('textarea[name=reason]');
  await step('pick the activity and tick repair', async () => {
    await form.locator('select[name=activity_id]').selectOption(activityId);
    await form.locator('input[name=repair]').check();
  });
  const refused = await reasonBox.evaluate((box) => box.required && !box.checkValidity());
  if (!refused) throw new StepError('a ticked repair box does not make the reason required');
  await step('give the reason and start the run', async () => {
    await reasonBox.fill(reason);
    await form.locator('button[type=submit]').click();
  });

  try {
    await page.waitForURL((url) => /^\/reconciliations\/\d+$/.test(pathOf(url.href)), { timeout: STEP_TIMEOUT_MS });
  } catch {
    const shown = await textOf(page, '[role=alert], .error');
    throw new StepError(`starting the run did not open its page${shown ? ` (page says: ${shown})` : ''}`);
  }
  const runPath = pathOf(page.url());
  try {
    await page.waitForSelector('#run-facts [data-status="done"]', { timeout: STEP_TIMEOUT_MS });
  } catch {
    throw new StepError(`${runPath} never showed the run done: ${await textOf(page, '#run-facts')}`);
  }
  const [done, total] = await page
    .locator('#run-progress')
    .evaluate((bar) => [bar.dataset.done, bar.dataset.total]);
  if (done !== total) throw new StepError(`the finished run counts ${done} of ${total} items`);
  const summary = await textOf(page, '#finding-summary');
  if (!summary.includes('REDIS_MISSING')) {
    throw new StepError(`the findings do not report the lost stock: ${summary || (await textOf(page, 'main'))}`);
  }
  if (!(await textOf(page, '#run-facts')).includes(reason)) {
    throw new StepError(`the run's page does not show its reason: ${await textOf(page, '#run-facts')}`);
  }
  console.log(`ok: ${username} ran a repair of activity ${activityId} (${runPath}, ${done}/${total} items): ${summary}`);
});
