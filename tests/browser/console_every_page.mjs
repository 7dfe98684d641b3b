#!/usr/bin/env node
// tests/browser/console_every_page.mjs: every page of the console, watched for errors.
//
// Usage: node console_every_page.mjs BASE_URL USERNAME PASSWORD [PATH...]
//
// Signs in, then opens every page the menu links to and every PATH (pages the menu does not
// link to: forms, one activity, one order...), each by a full load that must hydrate. From
// each menu page it then follows the menu's link to the next one inside the browser and waits
// for that page's heading: a panic in the wasm bundle leaves the router dead, so the link
// would do nothing. Any uncaught page error (a wasm panic, `unreachable`) or console error on
// the way fails the check, naming the page. Prints `visited=N` on success.

import { StepError, login, openHydrated, pathOf, runScenario, scenarioArgs, step } from './harness.mjs';

const [baseArg, username, password, ...extra] = scenarioArgs(
  'node console_every_page.mjs BASE_URL USERNAME PASSWORD [PATH...]',
  3,
);
const base = baseArg.replace(/\/+$/, '');

await runScenario(async (page, watch) => {
  await login(page, base, username, password);
  await openHydrated(page, base, '/');
  const menu = await page.$$eval('nav.sidebar ul a', (links) => links.map((link) => link.getAttribute('href')));
  if (menu.length === 0) throw new StepError('the menu links to no page');
  const clean = (path) => {
    if (watch.faults.length > 0) {
      throw new StepError(`${path}: ${watch.faults.length} error(s) in the browser:\n  ${watch.faults.join('\n  ')}`);
    }
  };
  clean('signing in');
  let visited = 0;
  for (const [index, path] of menu.entries()) {
    await openHydrated(page, base, path);
    await step(`${path}: its heading`, () => page.waitForSelector('main h1'));
    clean(path);
    // The router must still be alive: the next menu entry opens without a page load.
    const next = menu[(index + 1) % menu.length];
    await step(`${path}: follow the menu to ${next}`, async () => {
      await page.click(`nav.sidebar ul a[href="${next}"]`);
      await page.waitForURL((url) => pathOf(url.href) === next);
      await page.waitForSelector('main h1');
    });
    clean(`${path} → ${next}`);
    visited += 1;
  }
  for (const path of extra) {
    await openHydrated(page, base, path);
    await step(`${path}: its heading`, () => page.waitForSelector('main h1'));
    clean(path);
    visited += 1;
  }
  console.log(`visited=${visited}`);
}, 180_000);
