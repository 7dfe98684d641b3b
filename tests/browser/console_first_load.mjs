#!/usr/bin/env node
// tests/browser/console_first_load.mjs: the console's first load on a slow link, and a repeat visit.
//
// Usage: node console_first_load.mjs BASE_URL [RUNS]
//
// Chromium's network emulation (10 Mbit/s both ways, 40 ms latency) in a fresh browser context
// per run: opens /login and waits until the page is hydrated (interactive), counting the bytes
// that crossed the wire (`encodedDataLength`, headers included); then opens it again in the same
// context, where the content-named bundle must come from the browser's cache without asking the
// server. Prints one line per run and a summary:
//   run=1 first_ms=... first_bytes=... repeat_ms=... repeat_bytes=... bundle_fetched_again=0
// Exits 1 when a repeat visit fetched a bundle file again or the page did not hydrate.

import { StepError, runScenario, step, waitForHydration } from './harness.mjs';

const [baseArg, runsArg] = process.argv.slice(2);
if (!baseArg) {
  console.error('usage: node console_first_load.mjs BASE_URL [RUNS]');
  process.exit(2);
}
const base = baseArg.replace(/\/+$/, '');
const runs = Number(runsArg ?? 1);

const MBIT = 1_000_000 / 8;
const LINK = { offline: false, latency: 40, downloadThroughput: 10 * MBIT, uploadThroughput: 10 * MBIT };
const isBundle = (url) => new URL(url).pathname.startsWith('/pkg/');

/** Opens /login, waits for hydration; returns the time taken and what crossed the wire. */
async function visit(page, cdp) {
  const sent = new Map();
  let bytes = 0;
  const bundleFetched = [];
  const onRequest = ({ requestId, request }) => sent.set(requestId, request.url);
  const onFinished = ({ requestId, encodedDataLength }) => {
    bytes += encodedDataLength;
    const url = sent.get(requestId);
    if (url && isBundle(url) && encodedDataLength > 0) bundleFetched.push(url);
  };
  cdp.on('Network.requestWillBeSent', onRequest);
  cdp.on('Network.loadingFinished', onFinished);
  const started = Date.now();
  await step(`open ${base}/login`, () => page.goto(`${base}/login`, { waitUntil: 'commit' }));
  await waitForHydration(page, '/login');
  const ms = Date.now() - started;
  // Let the last loadingFinished events arrive before they are summed.
  await page.waitForLoadState('networkidle');
  cdp.off('Network.requestWillBeSent', onRequest);
  cdp.off('Network.loadingFinished', onFinished);
  return { ms, bytes, bundleFetched };
}

await runScenario(async (firstPage) => {
  const browser = firstPage.context().browser();
  const results = [];
  for (let run = 1; run <= runs; run += 1) {
    const context = await browser.newContext();
    const page = await context.newPage();
    const cdp = await context.newCDPSession(page);
    await cdp.send('Network.enable');
    await cdp.send('Network.emulateNetworkConditions', LINK);
    const first = await visit(page, cdp);
    const repeat = await visit(page, cdp);
    await context.close();
    results.push({ first, repeat });
    console.log(
      `run=${run} first_ms=${first.ms} first_bytes=${first.bytes} repeat_ms=${repeat.ms} ` +
        `repeat_bytes=${repeat.bytes} bundle_fetched_again=${repeat.bundleFetched.length}`,
    );
    if (repeat.bundleFetched.length > 0) {
      throw new StepError(`a repeat visit fetched the bundle again: ${repeat.bundleFetched.join(', ')}`);
    }
  }
  const sorted = (key) => results.map(key).sort((a, b) => a - b);
  const median = (values) => values[Math.floor(values.length / 2)];
  const firsts = sorted((r) => r.first.ms);
  console.log(
    `summary runs=${runs} first_ms_median=${median(firsts)} first_ms_min=${firsts[0]} ` +
      `first_ms_max=${firsts[firsts.length - 1]} first_bytes=${results[0].first.bytes} ` +
      `repeat_ms_median=${median(sorted((r) => r.repeat.ms))} repeat_bytes=${results[0].repeat.bytes}`,
  );
}, 60_000 + runs * 30_000);
