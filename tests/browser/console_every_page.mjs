#!/usr/bin/env node
// tests/browser/console_every_page.mjs: every page of the console, as one role, at a desktop
// width (1366 px) and a phone's (390 px), watched for errors.
//
// Usage: node console_every_page.mjs BASE_URL USERNAME PASSWORD MENU [PAGE...]
//
// MENU is the comma-separated list of the hrefs the role's menu must show, in order (the
// permission table decides it). PAGE is a page the menu does not link to (forms, one
// activity, one order...), written `PATH` or `PATH|absent=SELECTOR;SELECTOR|present=SELECTOR`:
// what must not be on that page for this role (a Pre-warm button for a merchant), and what
// must.
//
// Signs in, then at each width opens every menu page and every PAGE, each by a full load that
// must hydrate, waits for its heading and for nothing left "Loading…", checks that the page
// is no wider than the window (`scrollWidth <= innerWidth`: nothing scrolls sideways) and
// that axe-core finds no violation of WCAG 2 A or AA on it.
// From each menu page it follows the menu's link to the next one inside the browser (on the
// phone, through the menu's button: the menu is folded there) and waits for that page's
// heading: a panic in the wasm bundle leaves the router dead, so the link would do nothing.
// At the desktop width it also checks the skip link (the first Tab stop; Enter moves the focus
// to the page's content) and that a menu link shows a focus ring. A page too wide, an axe
// violation or a control shown to a role that may not use it is noted and the run goes on:
// every one is reported at the end. Any uncaught page error (a wasm panic, `unreachable`) or
// console error on the way fails the check at once, naming the page.
// With SHOTS_DIR set, a full-page screenshot of each page at each width is saved there.
// Prints `visited=N` on success.

import { mkdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { StepError, login, openHydrated, pathOf, runScenario, scenarioArgs, step, textOf } from './harness.mjs';

const [baseArg, username, password, menuArg, ...extra] = scenarioArgs(
  'node console_every_page.mjs BASE_URL USERNAME PASSWORD MENU [PAGE...]',
  4,
);
const base = baseArg.replace(/\/+$/, '');
const wantMenu = menuArg.split(',').filter(Boolean);
const WIDTHS = [
  { width: 1366, height: 900 },
  { width: 390, height: 844 },
];
const shots = process.env.SHOTS_DIR;
const AXE = createRequire(import.meta.url).resolve('axe-core/axe.min.js');
if (shots) mkdirSync(shots, { recursive: true });

/** `PATH|absent=A;B|present=C` as {path, absent: [A, B], present: [C]}. */
function parsePage(arg) {
  const [path, ...parts] = arg.split('|');
  const page = { path, absent: [], present: [] };
  for (const part of parts) {
    const [key, list] = [part.slice(0, part.indexOf('=')), part.slice(part.indexOf('=') + 1)];
    if (!(key in page) || key === 'path') throw new StepError(`unknown page option ${part} in ${arg}`);
    page[key].push(...list.split(';').filter(Boolean));
  }
  return page;
}
const pages = extra.map(parsePage);

await runScenario(async (page, watch) => {
  // What is wrong with a page that leaves the next pages worth checking: every one is
  // reported at the end. An error in the browser stops the run at once (a dead router would
  // make every later page fail for the same reason).
  const problems = [];
  const clean = (where) => {
    if (watch.faults.length > 0) {
      throw new StepError(`${where}: ${watch.faults.length} error(s) in the browser:\n  ${watch.faults.join('\n  ')}`);
    }
  };
  // The page's heading, then its content: nothing left loading.
  const settled = async (where) => {
    await step(`${where}: its heading`, () => page.waitForSelector('main h1'));
    try {
      await page.waitForFunction(() => !document.querySelector('main')?.innerText.includes('Loading…'), null, {
        timeout: 15_000,
      });
    } catch {
      throw new StepError(`${where}: still "Loading…" after 15 s: ${await textOf(page, 'main')}`);
    }
  };
  // Nothing wider than the window; on failure, the elements that stick out.
  const fits = async (where, width) => {
    const overflow = await page.evaluate(() => {
      const inner = window.innerWidth;
      const wide = document.documentElement.scrollWidth;
      if (wide <= inner) return null;
      const out = [...document.querySelectorAll('body *')]
        .filter((el) => el.getBoundingClientRect().right > inner + 1)
        .filter((el) => ![...el.children].some((child) => child.getBoundingClientRect().right > inner + 1))
        .slice(0, 5)
        .map((el) => `${el.tagName.toLowerCase()}${el.id ? `#${el.id}` : ''}${el.className && typeof el.className === 'string' ? `.${el.className.split(' ').join('.')}` : ''} (right ${Math.round(el.getBoundingClientRect().right)})`);
      return `${wide} px wide in a ${inner} px window; sticking out: ${out.join(', ')}`;
    });
    if (overflow) problems.push(`${where} at ${width} px: the page scrolls sideways: ${overflow}`);
  };
  // axe-core's WCAG 2 A and AA rules: no violation allowed.
  const accessible = async (where, width) => {
    await page.addScriptTag({ path: AXE });
    const violations = await page.evaluate(async () => {
      const result = await window.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa'] } });
      return result.violations.map(
        (v) => `${v.id} (${v.impact}): ${v.help}; ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(' | ')}`,
      );
    });
    if (violations.length > 0) {
      problems.push(`${where} at ${width} px: ${violations.length} WCAG 2 A/AA violation(s):\n    ${violations.join('\n    ')}`);
    }
  };
  const shoot = async (where, width) => {
    if (!shots) return;
    const slug = where.replace(/^\//, '').replace(/[^a-zA-Z0-9]+/g, '-') || 'home';
    await page.screenshot({ path: `${shots}/${username.split('-')[0]}-${width}-${slug}.png`, fullPage: true });
  };
  const checkPage = async ({ path, absent, present }) => {
    for (const selector of absent) {
      if ((await page.locator(selector).count()) > 0) {
        problems.push(`${path}: shows ${selector} to ${username}, whose role may not use it`);
      }
    }
    for (const selector of present) {
      await step(`${path}: ${selector} shown`, () => page.waitForSelector(selector, { state: 'attached' }));
    }
  };

  await login(page, base, username, password);
  let visited = 0;
  for (const size of WIDTHS) {
    await page.setViewportSize(size);
    const phone = size.width < 720;
    await openHydrated(page, base, '/');
    const menu = await page.$$eval('nav.sidebar ul a', (links) => links.map((link) => link.getAttribute('href')));
    if (menu.join(',') !== wantMenu.join(',')) {
      throw new StepError(`${username}'s menu lists ${menu.join(', ')}; the role may use ${wantMenu.join(', ')}`);
    }
    clean('signing in');
    if (phone) {
      if (await page.locator('#menu').isVisible()) throw new StepError('at 390 px the menu is not folded');
    } else {
      await step('the skip link is the first Tab stop', async () => {
        await page.keyboard.press('Tab');
        const first = await page.evaluate(() => document.activeElement?.className);
        if (first !== 'skip-link') throw new StepError(`the first Tab stop is .${first}, not the skip link`);
        await page.keyboard.press('Enter');
        await page.waitForFunction(() => document.activeElement?.id === 'main');
      });
      await step('a menu link shows a focus ring', async () => {
        await page.focus('nav.sidebar ul a');
        await page.keyboard.press('Shift+Tab');
        await page.keyboard.press('Tab');
        const ring = await page.evaluate(() => {
          const style = getComputedStyle(document.activeElement);
          return `${style.outlineStyle} ${style.outlineWidth}`;
        });
        if (ring.startsWith('none') || ring.endsWith(' 0px')) throw new StepError(`no focus ring on the menu (${ring})`);
      });
    }
    for (const [index, path] of menu.entries()) {
      await openHydrated(page, base, path);
      await settled(path);
      await fits(path, size.width);
      await accessible(path, size.width);
      await shoot(path, size.width);
      clean(path);
      // The router must still be alive: the next menu entry opens without a page load.
      const next = menu[(index + 1) % menu.length];
      await step(`${path}: follow the menu to ${next} at ${size.width} px`, async () => {
        if (phone) {
          await page.click('.menu-toggle');
          await page.waitForSelector('#menu', { state: 'visible' });
        }
        await page.click(`nav.sidebar ul a[href="${next}"]`);
        await page.waitForURL((url) => pathOf(url.href) === next);
        await page.waitForSelector('main h1');
      });
      clean(`${path} → ${next}`);
      visited += 1;
    }
    for (const extraPage of pages) {
      await openHydrated(page, base, extraPage.path);
      await settled(extraPage.path);
      await checkPage(extraPage);
      await fits(extraPage.path, size.width);
      await accessible(extraPage.path, size.width);
      await shoot(extraPage.path, size.width);
      clean(extraPage.path);
      visited += 1;
    }
  }
  if (problems.length > 0) {
    throw new StepError(`${username}: ${problems.length} problem(s) on ${visited} page visits:\n  ${problems.join('\n  ')}`);
  }
  console.log(`visited=${visited}`);
}, 420_000);
