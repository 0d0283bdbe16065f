// Issue 10: a quick fix and its verification, end to end. A real capture bundle of the demo is located and its
// origin line marked (as in flow.test.mjs); on that line the Quick Fix menu offers NaN Lens's fixes, the
// preferred one clips the log's argument; picking it rewrites the line, saving makes the findings stale and
// brings a CodeLens "Verify fix on captured step", and clicking it replays the captured step with the fixed
// code (`nanlens replay BUNDLE --json`) and says so in a notification: "finite on the captured step". The fixed
// train.py differs from the one captured, so the replay refuses to run it until the user says so (issue 15, "a
// bundle is data"): the editor asks once in a modal naming the file, and "Run train.py" runs it.
//
// Nothing is faked: the bundle comes from running demo/train.py under NanGuard with real TensorFlow, the
// fix is the server's code action applied by the editor, and the verdict is a real replay of the saved file.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { captureDemoWorkspace, lineOf, waitForLocatedMarker } from './lib/capture.mjs';
import { waitFor } from './lib/procs.mjs';
import { withSession } from './lib/session.mjs';
import {
  ACTIVE_EDITOR,
  clickCodeLens,
  clickDialogButton,
  codeLenses,
  cursorPosition,
  notifications,
  openFile,
  waitForModalDialog,
} from './lib/workbench.mjs';

const ORIGIN_MARK = '# BUG';
/** The demo's bug and the preferred fix's rewrite of it (pyadapter.fixes: clip the log's argument). */
const BUGGY_EXPRESSION = 'tf.math.log(probs)';
const FIXED_EXPRESSION = 'tf.math.log(tf.clip_by_value(probs, 1e-7, 1.0))';
const FIX_TITLE = 'Clip probs to [1e-7, 1.0] before the log';
const VERIFY_TITLE = 'Verify fix on captured step';
const VERIFIED_MESSAGE = 'finite on the captured step';
/** The verifying replay runs the step in graph and eager mode in a fresh interpreter: 10-30 s, more when loaded. */
const VERIFY_TIMEOUT_MS = 150000;

let capture;

before(async () => {
  capture = await captureDemoWorkspace('quickfix');
});

after(() => capture?.dispose());

/** The text of `line` as drawn in the active editor (spaces normalised), or null when it is not visible. */
async function editorLineText(page, line) {
  return page.locator(ACTIVE_EDITOR).evaluateAll((editors, wanted) => {
    for (const editor of editors) {
      const number = [...editor.querySelectorAll('.margin-view-overlays .line-numbers')].find(
        (element) => Number(element.textContent.trim()) === wanted,
      );
      if (!number) continue;
      const box = number.getBoundingClientRect();
      const middle = (box.top + box.bottom) / 2;
      for (const view of editor.querySelectorAll('.view-lines .view-line')) {
        const viewBox = view.getBoundingClientRect();
        if (middle >= viewBox.top && middle < viewBox.bottom) return view.textContent.replace(/\u00a0/g, ' ');
      }
    }
    return null;
  }, line);
}

test('a quick fix on the origin line is applied, saved and verified on the captured step', { timeout: 420000 }, async () => {
  const { workspace, bundle } = capture;
  const trainPy = join(workspace, 'train.py');
  const originLine = lineOf(trainPy, ORIGIN_MARK);
  assert.ok(readFileSync(trainPy, 'utf8').split('\n')[originLine - 1].includes(BUGGY_EXPRESSION));
  const timings = {};
  const mark = (what, since) => (timings[what] = `${((Date.now() - since) / 1000).toFixed(1)} s`);

  await withSession({ name: 'quickfix', folder: workspace, timeoutMs: 390000 }, async (s) => {
    let since = Date.now();
    await openFile(s.page, 'train.py', { line: originLine });

    // 1. The server locates the bundle and marks the origin line.
    await waitForLocatedMarker(s.page, originLine, bundle);
    mark('marker', since);
    await s.shot('marker');

    // 2. Cursor inside the diagnostic (it spans the line from its first non-blank character), then Ctrl+.
    await s.page.locator(`${ACTIVE_EDITOR} textarea`).first().focus();
    await s.page.keyboard.press('End');
    assert.equal((await cursorPosition(s.page))?.line, originLine, 'the cursor stays on the origin line');
    const fixRow = s.page.locator('.action-widget .monaco-list-row', { hasText: FIX_TITLE }).first();
    // Code actions are requested when the menu opens; retry once the diagnostics have reached the editor.
    await waitFor(
      async () => {
        if (await fixRow.isVisible()) return true;
        await s.page.keyboard.press('Escape');
        await s.page.locator(`${ACTIVE_EDITOR} textarea`).first().focus();
        await s.page.keyboard.press('Control+Period');
        return fixRow.waitFor({ state: 'visible', timeout: 3000 }).then(() => true, () => false);
      },
      { timeoutMs: 30000, intervalMs: 500, what: `the quick fix "${FIX_TITLE}" in the Quick Fix menu` },
    );
    const offered = await s.page.locator('.action-widget .monaco-list-row').allInnerTexts();
    console.log(`# quick fixes offered: ${JSON.stringify(offered)}`);
    assert.ok(offered.some((text) => text.includes(`NaN Lens: ${FIX_TITLE}`)), 'the fix is titled as NaN Lens\'s');
    await s.shot('quickfix-menu');

    // 3. Picking it rewrites the log's argument in the editor (not yet on disk).
    // The menu lays a pointer block over the window until the mouse moves (so the pointer resting where the
    // menu opens does not pick an entry): move onto the entry first, as a hand would, then click.
    const box = await fixRow.boundingBox();
    await s.page.mouse.move(box.x + box.width / 2, box.y + box.height / 2, { steps: 3 });
    await s.page.mouse.move(box.x + box.width / 2 + 2, box.y + box.height / 2, { steps: 2 });
    await fixRow.click();
    const fixedText = await waitFor(
      async () => {
        const text = await editorLineText(s.page, originLine);
        return text?.includes(FIXED_EXPRESSION) && text;
      },
      { timeoutMs: 10000, what: `line ${originLine} to read "${FIXED_EXPRESSION}"` },
    );
    assert.ok(!fixedText.includes(BUGGY_EXPRESSION), `the buggy expression is gone: ${fixedText}`);
    await s.shot('fixed');

    // 4. Save: the file on disk holds the fix, the findings go stale and the verify lens appears on the line.
    since = Date.now();
    await s.page.locator(`${ACTIVE_EDITOR} textarea`).first().focus();
    await s.page.keyboard.press('Control+s');
    await waitFor(() => readFileSync(trainPy, 'utf8').split('\n')[originLine - 1].includes(FIXED_EXPRESSION), {
      timeoutMs: 10000,
      what: `train.py saved with the fix on line ${originLine}`,
    });
    const lenses = await waitFor(
      async () => {
        const shown = await codeLenses(s.page);
        return shown.some((lens) => lens.title.includes(VERIFY_TITLE)) && shown;
      },
      { timeoutMs: 30000, what: `the CodeLens "${VERIFY_TITLE}"` },
    );
    mark('verifyLens', since);
    assert.equal(lenses.find((lens) => lens.title.includes(VERIFY_TITLE)).line, originLine, 'the lens stands above the origin line');
    await s.shot('verify-lens');

    // 5. One click replays the captured step with the fixed code; the verdict comes as a notification. The code
    // changed since the capture, so the editor first asks, naming the file, before it runs it.
    since = Date.now();
    await clickCodeLens(s.page, VERIFY_TITLE);
    const question = await waitForModalDialog(s.page, /^Run train\.py\? It changed since the capture\./);
    assert.ok(question.detail.includes(trainPy), `the question names the file: ${JSON.stringify(question)}`);
    assert.ok(question.buttons.some((label) => label.includes('Run train.py')), `buttons: ${question.buttons}`);
    await s.shot('trust-question');
    await clickDialogButton(s.page, 'Run train.py');
    const shown = await waitFor(
      async () => {
        const texts = await notifications(s.page);
        return texts.some((text) => text.includes(VERIFIED_MESSAGE)) && texts;
      },
      { timeoutMs: VERIFY_TIMEOUT_MS, intervalMs: 1000, what: `a notification "${VERIFIED_MESSAGE}"` },
    );
    mark('verified', since);
    const verdict = shown.find((text) => text.includes(VERIFIED_MESSAGE));
    assert.doesNotMatch(verdict, /still non-finite|failed/i, `the verdict: ${verdict}`);
    const replay = s.codeServer.readLog?.(/NaN Lens\.log$/) ?? '';
    console.log(`# verdict: ${verdict}${replay.includes('Verifying the fix') ? ' (the extension logged the verify)' : ''}`);
    await s.shot('verified');
  });
  console.log(
    `# time to the gutter marker ${timings.marker}, from save to the verify lens ${timings.verifyLens}, ` +
      `from the click to the verdict ${timings.verified}`,
  );
});
