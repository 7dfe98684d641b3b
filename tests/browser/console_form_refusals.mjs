#!/usr/bin/env node
// tests/browser/console_form_refusals.mjs: a merchant's bad input in the item and activity
// forms, refused in the words of the forms' labels: never a field's wire name.
//
// Usage: node console_form_refusals.mjs BASE_URL USERNAME PASSWORD ITEM_NAME PRICE...
//
// Logs in. For each PRICE opens /items/new, types a name and the price, saves, and waits for
// the form's message: it must carry the admin API's code (`data-code="BAD_REQUEST"`) and name
// what was typed. Then, on /activities/new with ITEM_NAME picked by name, saves inputs the
// browser lets through but the rules refuse (a blank title, a limit above the stock, a price
// too high, a pay time too long, a price that is no amount): each message names the fields
// as the form labels them, and goes once the form is edited. No message may hold a wire name
// (`price_cents`, `ends_at`: any snake_case word). Prints `shown=MESSAGE` per refusal. Exit codes as in harness.mjs.

import { StepError, login, openHydrated, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [baseArg, username, password, itemName, ...prices] = scenarioArgs(
  'node console_form_refusals.mjs BASE_URL USERNAME PASSWORD ITEM_NAME PRICE...',
  5,
);
const base = baseArg.replace(/\/+$/, '');
const WIRE_NAME = /\b[a-z]+(?:_[a-z]+)+\b/;
// A `datetime-local` value a day ahead (the context's zone is UTC).
const wall = (ms) => new Date(ms).toISOString().slice(0, 16);
const starts = Date.now() + 24 * 3_600_000;

/** The refusal shown in the form (`code` when the server's), checked for `expected` words. */
async function refusal(page, what, expected, code) {
  const selector = code ? `[role=alert][data-code="${code}"]` : '[role=alert]';
  try {
    await page.waitForSelector(selector, { timeout: 10_000 });
  } catch {
    throw new StepError(`${what}: no refusal${code ? ` with the code ${code}` : ''}; the page says: ${await textOf(page, 'main')}`);
  }
  const shown = await textOf(page, selector);
  if (!shown.includes(expected)) throw new StepError(`${what}: the refusal reads "${shown}", not "${expected}"`);
  const wire = WIRE_NAME.exec(shown);
  if (wire) throw new StepError(`${what}: the refusal names the wire field "${wire[0]}": ${shown}`);
  console.log(`shown=${shown}`);
}

await runScenario(async (page) => {
  await login(page, base, username, password);
  for (const price of prices) {
    await openHydrated(page, base, '/items/new');
    await step(`type the price ${price}`, async () => {
      await page.fill('#item-form input[name=name]', 'Bad price');
      await page.fill('#item-form input[name=price]', price);
    });
    await step('save', () => page.locator('#item-form [type=submit]').click());
    await refusal(page, `price ${price}`, price, 'BAD_REQUEST');
  }

  const cases = [
    ['a blank title', { title: '   ' }, 'Title must not be empty', 'BAD_REQUEST'],
    ['a limit above the stock', { per_user_limit: '6' }, 'Item 1, Limit / user must not exceed its Stock', 'BAD_REQUEST'],
    ['a price too high', { price: '100000000.01' }, 'Item 1, Sale price (yuan) must be between 0.00 and 100000000.00', 'BAD_REQUEST'],
    ['a pay time too long', { pay_timeout_s: '100000' }, 'Pay within (s) must be between 10 and 86400 seconds', 'BAD_REQUEST'],
    ['a price that is no amount', { price: 'abc' }, 'Item 1, Sale price (yuan): `abc` is not an amount', null],
  ];
  for (const [what, change, expected, code] of cases) {
    await openHydrated(page, base, '/activities/new');
    await step(`fill the activity form with ${what}`, async () => {
      const value = await page.$eval(
        '#activity-form select[name=item_id]',
        (select, name) => [...select.options].find((option) => option.text.startsWith(`${name} (`))?.value,
        itemName,
      );
      if (!value) throw new StepError(`${itemName} is not in the item picker`);
      await page.selectOption('#activity-form select[name=item_id]', value);
      const fields = {
        title: 'Refused sale',
        starts_at: wall(starts),
        ends_at: wall(starts + 3_600_000),
        stock: '5',
        per_user_limit: '1',
        pay_timeout_s: '900',
        ...change,
      };
      for (const [name, value] of Object.entries(fields)) {
        await page.fill(`#activity-form [name=${name}]`, value);
      }
    });
    await step('save', () => page.click('#activity-form button[type=submit]'));
    await refusal(page, what, expected, code);
    // Once the form is edited the refusal no longer describes it, and goes.
    await step(`edit the form after ${what}`, () => page.fill('#activity-form [name=title]', 'Refused sale, edited'));
    try {
      await page.waitForSelector('[role=alert]', { state: 'detached', timeout: 10_000 });
    } catch {
      throw new StepError(`${what}: the refusal stays on screen after the form was edited: ${await textOf(page, '[role=alert]')}`);
    }
  }
});
