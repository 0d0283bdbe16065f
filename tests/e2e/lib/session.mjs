// session.mjs — one end-to-end scenario: code-server with the built extension + Chromium on the workbench,
// always torn down, with its screenshots and logs kept in artifacts/e2e/<name>/.
//
//   import { withSession, demoWorkspace } from './lib/session.mjs';
//   test('...', { timeout: 180_000 }, () => withSession({ name: 'activation', folder }, async (s) => {
//     await openFile(s.page, 'train.py', { line: 5 });
//     await s.shot('opened');                       // artifacts/e2e/activation/01-opened.png
//     s.codeServer.readLog(/NaN Lens\.log$/);       // the extension's output channel, from disk
//   }));
//
// withSession(options, body):
//   options.name       artifacts folder name (required; the folder is emptied first)
//   options.folder     workspace to open (default: demoWorkspace().folder)
//   options.settings   user settings over the defaults ({"nanlens.python": <repo>/.venv/bin/python})
//   options.vsix       extension packages to install (default [VSIX_PATH])
//   options.env        extra environment for code-server / the extension host
//   options.timeoutMs  bound on start-up + body (default 150 s): keep it below the test's timeout so a hang is reported
//                      with a screenshot and logs instead of node:test cancelling the test mid-flight
// body(s) gets s.page, s.browser, s.codeServer, s.folder, s.file (the demo's program, when folder was not
// given), s.artifactsDir, s.shot(stage).
// On failure a "failure" screenshot is saved before the error is rethrown; the VS Code logs are copied to
// <artifactsDir>/logs/ in every case; then Chromium is closed and code-server's process group is killed.
//
// demoWorkspace() -> {folder, file, temporary, dispose()}: the repo's demo/ folder when demo/train.py exists,
// else a temporary folder holding a small train.py (so the harness runs before the demo is written).

import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, relative } from 'node:path';
import { launchBrowser, openWorkbench } from './browser.mjs';
import { startCodeServer } from './codeServer.mjs';
import { ARTIFACTS_DIR, DEMO_DIR, VENV_PYTHON, VSIX_PATH } from './paths.mjs';
import { removeOnExit } from './procs.mjs';
import { screenshot } from './workbench.mjs';

export function defaultSettings() {
  return { 'nanlens.python': VENV_PYTHON };
}

const FALLBACK_TRAIN_PY = `"""A stand-in for demo/train.py: a tiny program whose loss goes NaN."""
import math


def loss(x):
    y = math.sqrt(x)
    return y * 2


for step in range(3):
    print(step, loss(step - 1.0))
`;

export function demoWorkspace() {
  const demoTrain = join(DEMO_DIR, 'train.py');
  if (existsSync(demoTrain)) {
    return { folder: DEMO_DIR, file: 'train.py', temporary: false, dispose() {} };
  }
  const folder = mkdtempSync(join(tmpdir(), 'nanlens-e2e-ws-'));
  writeFileSync(join(folder, 'train.py'), FALLBACK_TRAIN_PY);
  const forget = removeOnExit(folder);
  return {
    folder,
    file: 'train.py',
    temporary: true,
    dispose() {
      forget();
      rmSync(folder, { recursive: true, force: true });
    },
  };
}

function saveLogs(codeServer, dir) {
  const logsDir = join(dir, 'logs');
  mkdirSync(logsDir, { recursive: true });
  writeFileSync(join(logsDir, 'code-server.out.log'), codeServer.output());
  const root = join(codeServer.userDataDir, 'logs');
  for (const file of codeServer.logFiles()) {
    // "20261122T071701/exthost1/nanlens.nanlens/NaN Lens.log" -> "exthost1-nanlens.nanlens-NaN Lens.log"
    const parts = relative(root, file).split('/').slice(1);
    const name = parts.length ? parts.join('-') : basename(file);
    try {
      copyFileSync(file, join(logsDir, name));
    } catch {
      // a log rotated away while copying
    }
  }
}

export async function withSession(options, body) {
  const { name, settings = {}, vsix = [VSIX_PATH], env = {}, timeoutMs = 150000 } = options;
  if (!name) throw new Error('withSession needs a name (the artifacts folder)');
  const artifactsDir = join(ARTIFACTS_DIR, name);
  rmSync(artifactsDir, { recursive: true, force: true });
  mkdirSync(artifactsDir, { recursive: true });

  const workspace = options.folder ? null : demoWorkspace();
  const folder = options.folder ?? workspace.folder;
  const file = workspace?.file;
  const session = { artifactsDir, folder, file, page: undefined, browser: undefined, codeServer: undefined };
  session.shot = (stage) => screenshot(session.page, artifactsDir, stage);
  let closed = false;

  // Start-up and body together, so the bound below covers a code-server or workbench that never comes up.
  const work = (async () => {
    const codeServer = await startCodeServer({ folder, vsix, env, settings: { ...defaultSettings(), ...settings } });
    if (closed) return void (await codeServer.stop());
    session.codeServer = codeServer;
    const browser = await launchBrowser();
    if (closed) return void (await browser.close());
    session.browser = browser;
    session.page = await openWorkbench(browser, codeServer.workbenchUrl());
    return body(session);
  })();
  work.catch(() => {}); // after a timeout its rejection is already reported

  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`scenario "${name}" ran over ${timeoutMs} ms (withSession timeoutMs)`)), timeoutMs);
  });
  try {
    return await Promise.race([work, timeout]);
  } catch (error) {
    if (session.page) await session.shot('failure').catch(() => {});
    throw error;
  } finally {
    closed = true;
    clearTimeout(timer);
    const { codeServer, browser } = session;
    if (codeServer) {
      try {
        saveLogs(codeServer, artifactsDir);
      } catch {
        // logs are a convenience; never mask the test's own result
      }
    }
    if (browser) await browser.close().catch(() => {});
    if (codeServer) await codeServer.stop();
    workspace?.dispose();
  }
}
