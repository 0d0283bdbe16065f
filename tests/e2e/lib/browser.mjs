// browser.mjs — Debian's Chromium driven by playwright-core (no browser download: executablePath).
//   const browser = await launchBrowser();             headless unless NANLENS_E2E_HEADED=1
//   const page = await openWorkbench(browser, url);    a new page on the code-server URL, once the
//                                                      workbench (editor area + status bar) is drawn
//   await browser.close();
// The flags keep Chromium off the network (this machine reaches only package registries: without them
// it retries Google hosts) and make it run as root in a container.

import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium } from 'playwright-core';
import { CHROMIUM_BIN } from './paths.mjs';
import { removeOnExit } from './procs.mjs';

export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-dev-shm-usage',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-features=Translate,MediaRouter,OptimizationHints',
];

export const VIEWPORT = { width: 1440, height: 900 };

export async function launchBrowser({ headless = !process.env.NANLENS_E2E_HEADED, timeoutMs = 60000 } = {}) {
  // Chromium keeps its crash-report database under XDG_CONFIG_HOME whatever the profile: a temp one per launch.
  const xdg = mkdtempSync(join(tmpdir(), 'nanlens-e2e-chromium-'));
  const forget = removeOnExit(xdg);
  const env = { ...process.env, XDG_CONFIG_HOME: join(xdg, 'config'), XDG_CACHE_HOME: join(xdg, 'cache') };
  try {
    const browser = await chromium.launch({ executablePath: CHROMIUM_BIN, headless, args: CHROMIUM_ARGS, env, timeout: timeoutMs });
    browser.on('disconnected', () => {
      forget();
      rmSync(xdg, { recursive: true, force: true });
    });
    return browser;
  } catch (error) {
    forget();
    rmSync(xdg, { recursive: true, force: true });
    throw error;
  }
}

/** Open the workbench at url in a new page and wait until it is drawn (about 7 s here). */
export async function openWorkbench(browser, url, { timeoutMs = 90000 } = {}) {
  const context = await browser.newContext({ viewport: VIEWPORT });
  const page = await context.newPage();
  page.setDefaultTimeout(30000);
  await page.goto(url, { waitUntil: 'domcontentloaded', timeout: timeoutMs });
  await page.locator('.monaco-workbench .part.editor').waitFor({ state: 'visible', timeout: timeoutMs });
  await page.locator('.monaco-workbench .part.statusbar').waitFor({ state: 'visible', timeout: timeoutMs });
  return page;
}
