#!/usr/bin/env node
// tests/browser/console_republish_hint.mjs: a merchant's edit of a published activity says it
// saved and that the buyers' page is now older than the edit, until it is published again;
// a new activity's item is picked by name and its sale price starts from the item's.
//
// Usage: node console_republish_hint.mjs BASE_URL USERNAME PASSWORD ACTIVITY_ID ITEM_NAME ITEM_PRICE [SHOTS_DIR]
//
// On /activities/ACTIVITY_ID (published once): `#publication` says version 1 is current; the
// edit form's item list shows ITEM_NAME; the sale price is changed to 99.00 and saved: the
// page says "Saved." (a status region) and `#publication` turns stale naming version 1 and the
// republish; Publish makes version 2 and the hint current again. On /activities/new, picking
// ITEM_NAME fills the sale price with ITEM_PRICE. Exit codes as in harness.mjs.

import { StepError, login, openHydrated, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [baseArg, username, password, activityId, itemName, itemPrice, shots] = scenarioArgs(
  'node console_republish_hint.mjs BASE_URL USERNAME PASSWORD ACTIVITY_ID ITEM_NAME ITEM_PRICE [SHOTS_DIR]',
  6,
);
const base = baseArg.replace(/\/+$/, '');
const shoot = async (page, name) => {
  if (!shots) return;
  for (const size of [{ width: 1366, height: 900 }, { width: 390, height: 844 }]) {
    await page.setViewportSize(size);
    await page.screenshot({ path: `${shots}/${name}-${size.width}.png`, fullPage: true });
  }
  await page.setViewportSize({ width: 1366, height: 900 });
};

await runScenario(async (page) => {
  await page.setViewportSize({ width: 1366, height: 900 });
  await login(page, base, username, password);
  await openHydrated(page, base, `/activities/${activityId}`);
  const publication = async (state) => {
    try {
      await page.waitForSelector(`#publication[data-state="${state}"]`, { timeout: 10_000 });
    } catch {
      throw new StepError(`the publication is not ${state}: ${await textOf(page, '#publication')}`);
    }
    return textOf(page, '#publication');
  };
  const before = await publication('current');
  if (!before.includes('version 1')) throw new StepError(`before the edit: ${before}`);
  const picked = await textOf(page, '#activity-form select[name=item_id] option:checked');
  if (!picked.includes(itemName)) throw new StepError(`the edit form's item reads "${picked}", not ${itemName}`);

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
  await step('publish again', () => page.click('#publish-form button[type=submit]'));
  await step('version 2 published', () => page.waitForFunction(() => document.getElementById('published')?.textContent.includes('version 2')));
  const after = await publication('current');
  if (!after.includes('version 2')) throw new StepError(`after the republish: ${after}`);

  await openHydrated(page, base, '/activities/new');
  await step('pick the item by its name', () =>
    page.selectOption('#activity-form select[name=item_id]', { label: `${itemName} (${itemPrice})` }),
  );
  const price = await page.inputValue('#activity-form input[name=price]');
  if (price !== itemPrice) throw new StepError(`the sale price starts at "${price}", not the item's ${itemPrice}`);
  await shoot(page, 'activity-new');
  console.log(`ok: saved, stale hint on version 1, republished as version 2, item picked by name at ${price}`);
});
