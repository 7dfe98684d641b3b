#!/usr/bin/env node
// tests/browser/console_dashboard.mjs: SRE watches the live dashboard follow its stream, lose
// it and get it back.
//
// Usage: node tests/browser/console_dashboard.mjs BASE_URL USERNAME PASSWORD
//
// Logs in, opens /dashboard, waits for the page to follow the stream (data-link="live") and for
// its history to grow, then prints "live" and waits: the driving test cuts the connection
// (BASE_URL is a proxy it controls). The page must then say it is reconnecting; the script
// prints "reconnecting", the test restores the connection, and the page must be live again
// with its history still growing. Exit codes as in harness.mjs: 0 ok, 1 failure, 2 bad usage.

import { STEP_TIMEOUT_MS, StepError, login, openHydrated, runScenario, scenarioArgs, textOf } from './harness.mjs';

const [baseArg, username, password] = scenarioArgs('node console_dashboard.mjs BASE_URL USERNAME PASSWORD', 3);
const base = baseArg.replace(/\/+$/, '');

/** Seconds of history the page says it holds. */
const history = async (page) => {
  const meta = await textOf(page, '#dashboard p.meta');
  const seconds = /(\d+) s of history/.exec(meta ?? '');
  return seconds ? Number(seconds[1]) : 0;
};

async function waitFor(page, what, selector, timeout = STEP_TIMEOUT_MS) {
  try {
    await page.waitForSelector(selector, { state: 'attached', timeout });
  } catch {
    throw new StepError(`${what} (page says: ${await textOf(page, '#dashboard')})`);
  }
}

async function growing(page, what) {
  const before = await history(page);
  try {
    await page.waitForFunction(
      (before) => {
        const meta = document.querySelector('#dashboard p.meta')?.textContent ?? '';
        const seconds = /(\d+) s of history/.exec(meta);
        return seconds && Number(seconds[1]) > before;
      },
      before,
      { timeout: STEP_TIMEOUT_MS },
    );
  } catch {
    throw new StepError(`${what}: the history stayed at ${before} s`);
  }
}

await runScenario(async (page) => {
  await login(page, base, username, password);
  await openHydrated(page, base, '/dashboard');
  await waitFor(page, 'the page never followed the stream', '#dashboard[data-link="live"]');
  await growing(page, 'frames did not arrive');
  if ((await page.locator('#chart-qps polyline').count()) === 0) throw new StepError('the QPS chart has no line');
  console.log('live');

  await waitFor(page, 'a cut stream was not noticed', '#dashboard[data-link="reconnecting"]', 30_000);
  const notice = await textOf(page, '#dashboard [role=status]');
  if (!notice.includes('reconnecting')) throw new StepError(`no reconnecting notice: ${notice}`);
  console.log('reconnecting');

  await waitFor(page, 'the stream did not come back', '#dashboard[data-link="live"]', 30_000);
  if ((await page.locator('#dashboard [role=status]').count()) > 0) throw new StepError('the notice stayed');
  await growing(page, 'frames did not resume');
  console.log(`ok: ${username} watched the dashboard lose its stream and get it back (${await history(page)} s)`);
}, 120_000);
