// Issue 15: the editor runs no code of a bundle's unasked. The demo runs under NanGuard told not to locate at the
// scene (NANLENS_LOCATE_AT_SCENE=0), so its capture bundle holds no findings: locating it would replay the step,
// which runs train.py. The editor shows it as "not located" in the Captures and Dumps view, says so once in a
// notification, and puts a CodeLens "Locate NaN in <bundle> (runs train.py)" on train.py's first line; nothing
// runs (no marker, no cached findings) until that lens is clicked; then the origin line turns red.
//
// Nothing is faked: a real capture of demo/train.py, the real server and its locate worker.

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { captureDemoWorkspace, lineOf, waitForLocatedMarker } from './lib/capture.mjs';
import { waitFor } from './lib/procs.mjs';
import { withSession } from './lib/session.mjs';
import { clickCodeLens, codeLenses, gutterDecorations, notifications, openFile, runCommand } from './lib/workbench.mjs';

const ORIGIN_MARK = '# BUG';
const LOCATE_LENS = 'Locate NaN in';

let capture;

before(async () => {
  capture = await captureDemoWorkspace('locate', { env: { NANLENS_LOCATE_AT_SCENE: '0' } });
  assert.ok(!existsSync(join(capture.bundle, 'findings.json')), 'the bundle holds no findings from the scene');
});

after(() => capture?.dispose());

test('a bundle without findings waits for the Locate click, then is located and marked', { timeout: 300000 }, async () => {
  const { workspace, bundle } = capture;
  const trainPy = join(workspace, 'train.py');
  const originLine = lineOf(trainPy, ORIGIN_MARK);
  const cache = `${bundle}.findings.json`;

  await withSession({ name: 'locate', folder: workspace, timeoutMs: 270000 }, async (s) => {
    await openFile(s.page, 'train.py', { line: 1 });

    // 1. The bundle is announced once and offered, saying what locating runs; nothing runs.
    const notice = await waitFor(
      async () => (await notifications(s.page)).find((text) => text.includes('has no findings yet')),
      { timeoutMs: 60000, intervalMs: 500, what: 'the notification about the bundle without findings' },
    );
    assert.match(notice, /Locating it replays the captured step, which runs train\.py/);
    const lens = await waitFor(
      async () => (await codeLenses(s.page)).find((l) => l.title.includes(LOCATE_LENS)),
      { timeoutMs: 30000, what: `the CodeLens "${LOCATE_LENS} … (runs train.py)"` },
    );
    assert.equal(lens.line, 1, 'the Locate lens stands above the first line of the program it runs');
    assert.match(lens.title, /\(runs train\.py\)$/);
    await runCommand(s.page, 'NaN Lens: Focus on Captures and Dumps View');
    const row = s.page.locator('.monaco-list-row', { hasText: 'not located' }).first();
    await row.waitFor({ state: 'visible', timeout: 15000 });
    assert.match(await row.innerText(), /Locate runs train\.py/);
    await s.shot('waiting');
    await new Promise((resolve) => setTimeout(resolve, 5000)); // several watcher polls
    assert.deepEqual(await gutterDecorations(s.page, { line: originLine }), [], 'no marker before the click');
    assert.ok(!existsSync(cache), 'nothing was located (no cached findings) before the click');

    // 2. The click locates it: the origin line turns red and the result is cached beside the bundle.
    await openFile(s.page, 'train.py', { line: 1 });
    await clickCodeLens(s.page, LOCATE_LENS);
    await waitForLocatedMarker(s.page, originLine, bundle);
    assert.ok(existsSync(cache), 'the locate cached its findings beside the bundle');
    const told = await waitFor(
      async () => (await notifications(s.page)).find((text) => text.includes('NaN/Inf starts at')),
      { timeoutMs: 30000, what: 'the notification naming the origin' },
    );
    assert.match(told, new RegExp(`train\\.py:${originLine}`));
    await s.shot('located');
  });
});
