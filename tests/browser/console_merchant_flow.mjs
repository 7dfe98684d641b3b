#!/usr/bin/env node
// tests/browser/console_login_create_item.mjs: end-to-end check of the admin console in a real browser.
//
// Usage: node tests/browser/console_login_create_item.mjs BASE_URL USERNAME PASSWORD ITEM_NAME
//
// Logs in through /login, opens /items/new, waits until the wasm bundle has hydrated the page
// (#console[data-hydrated="true"]), creates an item named ITEM_NAME and checks that the item list
// shows it. Exit 0 on success; 1 with a clear message (plus the browser console messages, page
// errors and failed requests collected so far) on failure; 2 on bad usage. The browser is always
// closed; the whole run is limited to 60 s (see harness.mjs).

import {
  STEP_TIMEOUT_MS,
  StepError,
  login,
  openHydrated,
  pathOf,
  runScenario,
  scenarioArgs,
  step,
  textOf,
} from './harness.mjs';

const [baseArg, username, password, itemName] = scenarioArgs(
  'node console_login_create_item.mjs BASE_URL USERNAME PASSWORD ITEM_NAME',
  4,
);
const base = baseArg.replace(/\/+$/, '');

await runScenario(async (page) => {
  // 1. Log in.
  await login(page, base, username, password);

  // 2. New item form, once hydrated.
  await openHydrated(page, base, '/items/new');
  await step('fill the item form', async () => {
    await page.fill('#item-form input[name=name]', itemName);
    await page.fill('#item-form input[name=price]', '12.50');
    const named = page.locator('#item-form textarea[name=description]');
    const description = (await named.count()) > 0 ? named : page.locator('#item-form textarea').first();
    await description.fill(`Created by the browser test (${new Date().toISOString()}).`);
  });
  await step('submit the item form', () => page.locator('#item-form [type=submit]').first().click());
  try {
    await page.waitForURL((url) => pathOf(url.href).endsWith('/items'), { timeout: STEP_TIMEOUT_MS });
  } catch {
    const shown = await textOf(page, '#item-form [role=alert], #item-form .error, [role=alert], .error');
    throw new StepError(
      `after submitting the item form the page stayed at ${page.url()}${shown ? ` (page says: ${shown})` : ''}`,
    );
  }

  // 3. The list shows the new item.
  try {
    await page.waitForFunction(
      ([name]) => document.querySelector('#item-list')?.textContent?.includes(name),
      [itemName],
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch {
    const list = await textOf(page, '#item-list');
    throw new StepError(
      `#item-list at ${page.url()} does not contain ${JSON.stringify(itemName)}; ` +
        (list ? `it shows: ${list}` : 'the list is missing or empty'),
    );
  }
  console.log(`ok: logged in as ${username}, created item ${JSON.stringify(itemName)}, listed at ${page.url()}`);
});
