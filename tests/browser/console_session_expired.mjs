#!/usr/bin/env node
// tests/browser/console_session_expired.mjs: a session that ends sends the user to sign in
// again and back to the page asked for.
//
// Usage: node console_session_expired.mjs BASE_URL USERNAME PASSWORD [SHOTS_DIR]
//
// Signs in and opens /orders; the session cookie is then dropped (as an expired session is).
// Following the menu to /items must lead to the login page (or an error with a "sign in again"
// link, which is followed), which says "Please sign in to continue"; signing in there lands on
// /items. Then a full load of /audit while signed out leads to the login page, and signing in
// lands on /audit. Exit codes as in harness.mjs.

import { StepError, login, openHydrated, pathOf, runScenario, scenarioArgs, step, textOf, waitForHydration } from './harness.mjs';

const [baseArg, username, password, shots] = scenarioArgs(
  'node console_session_expired.mjs BASE_URL USERNAME PASSWORD [SHOTS_DIR]',
  3,
);
const base = baseArg.replace(/\/+$/, '');

await runScenario(async (page) => {
  await page.setViewportSize({ width: 1366, height: 900 });
  // Signs in on the login page the console sent us to; it must say why and go back to `want`.
  const signInAgain = async (want) => {
    await step(`the login page asks to sign in to continue to ${want}`, async () => {
      await page.waitForURL((url) => pathOf(url.href) === '/login');
      await waitForHydration(page, '/login');
      await page.waitForSelector('#sign-in-to-continue');
    });
    const said = await textOf(page, '#sign-in-to-continue');
    if (!said.includes('Please sign in') || !said.includes(want)) throw new StepError(`the login page says: ${said}`);
    if (shots) await page.screenshot({ path: `${shots}/session-expired-${want.replace(/\W+/g, '')}.png`, fullPage: true });
    await page.fill('input[name=username]', username);
    await page.fill('input[name=password]', password);
    await page.locator('form:has(input[name=username]) [type=submit]').click();
    await step(`back on ${want} once signed in`, () => page.waitForURL((url) => pathOf(url.href) === want));
  };

  await login(page, base, username, password);
  await openHydrated(page, base, '/orders');
  await page.context().clearCookies();
  await step('follow the menu to /items', () => page.click('nav.sidebar ul a[href="/items"]'));
  await step('the login page or a "sign in again" link', () =>
    page.waitForFunction(() => location.pathname === '/login' || document.getElementById('sign-in-again')),
  );
  if (pathOf(page.url()) !== '/login') {
    const said = await textOf(page, '[role=alert]');
    if (!said.includes('please sign in')) throw new StepError(`the error says: ${said}`);
    await page.click('#sign-in-again');
  }
  await signInAgain('/items');

  await page.context().clearCookies();
  await step('open /audit signed out', () => page.goto(`${base}/audit`, { waitUntil: 'load' }));
  await signInAgain('/audit');
  console.log('ok: an ended session came back to /items and /audit once signed in again');
});
