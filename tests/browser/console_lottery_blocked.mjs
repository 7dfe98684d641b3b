#!/usr/bin/env node
// tests/browser/console_lottery_blocked.mjs: ops are warned on a lottery's activity page
// while its registration is open and buyers cannot reach it, and the warning goes once they
// can.
//
// Usage: node console_lottery_blocked.mjs BASE_URL USERNAME PASSWORD ACTIVITY_ID [SHOTS_DIR]
//
// Signs in, opens the hydrated page of ACTIVITY_ID, waits for the notice (`#registration`,
// state `blocked`, an alert saying buyers cannot register) and says `blocked`; the test then
// makes the activity reachable (a pre-warm) and writes `reachable` on stdin. Waits, without a
// reload, for the line to say registration is open and buyers can register (the page reads
// the reach again every 10 s), and prints `open`. Exit codes as in harness.mjs.

import { StepError, login, openHydrated, runScenario, scenarioArgs, stdinWords, step, textOf } from './harness.mjs';

const [base, username, password, activityId, shots] = scenarioArgs(
  'node console_lottery_blocked.mjs BASE_URL USERNAME PASSWORD ACTIVITY_ID [SHOTS_DIR]',
  4,
);
const { told, close } = stdinWords();

await runScenario(async (page) => {
  await login(page, base, username, password);
  await openHydrated(page, base, `/activities/${activityId}`);
  try {
    await page.waitForSelector('#registration[data-state="blocked"][role="alert"]', { state: 'visible', timeout: 15_000 });
  } catch {
    const line = await page.$('#registration');
    const said = line ? `${await line.getAttribute('data-state')}: ${await line.innerText()}` : 'no registration line';
    throw new StepError(`no blocked notice; the page says ${said}`);
  }
  const notice = await textOf(page, '#registration');
  if (!notice.includes('buyers cannot register')) throw new StepError(`the notice reads "${notice}"`);
  if (shots) await page.screenshot({ path: `${shots}/lottery-blocked.png`, fullPage: true });
  const reachable = told('reachable');
  console.log('blocked');
  await reachable;
  await step('read that buyers can register now', () =>
    page.waitForSelector('#registration[data-state="open"]', { state: 'visible', timeout: 25_000 }),
  );
  const line = await textOf(page, '#registration');
  if (!line.includes('buyers can register')) throw new StepError(`the line reads "${line}"`);
  console.log('open');
  close();
});
