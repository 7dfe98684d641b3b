#!/usr/bin/env node
// tests/browser/console_switch_board_plain.mjs: the switch board says what each key does.
//
// Usage: node console_switch_board_plain.mjs BASE_URL USERNAME PASSWORD [SHOTS_DIR]
//
// As an operator at 1366 px: every key's row carries a sentence on what it does; the async
// switch's says that pre-orders recorded under `record` stay recorded for a replay whatever
// the switch says later, and choosing `record` in its change form says so beside the list; a
// limit's number field carries its range; with every change form open the page is still no
// wider than the window (at 1366 and at 390 px). Exit codes as in harness.mjs.

import { StepError, login, openHydrated, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [baseArg, username, password, shots] = scenarioArgs(
  'node console_switch_board_plain.mjs BASE_URL USERNAME PASSWORD [SHOTS_DIR]',
  3,
);
const base = baseArg.replace(/\/+$/, '');
const LATER = 'whatever the switch says later';

await runScenario(async (page) => {
  await page.setViewportSize({ width: 1366, height: 900 });
  await login(page, base, username, password);
  await openHydrated(page, base, '/switches');
  await step('the switch list', () => page.waitForSelector('#switch-list tr[data-path]'));
  const rows = await page.$$eval('#switch-list tr[data-path]', (rows) =>
    rows.map((row) => [row.dataset.path, row.querySelector('.meaning')?.textContent.trim() ?? '']),
  );
  const mute = rows.filter(([, meaning]) => meaning.length < 40).map(([path]) => path);
  if (mute.length > 0) throw new StepError(`keys that do not say what they do: ${mute.join(', ')}`);
  const asyncMeaning = Object.fromEntries(rows)['switches/async'] ?? '';
  if (!asyncMeaning.includes('record') || !asyncMeaning.includes(LATER)) {
    throw new StepError(`switches/async says: ${asyncMeaning}`);
  }
  await step('open every change form', async () => {
    for (const summary of await page.locator('#switch-list details.change > summary').all()) await summary.click();
  });
  const row = page.locator('tr[data-path="switches/async"]');
  await step('choose record', () => row.locator('select[name=value]').selectOption('record'));
  const note = await textOf(page, 'tr[data-path="switches/async"] .choice-note');
  if (!note.includes(LATER)) throw new StepError(`beside the choice of record: ${note}`);
  const range = await page.$eval('tr[data-path="limits/max_in_flight"] input[name=value]', (input) => [input.min, input.max]);
  if (range.join('..') !== '1..1000000') throw new StepError(`the max_in_flight field's range is ${range.join('..')}`);
  for (const size of [{ width: 1366, height: 900 }, { width: 390, height: 844 }]) {
    await page.setViewportSize(size);
    const [wide, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
    if (shots) await page.screenshot({ path: `${shots}/switches-forms-open-${size.width}.png`, fullPage: true });
    if (wide > inner) throw new StepError(`with the change forms open the page is ${wide} px wide in ${inner}`);
  }
  console.log(`ok: ${rows.length} keys each say what they do; the forms fit`);
});
