#!/usr/bin/env node
// tests/browser/console_login_create_item.mjs: end-to-end check of the admin console in a real browser.
//
// Usage: node tests/browser/console_login_create_item.mjs BASE_URL USERNAME PASSWORD ITEM_NAME
//
// Logs in through /login, opens /items/new, waits until the wasm bundle has hydrated the page
// (#console[data-hydrated="true"]), creates an item named ITEM_NAME and checks that the item list
// shows it. Uses Debian's chromium through playwright-core (no browser download is possible here;
// `CHROMIUM_PATH` overrides the binary). Exit 0 on success; 1 with a clear message (plus the browser
// console messages, page errors and failed requests collected so far) on failure; 2 on bad usage.
// The browser is always closed; the whole run is limited to 60 s.

import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chromium } from 'playwright-core';

const OVERALL_TIMEOUT_MS = 60_000;
const HYDRATION_TIMEOUT_MS = 30_000;
const STEP_TIMEOUT_MS = 15_000;

const [baseArg, username, password, itemName] = process.argv.slice(2);
if (!baseArg || !username || !password || !itemName) {
  console.error('usage: node console_login_create_item.mjs BASE_URL USERNAME PASSWORD ITEM_NAME');
  process.exit(2);
}
const base = baseArg.replace(/\/+$/, '');

/** Messages the page produced, printed when something fails. */
const events = [];

class StepError extends Error {}

function chromiumPath() {
  if (process.env.CHROMIUM_PATH) return process.env.CHROMIUM_PATH;
  try {
    const found = execFileSync('sh', ['-c', 'command -v chromium'], { encoding: 'utf8' }).trim();
    if (found) return found;
  } catch {
    // not on PATH: fall through
  }
  if (existsSync('/usr/bin/chromium')) return '/usr/bin/chromium';
  throw new StepError('chromium not found (install the Debian package `chromium` or set CHROMIUM_PATH)');
}

const pathOf = (url) => new URL(url).pathname.replace(/\/+$/, '') || '/';

/** Runs one step; a playwright timeout becomes a readable message naming the step. */
async function step(what, fn) {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof StepError) throw err;
    throw new StepError(`${what}: ${err.message.split('\n')[0]}`);
  }
}

/** Waits for the wasm bundle to hydrate #console. */
async function waitForHydration(page, where) {
  try {
    await page.waitForSelector('#console[data-hydrated="true"]', {
      state: 'attached',
      timeout: HYDRATION_TIMEOUT_MS,
    });
  } catch {
    const attr = await page
      .$eval('#console', (el) => el.getAttribute('data-hydrated'))
      .catch(() => '(no #console element)');
    throw new StepError(
      `${where}: the console did not hydrate within ${HYDRATION_TIMEOUT_MS / 1000} s ` +
        `(#console data-hydrated = ${JSON.stringify(attr)}); is the wasm bundle under /pkg/ served and loading?`,
    );
  }
}

/** Visible text of the first matching element, for error messages. */
async function textOf(page, selector) {
  return page
    .locator(selector)
    .first()
    .innerText({ timeout: 1_000 })
    .then((t) => t.replace(/\s+/g, ' ').trim().slice(0, 500))
    .catch(() => '');
}

async function run(browser) {
  const context = await browser.newContext();
  context.setDefaultTimeout(STEP_TIMEOUT_MS);
  const page = await context.newPage();
  page.on('console', (msg) => {
    if (!['verbose', 'debug'].includes(msg.type())) events.push(`[console.${msg.type()}] ${msg.text()}`);
  });
  page.on('pageerror', (err) => events.push(`[pageerror] ${err.message}`));
  page.on('requestfailed', (req) =>
    events.push(`[requestfailed] ${req.method()} ${req.url()}: ${req.failure()?.errorText ?? '?'}`),
  );
  page.on('response', (res) => {
    if (res.status() >= 400) events.push(`[http ${res.status()}] ${res.request().method()} ${res.url()}`);
  });

  // 1. Log in.
  await step(`open ${base}/login`, () => page.goto(`${base}/login`, { waitUntil: 'load' }));
  if ((await page.locator('#console').count()) > 0) await waitForHydration(page, '/login');
  await step('fill the login form', async () => {
    await page.fill('input[name=username]', username);
    await page.fill('input[name=password]', password);
  });
  await step('submit the login form', () =>
    page.locator('form:has(input[name=username]) [type=submit]').first().click(),
  );
  try {
    await page.waitForURL((url) => !pathOf(url.href).endsWith('/login'), { timeout: STEP_TIMEOUT_MS });
  } catch {
    const shown = await textOf(page, '[role=alert], .error, .errors');
    throw new StepError(`login as ${username} did not leave /login${shown ? ` (page says: ${shown})` : ''}`);
  }

  // 2. New item form, once hydrated.
  await step(`open ${base}/items/new`, () => page.goto(`${base}/items/new`, { waitUntil: 'load' }));
  if (pathOf(page.url()).endsWith('/login')) throw new StepError('/items/new redirected to /login: the session was not kept');
  await waitForHydration(page, '/items/new');

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
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function main() {
  let browser = null;
  let launching = null;
  let timer;
  let failure = null;
  const work = (async () => {
    const executablePath = chromiumPath();
    launching = chromium.launch({
      executablePath,
      headless: true,
      timeout: 30_000,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
        '--no-first-run',
      ],
    });
    browser = await step(`launch ${executablePath}`, () => launching);
    await run(browser);
  })();
  const overall = new Promise((_, reject) => {
    timer = setTimeout(
      () => reject(new StepError(`overall timeout: the check took longer than ${OVERALL_TIMEOUT_MS / 1000} s`)),
      OVERALL_TIMEOUT_MS,
    );
  });
  try {
    await Promise.race([work, overall]);
  } catch (err) {
    failure = err;
  } finally {
    clearTimeout(timer);
    work.catch(() => {}); // the loser of the race must not become an unhandled rejection
    // Still launching when the time ran out: wait briefly for the browser so it can be closed too.
    if (!browser && launching) browser = await Promise.race([launching.catch(() => null), sleep(5_000)]);
    if (browser) await Promise.race([browser.close().catch(() => {}), sleep(5_000)]);
  }
  if (failure) {
    console.error(`FAIL: ${failure instanceof StepError ? failure.message : (failure.stack ?? failure)}`);
    if (events.length) {
      console.error(`browser messages (${events.length}, last 50):`);
      for (const line of events.slice(-50)) console.error(`  ${line}`);
    }
    process.exit(1);
  }
  process.exit(0);
}

main();
