#!/usr/bin/env node
// tests/browser/console_change_management.mjs: change management on the hydrated switch board,
// by two operators in Shanghai.
//
// Usage: node console_change_management.mjs BASE_URL OPS1 PASSWORD1 OPS2 PASSWORD2 [SHOTS_DIR]
//
// OPS1 schedules `limits/max_in_flight` for a time typed in her zone (the UTC instant shown
// beside it), sees the change listed as scheduled and cancels it; she flips the same limit
// twice at once (its confirmation names what it would touch, with the buy rate of the sale the
// test's buyers knock on), types a third value while a second tab flips another key (her open
// form keeps it), then proposes `switches/deduction`
// (a key that needs four eyes, by the test's policy) and finds only Approve and Reject for it.
// OPS2 signs in, approves the proposal (the key then reads `db`), rolls `limits/max_in_flight`
// back to its first value from the key's history, stages `limits/local_rate_per_s` on the only
// instance (the live panel shows the instance's staged value) and promotes it; the audit shows
// the cancelled change's time in her zone, UTC beside. The browser's
// error log is watched throughout (harness.mjs). Screenshots at 1366 and 390 px go to SHOTS_DIR
// when given. Exit codes as in harness.mjs.

import { STEP_TIMEOUT_MS, StepError, login, openHydrated, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [baseArg, ops1, password1, ops2, password2, shots] = scenarioArgs(
  'node console_change_management.mjs BASE_URL OPS1 PASSWORD1 OPS2 PASSWORD2 [SHOTS_DIR]',
  5,
);
const base = baseArg.replace(/\/+$/, '');
const row = (page, path) => page.locator(`#switch-list tr[data-path="${path}"]`);

/** Waits until `predicate(arg)` holds in the page; fails with `what` and what `selector` shows. */
async function until(page, what, predicate, arg, selector) {
  try {
    await page.waitForFunction(predicate, arg, { timeout: STEP_TIMEOUT_MS });
  } catch {
    throw new StepError(`${what}${selector ? ` (page shows: ${await textOf(page, selector)})` : ''}`);
  }
}

/** Opens a key's change form and fills its value and reason. */
async function fillChange(page, path, value, reason) {
  const line = row(page, path);
  await step(`open the change form of ${path}`, () => line.locator('summary', { hasText: 'Change' }).click());
  await step(`fill the change form of ${path}`, async () => {
    const field = line.locator('[name=value]');
    if ((await field.evaluate((box) => box.tagName)) === 'SELECT') await field.selectOption(value);
    else await field.fill(value);
    await line.locator('textarea[name=reason]').fill(reason);
  });
  return line;
}

async function confirmAndSubmit(line) {
  const path = await line.getAttribute('data-path');
  await step(`confirm and submit the change of ${path}`, async () => {
    await line.locator('label.confirm input[type=checkbox]').check();
    await line.locator('.change-form > button[type=submit]').click();
  });
}

/** Waits for the note of a change that waits; returns its id. */
async function accepted(page, state) {
  await until(
    page,
    `no change reported ${state}`,
    (want) => document.querySelector('#change-accepted')?.dataset.state === want,
    state,
    '#change-accepted, [role=alert]',
  );
  const text = await textOf(page, '#change-accepted');
  const id = text.match(/#(\d+)/)?.[1];
  if (!id) throw new StepError(`the note names no change: ${text}`);
  return id;
}

/** Decides on a listed change: types the reason beside the button and presses it. */
async function decide(page, id, decision, reason) {
  const form = page.locator(`#change-list tr[data-change="${id}"] form[data-decision="${decision}"]`);
  await step(`${decision} change #${id}`, async () => {
    await form.locator('input[name=reason]').fill(reason);
    await form.locator('button[type=submit]').click();
  });
}

async function valueIs(page, path, value) {
  await until(
    page,
    `${path} never read ${value}`,
    ([key, want]) =>
      document.querySelector(`#switch-list tr[data-path="${key}"]`)?.children[1]?.textContent?.trim().startsWith(want),
    [path, value],
    `#switch-list tr[data-path="${path}"]`,
  );
}

async function screenshots(page, name) {
  for (const size of [{ width: 1366, height: 900 }, { width: 390, height: 844 }]) {
    await page.setViewportSize(size);
    const [wide, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
    if (shots) await page.screenshot({ path: `${shots}/${name}-${size.width}.png`, fullPage: true });
    if (wide > inner) throw new StepError(`${name}: the page is ${wide} px wide in ${inner}`);
  }
  await page.setViewportSize({ width: 1366, height: 900 });
}

await runScenario(
  async (page) => {
    await page.setViewportSize({ width: 1366, height: 900 });
    await login(page, base, ops1, password1);
    await openHydrated(page, base, '/switches');
    await step('the switch list', () => page.waitForSelector('#switch-list tr[data-path]'));

    // Scheduled in her zone: 20:30 in Shanghai is 12:30 UTC, shown beside the field.
    const tomorrow = new Date(Date.now() + 86_400_000).toLocaleDateString('sv-SE', { timeZone: 'Asia/Shanghai' });
    let line = await fillChange(page, 'limits/max_in_flight', '700', 'tighter for the evening peak');
    await step('open the schedule', () => line.locator('details.when > summary').click());
    await step('type the time', () => line.locator('input[name=at_wall]').fill(`${tomorrow}T20:30`));
    const beside = await textOf(page, '#switch-list tr[data-path="limits/max_in_flight"] .utc-beside');
    if (!beside.includes('12:30 UTC')) throw new StepError(`beside the time: ${beside}`);
    const caption = await textOf(page, '#switch-list tr[data-path="limits/max_in_flight"] details.when label');
    if (!caption.includes('UTC+8')) throw new StepError(`the time's label: ${caption}`);
    await confirmAndSubmit(line);
    const scheduled = await accepted(page, 'scheduled');
    await until(
      page,
      `change #${scheduled} is not listed as scheduled`,
      (id) => document.querySelector(`#change-list tr[data-change="${id}"]`)?.dataset.state === 'scheduled',
      scheduled,
      '#change-list',
    );
    const when = await textOf(page, `#change-list tr[data-change="${scheduled}"] time`);
    if (!when.includes('20:30') || !when.includes('12:30 UTC')) throw new StepError(`the scheduled time reads ${when}`);
    await decide(page, scheduled, 'cancel', 'the peak moved');
    await until(
      page,
      `change #${scheduled} is still listed as waiting`,
      (id) => !document.querySelector(`#change-list tr[data-change="${id}"]`),
      scheduled,
      '#change-list',
    );

    // Two flips at once; the confirmation says what the flip touches.
    for (const [value, reason] of [['300', 'first try'], ['400', 'second try']]) {
      line = await fillChange(page, 'limits/max_in_flight', value, reason);
      await until(
        page,
        `the confirmation names no impact of ${value}`,
        (want) => document.querySelector(`#switch-list tr[data-path="limits/max_in_flight"] .impact[data-value="${want}"]`),
        value,
        '#switch-list tr[data-path="limits/max_in_flight"] .change-form',
      );
      const impact = await textOf(page, '#switch-list tr[data-path="limits/max_in_flight"] .impact');
      if (!impact.includes('live sale') || !impact.includes('instance')) throw new StepError(`the impact reads ${impact}`);
      // The test's buyers keep knocking on a sale not started yet: its line has their rate.
      const rates = await page.$$eval(
        '#switch-list tr[data-path="limits/max_in_flight"] .impact li[data-activity]',
        (lines) => lines.map((line) => Number(line.dataset.rate)),
      );
      if (!rates.some((rate) => rate > 0)) throw new StepError(`no activity's buy rate in the impact: ${impact}`);
      await confirmAndSubmit(line);
      await until(page, `${value} was not applied`, () => document.querySelector('#flip-progress[data-state="complete"]'), null, '#flip-progress');
      await valueIs(page, 'limits/max_in_flight', value);
    }

    // A change form keeps what was typed while the table is read again because another key
    // was written (from a second tab here). Each read used to rebuild the whole table and
    // close every open form, under the hand of whoever was typing the next flip.
    line = await fillChange(page, 'limits/max_in_flight', '450', 'typed while another key moves');
    const tab = await page.context().newPage();
    await openHydrated(tab, base, '/switches');
    await step('the switch list in a second tab', () => tab.waitForSelector('#switch-list tr[data-path]'));
    await confirmAndSubmit(await fillChange(tab, 'limits/rate_window_s', '2', 'from another tab'));
    await until(tab, 'the flip from the second tab was not applied', () => document.querySelector('#flip-progress[data-state="complete"]'), null, '#flip-progress');
    await tab.close();
    await valueIs(page, 'limits/rate_window_s', '2');
    await step('the open change form kept what was typed', async () => {
      const open = await line.locator('details.change:not(.history)').evaluate((details) => details.open);
      const typed = await line.locator('[name=value]').inputValue();
      if (!open || typed !== '450') {
        throw new StepError(`after the table was read again, the form is ${open ? 'open' : 'closed'} and holds "${typed}"`);
      }
    });
    await line.locator('details.change:not(.history) > summary').click();

    // A key that needs four eyes: proposed, and its proposer may not approve it.
    line = await fillChange(page, 'switches/deduction', 'db', 'Redis failover drill');
    await confirmAndSubmit(line);
    const proposal = await accepted(page, 'pending_approval');
    await until(
      page,
      `change #${proposal} is not listed as pending approval`,
      (id) => document.querySelector(`#change-list tr[data-change="${id}"]`)?.dataset.state === 'pending_approval',
      proposal,
      '#change-list',
    );
    await decide(page, proposal, 'approve', 'my own');
    await until(page, 'approving her own change was not refused', () => document.querySelector('[data-code="SELF_APPROVAL"]'), null, '[role=alert]');

    // The second operator.
    await page.context().clearCookies();
    await login(page, base, ops2, password2);
    await openHydrated(page, base, '/switches');
    await step('the change list', () => page.waitForSelector(`#change-list tr[data-change="${proposal}"]`));
    await decide(page, proposal, 'approve', 'drill agreed');
    await valueIs(page, 'switches/deduction', 'db');

    // Rolled back to the first of the two flips, from the key's history.
    line = row(page, 'limits/max_in_flight');
    await step('open the history', () => line.locator('details.history > summary').click());
    const first = line.locator('ol.history-list li', { hasText: 'first try' });
    await step('the history lists the first flip', () => first.waitFor());
    await step('roll back', async () => {
      await first.locator('input[name=reason]').fill('back to the first try');
      await first.locator('button[type=submit]').click();
    });
    await valueIs(page, 'limits/max_in_flight', '300');

    // Staged on the only instance, then promoted.
    const node = await page.$eval('#node-list tbody tr td', (cell) => cell.textContent.trim());
    line = await fillChange(page, 'limits/local_rate_per_s', '5000', 'try a tighter bucket');
    await step('open the stage', () => line.locator('details.when > summary').click());
    await step('name the instance', () => line.locator('input[name=stage]').fill(node));
    await confirmAndSubmit(line);
    const staged = await accepted(page, 'staged');
    await until(
      page,
      'the live panel does not show the instance on the staged value',
      ([id, who]) =>
        document.querySelector(`#stage-list tr[data-change="${id}"] li.staged[data-node="${who}"]`)?.textContent.includes('5000'),
      [staged, node],
      '#stage-list, #board-meta',
    );
    await screenshots(page, 'switches-changes');
    await decide(page, staged, 'promote', 'healthy');
    await valueIs(page, 'limits/local_rate_per_s', '5000');
    await until(page, 'the stage is still shown after its promotion', () => !document.querySelector('#stage-list'), null, '#stage-list');
    await screenshots(page, 'switches-after');

    // The audit tells when the cancelled change was for in her zone too, not UTC alone.
    await openHydrated(page, base, '/audit?containing=evening%20peak');
    const audited = page.locator('#audit-list tr', { hasText: 'change.schedule' });
    await step('the audit lists the scheduled change', () => audited.first().waitFor());
    const detail = await audited.first().locator('td').nth(5).innerText();
    if (!detail.includes('20:30 UTC+8') || !detail.includes('12:30 UTC')) throw new StepError(`the audit's detail reads ${detail}`);
    console.log(`ok: scheduled and cancelled #${scheduled}, #${proposal} approved by ${ops2}, rolled back, #${staged} staged on ${node} and promoted`);
  },
  150_000,
  { timezoneId: 'Asia/Shanghai' },
);
