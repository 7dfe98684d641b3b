// tests/browser/harness.mjs: what every browser scenario of the admin console shares.
//
// Launches Debian's chromium through playwright-core (no browser download is possible here;
// `CHROMIUM_PATH` overrides the binary), collects the page's console messages, errors and failed
// requests to print when a step fails, waits for the wasm bundle to hydrate the page
// (#console[data-hydrated="true"]) and signs in through /login. `runScenario` bounds the whole run,
// always closes the browser and exits 0 on success, 1 with a readable message on failure.

import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

export const HYDRATION_TIMEOUT_MS = 30_000;
export const STEP_TIMEOUT_MS = 15_000;

/** A failure with a message fit for the test log (no stack needed). */
export class StepError extends Error {}

/** The scenario's arguments, or exit 2 with the usage line when some are missing. */
export function scenarioArgs(usage, count) {
  const args = process.argv.slice(2);
  if (args.length < count || args.slice(0, count).some((arg) => !arg)) {
    console.error(`usage: ${usage}`);
    process.exit(2);
  }
  return args;
}

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

/**
 * The test's word on stdin: `told(WORD)` resolves once a line reading WORD arrives; `close()`
 * stops listening, so the scenario can exit.
 */
export function stdinWords() {
  const input = createInterface({ input: process.stdin });
  return {
    told: (what) => new Promise((resolve) => input.on('line', (line) => line.trim() === what && resolve())),
    close: () => input.close(),
  };
}

export const pathOf = (url) => new URL(url).pathname.replace(/\/+$/, '') || '/';

/** Runs one step; a playwright timeout becomes a readable message naming the step. */
export async function step(what, fn) {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof StepError) throw err;
    throw new StepError(`${what}: ${err.message.split('\n')[0]}`);
  }
}

/** Waits for the wasm bundle to hydrate #console. */
export async function waitForHydration(page, where) {
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
export async function textOf(page, selector) {
  return page
    .locator(selector)
    .first()
    .innerText({ timeout: 1_000 })
    .then((t) => t.replace(/\s+/g, ' ').trim().slice(0, 500))
    .catch(() => '');
}

/** Opens `path` and waits for hydration; fails clearly when the session was lost. */
export async function openHydrated(page, base, path) {
  await step(`open ${base}${path}`, () => page.goto(`${base}${path}`, { waitUntil: 'load' }));
  if (pathOf(page.url()).endsWith('/login')) throw new StepError(`${path} redirected to /login: the session was not kept`);
  await waitForHydration(page, path);
}

/** Signs in through the login form and waits until the console leaves /login. */
export async function login(page, base, username, password) {
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
}

/**
 * Moves the focus with Tab alone, as a keyboard user does, until `selector` has it (at most
 * `most` presses); fails naming where the focus went when it never gets there, or when the
 * element holds the focus without a visible ring (no outline, no shadow). Returns the presses.
 */
export async function tabTo(page, selector, most = 60) {
  const trail = [];
  for (let presses = 1; presses <= most; presses += 1) {
    await page.keyboard.press('Tab');
    const at = await page.evaluate((wanted) => {
      const el = document.activeElement;
      if (!el || el === document.body) return { name: '(page)' };
      const name = `${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}${el.name ? `[name=${el.name}]` : ''}`;
      if (!el.matches(wanted)) return { name };
      const style = getComputedStyle(el);
      const outline = style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) > 0;
      return { name, there: true, ring: outline || style.boxShadow !== 'none', style: `${style.outlineStyle} ${style.outlineWidth}` };
    }, selector);
    trail.push(at.name);
    if (at.there) {
      if (!at.ring) throw new StepError(`${selector} has the focus without a visible ring (outline ${at.style})`);
      return presses;
    }
  }
  throw new StepError(`${selector} never got the focus in ${most} presses of Tab; it went ${trail.join(' → ')}`);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Launches chromium, gives `scenario(page, watch)` a fresh page that records what went wrong, and
 * exits: 0 when the scenario resolves, 1 (with the page's messages) when it throws or takes
 * longer than `overallMs`. `watch.faults` lists, as they come, the page's uncaught errors
 * (a wasm panic among them) and its console errors, for a scenario that must see none.
 * `contextOptions` go to the browser context (e.g. `{ timezoneId: 'Asia/Shanghai' }` for a
 * viewer outside UTC).
 */
export async function runScenario(scenario, overallMs = 60_000, contextOptions = {}) {
  const events = [];
  const watch = { faults: [] };
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
    const context = await browser.newContext(contextOptions);
    context.setDefaultTimeout(STEP_TIMEOUT_MS);
    const page = await context.newPage();
    page.on('console', (msg) => {
      if (!['verbose', 'debug'].includes(msg.type())) events.push(`[console.${msg.type()}] ${msg.text()}`);
      if (msg.type() === 'error') watch.faults.push(`[console.error at ${page.url()}] ${msg.text()}`);
    });
    page.on('pageerror', (err) => {
      events.push(`[pageerror] ${err.message}`);
      watch.faults.push(`[pageerror at ${page.url()}] ${err.message}`);
    });
    page.on('requestfailed', (req) =>
      events.push(`[requestfailed] ${req.method()} ${req.url()}: ${req.failure()?.errorText ?? '?'}`),
    );
    page.on('response', (res) => {
      if (res.status() >= 400) events.push(`[http ${res.status()}] ${res.request().method()} ${res.url()}`);
    });
    await scenario(page, watch);
    // The browser's own error log, watched in every scenario: an uncaught error or a panic
    // fails it. A refused request (a 4xx a scenario provokes, a cut connection) is not one.
    const faults = watch.faults.filter((fault) => !fault.includes('Failed to load resource'));
    if (faults.length > 0) {
      throw new StepError(`${faults.length} error(s) in the browser:\n  ${faults.join('\n  ')}`);
    }
  })();
  const overall = new Promise((_, reject) => {
    timer = setTimeout(
      () => reject(new StepError(`overall timeout: the check took longer than ${overallMs / 1000} s`)),
      overallMs,
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
