#!/usr/bin/env node
// tests/browser/console_lottery_draw.mjs: ops read a lottery's draw in the console and
// revoke a buyer with a reason.
//
// Usage: node console_lottery_draw.mjs BASE_URL USERNAME PASSWORD ACTIVITY_ID COMMITMENT USER_ID [SHOTS_DIR]
//
// Signs in, opens the draw page of ACTIVITY_ID, checks that it shows COMMITMENT and the seed
// (the draw is made) and where the registrations came from (the test's four, from one
// address: the busiest 100 made all of them), revokes USER_ID with a reason and waits for the page to say so; prints
// `revoked`. Exit codes as in harness.mjs.

import { StepError, login, openHydrated, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [base, username, password, activityId, commitment, userId, shots] = scenarioArgs(
  'node console_lottery_draw.mjs BASE_URL USERNAME PASSWORD ACTIVITY_ID COMMITMENT USER_ID [SHOTS_DIR]',
  6,
);

await runScenario(async (page) => {
  await login(page, base, username, password);
  await openHydrated(page, base, `/draw?activity_id=${activityId}`);
  await step('read the draw', () => page.waitForSelector('#draw-items tbody tr', { timeout: 15_000 }));
  const shown = await textOf(page, '#draw-commitment');
  if (shown !== commitment) throw new StepError(`the commitment shown is "${shown}", not ${commitment}`);
  const seed = await textOf(page, '#draw-seed');
  if (!/^[0-9a-f]{64}$/.test(seed)) throw new StepError(`no seed once drawn: "${seed}"`);
  const sources = await textOf(page, '[data-sources]');
  if (!sources.includes('4 registration(s) from 1 address(es)') || !sources.includes('100.0 %')) {
    throw new StepError(`the registrations' sources read "${sources}"`);
  }
  if (shots) await page.screenshot({ path: `${shots}/draw-sources.png`, fullPage: true });
  await step('fill the revoke form', async () => {
    await page.fill('#revoke-form input[name=user_id]', userId);
    await page.fill('#revoke-form input[name=reason]', 'one of a farm of accounts');
  });
  await step('revoke', () => page.click('#revoke-form [type=submit]'));
  await step('read that he is revoked', () => page.waitForSelector('#revoked', { timeout: 15_000 }));
  if (shots) await page.screenshot({ path: `${shots}/lottery-draw.png`, fullPage: true });
  console.log('revoked');
});
