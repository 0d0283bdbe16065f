// Issue 15, the editor's path: a crafted bundle runs nothing the user did not agree to. A real capture of the demo
// (without findings, so locating it would replay) has its manifest edited the way an attacker would: the program
// is a script outside the workspace (with its true sha256, so only the location gives it away), the argv asks it
// to serve the home folder and the working folder is elsewhere. The editor announces the bundle saying the
// program is outside the workspace; the user clicks Locate; the modal names the outside file; the user cancels:
// the script never ran (it would have left a file), nothing was located, no marker is drawn.
//
// Nothing is faked: a real capture, the real server, its locate worker and the real replay refusing the program.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { captureDemoWorkspace, lineOf } from './lib/capture.mjs';
import { removeOnExit, sleep, waitFor } from './lib/procs.mjs';
import { withSession } from './lib/session.mjs';
import { clickDialogButton, gutterDecorations, modalDialog, notifications, openFile, waitForModalDialog } from './lib/workbench.mjs';

let capture;
let outside;
let ranMarker;

before(async () => {
  capture = await captureDemoWorkspace('crafted', { env: { NANLENS_LOCATE_AT_SCENE: '0' } });
  outside = realpathSync(mkdtempSync(join(tmpdir(), 'nanlens-e2e-elsewhere-')));
  removeOnExit(outside);
  ranMarker = join(outside, 'ran.txt');
  // What the crafted program would do if it ran: leave a file behind (a stand-in for serving the home folder).
  const program = `import pathlib\npathlib.Path(${JSON.stringify(ranMarker)}).write_text("ran")\n`;
  const script = join(outside, 'helper.py');
  writeFileSync(script, program);
  const manifestPath = join(capture.bundle, 'manifest.json');
  const manifest = JSON.parse(readFileSync(manifestPath, 'utf8'));
  manifest.entry_script = {
    ...manifest.entry_script,
    path: script,
    sha256: createHash('sha256').update(program).digest('hex'),
    argv: [script, '--directory', '/', '--bind', '0.0.0.0'],
    cwd: outside,
  };
  writeFileSync(manifestPath, JSON.stringify(manifest, null, 2));
});

after(() => capture?.dispose());

test('a bundle naming a program outside the workspace runs nothing: the editor asks, Cancel keeps it so', { timeout: 300000 }, async () => {
  const { workspace, bundle } = capture;
  const trainPy = join(workspace, 'train.py');
  const originLine = lineOf(trainPy, '# BUG');

  await withSession({ name: 'crafted', folder: workspace, timeoutMs: 270000 }, async (s) => {
    await openFile(s.page, 'train.py', { line: 1 });

    // 1. Announced as waiting, saying why: its program lies outside the workspace.
    const notice = await waitFor(
      async () => (await notifications(s.page)).find((text) => text.includes('has no findings yet')),
      { timeoutMs: 60000, intervalMs: 500, what: 'the notification about the bundle without findings' },
    );
    assert.match(notice, /helper\.py is outside the workspace/);
    assert.match(notice, /runs helper\.py/);
    await s.shot('announced');

    // 2. Locate asks first, naming the outside file; Cancel.
    const toast = s.page.locator('.notifications-toasts .notification-list-item', { hasText: 'has no findings yet' }).first();
    await toast.hover();
    await toast.locator('.monaco-button', { hasText: /^Locate$/ }).first().click({ timeout: 15000 });
    const question = await waitForModalDialog(s.page, /^Run helper\.py\? It is outside your workspace\./);
    assert.ok(question.detail.includes(join(outside, 'helper.py')), `the detail names the full path: ${question.detail}`);
    assert.ok(question.buttons.some((label) => label.includes('Run helper.py')), `buttons: ${question.buttons}`);
    await s.shot('asked');
    await clickDialogButton(s.page, 'Cancel');
    await waitFor(async () => (await modalDialog(s.page)) === null, { timeoutMs: 10000, what: 'the dialog to close' });

    // 3. Nothing ran and nothing was located, through several watcher polls.
    await sleep(6000);
    assert.ok(!existsSync(ranMarker), 'the program named by the bundle never ran');
    assert.ok(!existsSync(`${bundle}.findings.json`), 'nothing was located (no cached findings)');
    assert.deepEqual(await gutterDecorations(s.page, { line: originLine }), [], 'no marker on the demo origin line');
    const replays = s.codeServer.processes().filter((proc) => /helper\.py/.test(proc.cmdline));
    assert.deepEqual(replays, [], 'no process runs helper.py');
    await s.shot('refused');
  });
});
