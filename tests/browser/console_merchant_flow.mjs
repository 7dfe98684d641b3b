#!/usr/bin/env node
// tests/browser/console_merchant_flow.mjs: a merchant's whole flow in the hydrated console, as
// a merchant in Shanghai (UTC+8) lives it: item → activity → publish → edit → republish.
//
// Usage: node console_merchant_flow.mjs BASE_URL USERNAME PASSWORD ITEM_NAME STARTS_AT_MS [SHOTS_DIR]
//
// Signs in; creates ITEM_NAME at 12.50 on /items/new and sees it listed. On /activities/new
// picks it by name (the sale price starts at the item's), and types the start and the end in
// the viewer's zone: the labels name the zone and the UTC instant shows beside each time. An
// end equal to the start is refused naming the form's fields ("Ends must be after Starts");
// the end an hour later saves, and the activity's page opens with the same wall-clock times in
// its edit form. Publishes (version 1, current); changes the sale price to 99.00 and saves: the
// page says "Saved." and `#publication` turns stale naming version 1 and the republish;
// Publish makes version 2 and the hint current again. Prints `activity=ID`. The browser's
// errors are watched (harness.mjs). Exit codes as in harness.mjs.

import { STEP_TIMEOUT_MS, StepError, login, openHydrated, pathOf, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [baseArg, username, password, itemName, startsAtMs, shots] = scenarioArgs(
  'node console_merchant_flow.mjs BASE_URL USERNAME PASSWORD ITEM_NAME STARTS_AT_MS [SHOTS_DIR]',
  5,
);
const base = baseArg.replace(/\/+$/, '');
const ZONE = 'Asia/Shanghai';
const EAST_MS = 8 * 3_600_000;
const ITEM_PRICE = '12.50';
// A `datetime-local` value: the wall clock in Shanghai (no summer time there).
const wall = (ms) => new Date(ms + EAST_MS).toISOString().slice(0, 16);
const utcText = (ms) => `${new Date(ms).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
const starts = Number(startsAtMs);
const ends = starts + 3_600_000;
const shoot = async (page, name) => {
  if (!shots) return;
  for (const size of [{ width: 1366, height: 900 }, { width: 390, height: 844 }]) {
    await page.setViewportSize(size);
    await page.screenshot({ path: `${shots}/${name}-${size.width}.png`, fullPage: true });
  }
  await page.setViewportSize({ width: 1366, height: 900 });
};

await runScenario(
  async (page) => {
    await page.setViewportSize({ width: 1366, height: 900 });
    await login(page, base, username, password);

    // Item.
    await openHydrated(page, base, '/items/new');
    await step('fill the item form', async () => {
      await page.fill('#item-form input[name=name]', itemName);
      await page.fill('#item-form input[name=price]', ITEM_PRICE);
      await page.fill('#item-form textarea[name=description]', 'Created by the merchant flow.');
    });
    await step('submit the item form', () => page.click('#item-form [type=submit]'));
    try {
      await page.waitForURL((url) => pathOf(url.href) === '/items', { timeout: STEP_TIMEOUT_MS });
      await page.waitForFunction((name) => document.querySelector('#item-list')?.textContent?.includes(name), itemName);
    } catch {
      throw new StepError(`the item was not saved and listed: ${await textOf(page, 'main')}`);
    }

    // Activity, in the viewer's zone.
    await openHydrated(page, base, '/activities/new');
    await step('pick the item by its name', () =>
      page.selectOption('#activity-form select[name=item_id]', { label: `${itemName} (${ITEM_PRICE})` }),
    );
    const price = await page.inputValue('#activity-form input[name=price]');
    if (price !== ITEM_PRICE) throw new StepError(`the sale price starts at "${price}", not the item's ${ITEM_PRICE}`);
    await step('fill the activity form', async () => {
      await page.fill('#activity-form input[name=title]', 'Merchant flow sale');
      await page.fill('#activity-form input[name=stock]', '10');
      await page.fill('#activity-form input[name=per_user_limit]', '2');
      await page.fill('#activity-form input[name=starts_at]', wall(starts));
      await page.fill('#activity-form input[name=ends_at]', wall(starts));
    });
    const label = await textOf(page, '#activity-form label:has(input[name=starts_at])');
    if (!label.includes('your time, UTC+8') || !label.includes(`= ${utcText(starts)}`)) {
      throw new StepError(`the start's label reads "${label}", not the viewer's zone with ${utcText(starts)} beside`);
    }
    await step('save with the end at the start', () => page.click('#activity-form button[type=submit]'));
    try {
      await page.waitForFunction(() => document.querySelector('[role=alert]')?.textContent.includes('Ends must be after Starts'));
    } catch {
      throw new StepError(`the refusal does not name the form's fields: ${await textOf(page, '[role=alert]')}`);
    }
    await step('end an hour later', () => page.fill('#activity-form input[name=ends_at]', wall(ends)));
    await shoot(page, 'activity-new-local-time');
    await step('save the activity', () => page.click('#activity-form button[type=submit]'));
    try {
      await page.waitForURL((url) => /^\/activities\/\d+$/.test(pathOf(url.href)), { timeout: STEP_TIMEOUT_MS });
    } catch {
      throw new StepError(`the activity was not saved: ${await textOf(page, 'main')}`);
    }
    const activityId = pathOf(page.url()).split('/').pop();
    await step('the edit form shows the same wall-clock times', () =>
      page.waitForFunction(
        ([s, e]) =>
          document.querySelector('#activity-form input[name=starts_at]')?.value === s &&
          document.querySelector('#activity-form input[name=ends_at]')?.value === e,
        [wall(starts), wall(ends)],
      ),
    );

    // Publish, edit, republish.
    const publication = async (state) => {
      try {
        await page.waitForSelector(`#publication[data-state="${state}"]`, { timeout: 10_000 });
      } catch {
        throw new StepError(`the publication is not ${state}: ${await textOf(page, '#publication')}`);
      }
      return textOf(page, '#publication');
    };
    const publish = async (version) => {
      await step(`publish version ${version}`, async () => {
        await page.click('#publish-form button[type=submit]');
        await page.waitForFunction((v) => document.getElementById('published')?.textContent.includes(`version ${v}`), version);
      });
      const current = await publication('current');
      if (!current.includes(`version ${version}`)) throw new StepError(`after publishing: ${current}`);
    };
    await publish(1);
    await step('change the sale price and save', async () => {
      await page.fill('#activity-form input[name=price]', '99.00');
      await page.click('#activity-form button[type=submit]');
    });
    await step('the save says so', () => page.waitForSelector('#saved[role=status]'));
    const stale = await publication('stale');
    if (!stale.includes('version 1') || !stale.includes('Publish the sale page again')) {
      throw new StepError(`after the edit: ${stale}`);
    }
    await shoot(page, 'activity-stale');
    await publish(2);
    console.log(`activity=${activityId}`);
    console.log(`ok: item, activity from ${wall(starts)} in ${ZONE}, published, edited, republished as version 2`);
  },
  90_000,
  { timezoneId: ZONE },
);
