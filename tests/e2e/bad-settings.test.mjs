// Issue 6: a wrong `nanlens.python` is reported once, clearly, with the fix; fixing the setting (here in the
// workspace's .vscode/settings.json, as a person would from the Settings editor's Workspace tab) starts the
// server without reloading the window.

import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { DEMO_DIR, VENV_PYTHON } from './lib/paths.mjs';
import { removeOnExit, sleep, waitFor } from './lib/procs.mjs';
import { withSession } from './lib/session.mjs';
import { notifications, openFile, runCommand, waitForStatusBarItem } from './lib/workbench.mjs';

let workspace;

before(() => {
  workspace = realpathSync(mkdtempSync(join(tmpdir(), 'nanlens-e2e-settings-')));
  removeOnExit(workspace);
  copyFileSync(join(DEMO_DIR, 'train.py'), join(workspace, 'train.py'));
});

after(() => {
  if (workspace && !process.env.NANLENS_E2E_KEEP) rmSync(workspace, { recursive: true, force: true });
});

/** Every notification of this window (toasts and the ones already hidden), from the Notifications center. */
async function allNotifications(page) {
  await runCommand(page, 'Notifications: Show Notifications');
  const center = page.locator('.notifications-center');
  await center.waitFor({ state: 'visible', timeout: 10000 });
  const items = await center.locator('.notification-list-item').evaluateAll((elements) =>
    elements.map((element) => ({
      message: element.querySelector('.notification-list-item-message')?.innerText.trim() ?? '',
      error: Boolean(element.querySelector('.codicon-error')),
      buttons: [...element.querySelectorAll('.monaco-button')].map((button) => button.innerText.trim()).filter(Boolean),
    })),
  );
  return items;
}

async function hideNotifications(page) {
  await runCommand(page, 'Notifications: Hide Notifications').catch(() => {});
}

const isNanLens = (text) => /NaN Lens/.test(text);
const isWarning = (item) => item.codicons.includes('warning') || /not running/i.test(item.ariaLabel);

test('a wrong nanlens.python gives one clear error; fixing the setting starts the server', { timeout: 200000 }, async () => {
  const missingPython = join(workspace, 'no-such-env', 'bin', 'python');

  await withSession({ name: 'bad-settings', folder: workspace, settings: { 'nanlens.python': missingPython }, timeoutMs: 180000 },
    async (s) => {
      await openFile(s.page, 'train.py', { line: 1 });

      // 1. One error toast that names the interpreter and the setting that fixes it.
      const toast = await waitFor(async () => (await notifications(s.page)).find(isNanLens), {
        timeoutMs: 60000,
        what: 'a NaN Lens notification',
      });
      assert.ok(toast.includes(missingPython), `the message names the interpreter: ${toast}`);
      assert.match(toast, /nanlens\.python/, 'the message names the setting to fix');
      assert.match(toast, /not found/i);
      const status = await waitForStatusBarItem(s.page, 'NaN Lens', { timeoutMs: 30000, where: isWarning });
      assert.match(status.ariaLabel, /not running/i);
      await s.shot('error');

      // Give a repeated report time to show up (a restart loop would add one per attempt), then count.
      await sleep(5000);
      const reported = (await allNotifications(s.page)).filter((item) => isNanLens(item.message));
      assert.equal(reported.length, 1, `exactly one NaN Lens notification: ${JSON.stringify(reported)}`);
      assert.ok(reported[0].error, 'it is an error notification');
      assert.ok(reported[0].buttons.includes('Open Settings'), `it offers "Open Settings": ${reported[0].buttons}`);
      await s.shot('notifications');
      await hideNotifications(s.page);
      assert.ok(!s.codeServer.processes().some((proc) => /-m pyadapter serve\b/.test(proc.cmdline)), 'no server runs');

      // 2. The fix: point nanlens.python at the right environment in the workspace settings.
      mkdirSync(join(workspace, '.vscode'), { recursive: true });
      writeFileSync(join(workspace, '.vscode', 'settings.json'), `${JSON.stringify({ 'nanlens.python': VENV_PYTHON }, null, 2)}\n`);

      const server = await waitFor(
        () => s.codeServer.processes().find((proc) => /-m pyadapter serve\b/.test(proc.cmdline)),
        { timeoutMs: 60000, what: 'a `python -m pyadapter serve` process after fixing nanlens.python' },
      );
      assert.ok(server.cmdline.startsWith(`${VENV_PYTHON} `), `server started with ${server.cmdline}`);
      const running = await waitForStatusBarItem(s.page, 'NaN Lens', {
        timeoutMs: 60000,
        where: (item) => !isWarning(item) && !/starting/i.test(item.ariaLabel) && item.codicons.includes('pulse'),
      });
      assert.doesNotMatch(running.ariaLabel, /not running/i);
      await s.shot('server-running');

      // Fixing it raised no new message.
      const after = (await allNotifications(s.page)).filter((item) => isNanLens(item.message));
      assert.equal(after.length, 1, `still one NaN Lens notification: ${JSON.stringify(after)}`);
      await hideNotifications(s.page);
    });
});
