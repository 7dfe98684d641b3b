// tests/browser/ops_steps.mjs: the steps of an operator's flow in the hydrated console, shared
// by the scenarios that take them (the whole ops flow, the keyboard-only flip), so each step is
// written once.

import { STEP_TIMEOUT_MS, StepError, pathOf, step, tabTo, textOf } from './harness.mjs';

/** The name of the element holding the focus, for messages. */
const focused = (page) =>
  page.evaluate(() => {
    const el = document.activeElement;
    return el ? `${el.tagName.toLowerCase()}${el.name ? `[name=${el.name}]` : ''}${el.type ? `[type=${el.type}]` : ''}` : '(none)';
  });

/**
 * On the open switch board: sets `path` to `value` with `reason` through the row's change form,
 * first unconfirmed (the browser must refuse the form), then confirmed; waits for the live
 * panel to report every instance applied it and for the row's Applied column to agree. By
 * `mouse`, or by `keyboard` alone: each control reached with Tab (with a visible focus ring)
 * and worked with Enter, Space and typing. Returns the panel's summary.
 */
export async function flip(page, { path, value, reason, input = 'mouse' }) {
  const ROW = `tr[data-path="${path}"]`;
  const row = page.locator(ROW);
  const field = row.locator('[name=value]');
  if (input === 'keyboard') {
    await tabTo(page, `${ROW} summary`, 150);
    await page.keyboard.press('Enter');
    await tabTo(page, `${ROW} [name=value]`, 3);
    // A closed list takes the first letters of an option; a text box takes the text.
    if ((await field.evaluate((box) => box.tagName)) !== 'SELECT') await page.keyboard.press('ControlOrMeta+A');
    await page.keyboard.type(value);
    await tabTo(page, `${ROW} textarea[name=reason]`, 3);
    await page.keyboard.type(reason);
    await tabTo(page, `${ROW} button[type=submit]`, 3);
  } else {
    await step(`open the change form of ${path}`, () => row.locator('summary', { hasText: 'Change' }).click());
    await step('fill the change form', async () => {
      if ((await field.evaluate((box) => box.tagName)) === 'SELECT') await field.selectOption(value);
      else await field.fill(value);
      await row.locator('textarea[name=reason]').fill(reason);
    });
  }
  if ((await field.inputValue()) !== value) throw new StepError(`the value typed reads ${await field.inputValue()}, not ${value}`);
  const confirmation = await textOf(page, `${ROW} label.confirm`);
  if (!confirmation.includes(`to ${value}`)) throw new StepError(`the confirmation does not name the change: ${confirmation}`);
  // The browser itself refuses the form until the flip is confirmed: no server call leaves.
  let calls = 0;
  const count = (request) => {
    if (request.method() === 'POST' && new URL(request.url()).pathname.startsWith('/console/fn/flip_switch')) calls += 1;
  };
  page.on('request', count);
  // What the browser does with the unconfirmed submit is watched, not waited out: it either
  // fires `invalid` on the unticked box (refused) or `submit` on the form (sent).
  await row.evaluate((tr) => {
    const form = tr.querySelector('form.change-form');
    const box = tr.querySelector('label.confirm input[type=checkbox]');
    form.dataset.seen = '';
    box.addEventListener('invalid', () => { form.dataset.seen += ' invalid'; }, { once: true });
    form.addEventListener('submit', () => { form.dataset.seen += ' submit'; }, { once: true });
  });
  if (input === 'keyboard') await page.keyboard.press('Enter');
  else await step('submit without confirming', () => row.locator('button[type=submit]').click());
  try {
    await page.waitForFunction((selector) => document.querySelector(`${selector} form.change-form`)?.dataset.seen, ROW, { timeout: STEP_TIMEOUT_MS });
  } catch {
    throw new StepError('the unconfirmed submit was neither refused nor sent');
  }
  const seen = await row.locator('form.change-form').getAttribute('data-seen');
  if (seen.includes('submit') || calls > 0) throw new StepError(`the flip went through without its confirmation (${seen.trim()}, ${calls} calls)`);
  if (input === 'keyboard') {
    // The refused form hands the focus to the box it wants checked.
    const at = await focused(page);
    if (at !== 'input[type=checkbox]') throw new StepError(`after the refused flip the focus is on ${at}, not the confirmation`);
    await page.keyboard.press(' ');
    await tabTo(page, `${ROW} button[type=submit]`, 3);
    await page.keyboard.press('Enter');
  } else {
    await step('confirm and flip', async () => {
      await row.locator('label.confirm input[type=checkbox]').check();
      await row.locator('button[type=submit]').click();
    });
  }
  try {
    await page.waitForFunction(
      (key) => {
        const panel = document.querySelector('#flip-progress[data-state="complete"]');
        return panel?.querySelector('strong .mono')?.textContent === key;
      },
      path,
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch {
    const shown = (await textOf(page, '#flip-progress')) || (await textOf(page, '[role=alert], .error'));
    throw new StepError(`${path} was not reported applied by every instance${shown ? ` (page says: ${shown})` : ''}`);
  }
  page.off('request', count);
  if (calls !== 1) throw new StepError(`the confirmed flip made ${calls} flip calls, not 1`);
  const total = await page.locator('#flip-progress li').count();
  // The banner has spoken; the row's figure must agree within a couple of the page's beats.
  try {
    await page.waitForFunction(
      ([selector, want]) => document.querySelector(selector)?.children[5]?.textContent?.trim() === want,
      [ROW, `${total} / ${total}`],
      { timeout: 3_000 },
    );
  } catch {
    throw new StepError(`the row's Applied column lags the banner: ${await textOf(page, ROW)}`);
  }
  return textOf(page, '#flip-summary');
}

/**
 * On /reconciliations: starts a repair run of `activityId` (the ticked repair box makes the
 * reason required), follows the run's page until it is done with every item counted, and
 * returns its findings' summary.
 */
export async function repairRun(page, { activityId, reason }) {
  const form = page.locator('#start-run');
  const reasonBox = form.locator('textarea[name=reason]');
  await step('pick the activity and tick repair', async () => {
    await form.locator('select[name=activity_id]').selectOption(String(activityId));
    await form.locator('input[name=repair]').check();
  });
  const refused = await reasonBox.evaluate((box) => box.required && !box.checkValidity());
  if (!refused) throw new StepError('a ticked repair box does not make the reason required');
  await step('give the reason and start the run', async () => {
    await reasonBox.fill(reason);
    await form.locator('button[type=submit]').click();
  });
  try {
    await page.waitForURL((url) => /^\/reconciliations\/\d+$/.test(pathOf(url.href)), { timeout: STEP_TIMEOUT_MS });
  } catch {
    const shown = await textOf(page, '[role=alert], .error');
    throw new StepError(`starting the run did not open its page${shown ? ` (page says: ${shown})` : ''}`);
  }
  const runPath = pathOf(page.url());
  try {
    await page.waitForSelector('#run-facts [data-status="done"]', { timeout: STEP_TIMEOUT_MS });
  } catch {
    throw new StepError(`${runPath} never showed the run done: ${await textOf(page, '#run-facts')}`);
  }
  const [done, total] = await page.locator('#run-progress').evaluate((bar) => [bar.dataset.done, bar.dataset.total]);
  if (done !== total) throw new StepError(`the finished run counts ${done} of ${total} items`);
  if (!(await textOf(page, '#run-facts')).includes(reason)) {
    throw new StepError(`the run's page does not show its reason: ${await textOf(page, '#run-facts')}`);
  }
  return textOf(page, '#finding-summary');
}
