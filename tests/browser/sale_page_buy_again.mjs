#!/usr/bin/env node
// tests/browser/sale_page_buy_again.mjs: a buyer's whole flow on the sale page, with a per-user
// limit of two: countdown → buy → pay → buy to the limit → an unpaid order that times out →
// a new try that succeeds; by mouse, or by the keyboard alone (Tab, Enter, Space).
//
// Usage: node sale_page_buy_again.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN mouse|keyboard [SHOTS_DIR]
//
// Opens the page before the start and sees the countdown; once `#buy` lights, buys: the first
// order reaches its pay state; reloads (the first order is shown again, the button lit), pays
// it and sees it paid. Says `paid` and waits for `go` on stdin (the test shortens the pay time
// of the orders to come). Buys a second unit (a new order), then tries a third: refused, the
// limit reached, in words. The second order is left unpaid: at its pay deadline the page shows
// it cancelled (and the limit's refusal goes), and a new try makes a third order. With `keyboard`, every button is reached
// with Tab alone (with a visible focus ring) and pressed with Enter or Space: no click.
// Prints `first=ID`, `second=ID`, `third=ID` and `request_ids=N` (the distinct X-Request-IDs
// of the buy requests). The browser's errors are watched (harness.mjs). Exit codes as there.

import { StepError, runScenario, scenarioArgs, stdinWords, step, tabTo, textOf } from './harness.mjs';

const [base, activityId, token, input, shots] = scenarioArgs(
  'node sale_page_buy_again.mjs BASE_URL ACTIVITY_ID BUYER_TOKEN mouse|keyboard [SHOTS_DIR]',
  4,
);
if (!['mouse', 'keyboard'].includes(input)) throw new Error(`input must be mouse or keyboard, not ${input}`);
const shot = async (page, name) => {
  if (!shots) return;
  for (const size of [{ width: 1366, height: 900 }, { width: 390, height: 844 }]) {
    await page.setViewportSize(size);
    await page.screenshot({ path: `${shots}/buyer-${input}-${name}-${size.width}.png`, fullPage: true });
  }
};
const words = stdinWords();

await runScenario(async (page) => {
  const requestIds = new Set();
  page.on('request', (request) => {
    if (request.method() === 'POST' && new URL(request.url()).pathname === '/api/seckill/buy') {
      requestIds.add(request.headers()['x-request-id']);
    }
  });
  // A button pressed as the buyer does: clicked, or reached with Tab and pressed with `key`.
  const press = async (selector, key) => {
    if (input === 'mouse') return step(`click ${selector}`, () => page.click(selector));
    await tabTo(page, selector);
    await page.keyboard.press(key);
  };
  const orderIn = async (what, status, notOrder) => {
    const selector = `#order[data-status="${status}"]${notOrder ? `:not([data-order="${notOrder}"])` : ''}`;
    try {
      await page.waitForSelector(selector, { timeout: 30_000 });
    } catch {
      throw new StepError(`${what}: not ${status}; the page says: ${await textOf(page, '#order')} / ${await textOf(page, '#message')}`);
    }
    return page.$eval('#order', (box) => box.dataset.order);
  };
  const lit = async (what) => {
    try {
      await page.waitForSelector('#buy:not([disabled])', { timeout: 20_000 });
    } catch {
      throw new StepError(`${what}: #buy stays grey ("${await textOf(page, '#buy')}"; ${await textOf(page, '#message')})`);
    }
  };

  await step('open the sale page', () =>
    page.goto(`${base}/sale/${activityId}/#token=${token}`, { waitUntil: 'load' }),
  );
  await step('see the countdown', () =>
    page.waitForFunction(() => /Starts in/.test(document.getElementById('countdown').textContent), null, { timeout: 10_000 }),
  );
  await shot(page, '1-countdown');
  await lit('the sale opening');
  await press('#buy', 'Enter');
  const first = await orderIn('the first order', 'UNPAID');
  await lit('after the first order reached its pay state');

  await step('reload the page', () => page.reload({ waitUntil: 'load' }));
  await step('see the first order after the reload', () =>
    page.waitForSelector(`#order[data-order="${first}"][data-status="UNPAID"]`, { timeout: 15_000 }),
  );
  await lit('after the reload');
  await shot(page, '2-first-unpaid');
  await press('#pay', ' ');
  await orderIn('the first order paid', 'PAID');
  console.log('paid');
  await words.told('go');

  await lit('after the payment');
  await press('#buy', 'Enter');
  const second = await orderIn('the second order', 'UNPAID', first);
  await lit('after the second order reached its pay state');
  await press('#buy', 'Enter');
  try {
    await page.waitForSelector('#message[data-code="ALREADY_PURCHASED"], #message[data-code="LIMIT_EXCEEDED"]', { timeout: 10_000 });
  } catch {
    throw new StepError(`a third unit is not refused at the limit: ${await textOf(page, '#message')} / ${await textOf(page, '#order')}`);
  }
  const refused = await textOf(page, '#message');
  await shot(page, '3-limit');
  await step('see the unpaid order cancelled at its deadline', () =>
    page.waitForSelector(`#order[data-order="${second}"][data-status="CANCELLED"]`, { timeout: 40_000 }),
  );
  if (await page.isVisible('#pay')) throw new StepError('the cancelled order still offers to pay');
  const stale = await textOf(page, '#message');
  if (stale) throw new StepError(`the page still says "${stale}" once the unpaid order gave its unit back`);
  await shot(page, '4-cancelled');
  await lit('after the cancellation');
  await press('#buy', 'Enter');
  const third = await orderIn('the new try', 'UNPAID', second);
  await shot(page, '5-new-try');
  words.close();
  console.log(`refused=${refused}`);
  console.log(`first=${first}`);
  console.log(`second=${second}`);
  console.log(`third=${third}`);
  console.log(`request_ids=${requestIds.size}`);
}, 150_000);
