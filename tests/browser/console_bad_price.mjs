#!/usr/bin/env node
// tests/browser/console_bad_price.mjs: a price that is no price, typed into the item form.
//
// Usage: node console_bad_price.mjs BASE_URL USERNAME PASSWORD PRICE...
//
// Logs in, and for each PRICE opens /items/new, types a name and the price, saves, and waits
// for the form's message: it must carry the admin API's code (`data-code="BAD_REQUEST"`) and
// name what was typed. Prints `shown=MESSAGE` per price. Exit codes as in harness.mjs.

import { StepError, login, openHydrated, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [baseArg, username, password, ...prices] = scenarioArgs(
  'node console_bad_price.mjs BASE_URL USERNAME PASSWORD PRICE...',
  4,
);
const base = baseArg.replace(/\/+$/, '');

await runScenario(async (page) => {
  await login(page, base, username, password);
  for (const price of prices) {
    await openHydrated(page, base, '/items/new');
    await step(`type the price ${price}`, async () => {
      await page.fill('#item-form input[name=name]', 'Bad price');
      await page.fill('#item-form input[name=price]', price);
    });
    await step('save', () => page.locator('#item-form [type=submit]').click());
    try {
      await page.waitForSelector('[role=alert][data-code="BAD_REQUEST"]', { timeout: 10_000 });
    } catch {
      throw new StepError(`price ${price}: no message with the code; the page says: ${await textOf(page, 'main')}`);
    }
    const shown = await textOf(page, '[role=alert][data-code="BAD_REQUEST"]');
    if (!shown.includes(price)) throw new StepError(`price ${price}: the message does not name it: ${shown}`);
    console.log(`shown=${shown}`);
  }
});
