#!/usr/bin/env node
// tests/browser/console_ops_flow.mjs: an operator's flow before and during a sale, in the
// hydrated console: pre-warm → rehearsal → readiness → flip → hot keys → reconciliation.
//
// Usage: node console_ops_flow.mjs BASE_URL USERNAME PASSWORD ACTIVITY_ID REASON RULE_JSON [SHOTS_DIR]
//
// On the upcoming activity's page pre-warms it and reads what was loaded. Starts a small
// rehearsal (20 buyers at 20/s) on /rehearsals and follows its page to a verdict. Reads the
// activity's readiness (a verdict and its checks). On the switch board closes `switches/entry`
// and sets the item hot-key rule to RULE_JSON from its row (`flip` in ops_steps.mjs), then
// opens /hotkeys (the keys in force). Says `break` and waits for `go` on stdin (the test opens the sale and
// loses the item's stock key in Redis), then starts a repair run on /reconciliations and
// follows it to its findings, which must report the lost stock. Every step gives REASON. The
// browser's errors are watched (harness.mjs). Exit codes as in harness.mjs.

import { STEP_TIMEOUT_MS, StepError, login, openHydrated, pathOf, runScenario, scenarioArgs, stdinWords, step, textOf } from './harness.mjs';
import { flip, repairRun } from './ops_steps.mjs';

const [baseArg, username, password, activityId, reason, rule, shots] = scenarioArgs(
  'node console_ops_flow.mjs BASE_URL USERNAME PASSWORD ACTIVITY_ID REASON RULE_JSON [SHOTS_DIR]',
  6,
);
const base = baseArg.replace(/\/+$/, '');
const words = stdinWords();
const shoot = async (page, name) => {
  if (shots) await page.screenshot({ path: `${shots}/ops-${name}.png`, fullPage: true });
};
const waitFor = async (page, selector, what, where, timeout = STEP_TIMEOUT_MS) => {
  try {
    await page.waitForSelector(selector, { timeout });
  } catch {
    throw new StepError(`${what}: ${await textOf(page, where)}`);
  }
};

await runScenario(async (page) => {
  await page.setViewportSize({ width: 1366, height: 900 });
  await login(page, base, username, password);

  // Pre-warm.
  await openHydrated(page, base, `/activities/${activityId}`);
  await step('pre-warm', () => page.click('#prewarm-form button[type=submit]'));
  await waitFor(page, '#prewarm-report', 'the pre-warm reported nothing loaded', 'main');

  // Rehearsal.
  await openHydrated(page, base, '/rehearsals');
  await step('start a small rehearsal', async () => {
    const form = page.locator('#start-rehearsal');
    await form.locator('select[name=activity_id]').selectOption(activityId);
    await form.locator('input[name=buyers]').fill('20');
    await form.locator('input[name=rate_per_s]').fill('20');
    await form.locator('textarea[name=reason]').fill(reason);
    await form.locator('button[type=submit]').click();
  });
  await step('the rehearsal opens its page', () =>
    page.waitForURL((url) => /^\/rehearsals\/\d+$/.test(pathOf(url.href)), { timeout: STEP_TIMEOUT_MS }),
  );
  await waitFor(page, '#rehearsal-verdict', 'the rehearsal never reached a verdict', 'main', 60_000);
  const rehearsal = await textOf(page, '#rehearsal-verdict');
  await shoot(page, '1-rehearsal');

  // Readiness.
  await openHydrated(page, base, `/readiness?activity_id=${activityId}`);
  await waitFor(page, '#readiness-checks tbody tr', 'readiness shows no checks', 'main');
  const readiness = await textOf(page, '#readiness-verdict');

  // Flip, and the hot-key rule.
  await openHydrated(page, base, '/switches');
  await flip(page, { path: 'switches/entry', value: 'closed', reason });
  await flip(page, { path: 'rules/hotkeys/item', value: rule, reason });
  await openHydrated(page, base, '/hotkeys');
  await waitFor(page, '#hot-keys, #hot-none', 'the hot keys page shows no table', 'main');

  // Reconciliation, once the stock is lost.
  console.log('break');
  await words.told('go');
  words.close();
  await openHydrated(page, base, '/reconciliations');
  const findings = await repairRun(page, { activityId, reason });
  if (!findings.includes('REDIS_MISSING')) throw new StepError(`the findings do not report the lost stock: ${findings}`);
  await shoot(page, '2-repair');
  console.log(`ok: ${username} pre-warmed, rehearsed (${rehearsal}), read readiness (${readiness}), flipped, set the rule, repaired: ${findings}`);
}, 150_000);
