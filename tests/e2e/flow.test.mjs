// Issue 6: the main editor flow, end to end. A training run under NanGuard leaves a capture bundle in the
// workspace's captures/ folder; NaN Lens's language server finds it, locates the op that made the first
// non-finite value, and the editor shows it: a red gutter marker on the origin line, a hover with the op and
// the tensor's health, an entry in the Problems view and a CodeLens "Replay eagerly (step N)". Clicking that
// lens replays the captured step eagerly under the debugger, paused on the origin line with `probs` in scope.
//
// Nothing is faked: the bundle comes from running demo/train.py under NanGuard with real TensorFlow, the
// server locates it itself (no precomputed findings.json), and the debug session is debugpy's.

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
  codeLenses,
  debugAction,
  debugState,
  debugVariables,
  hoverLine,
  openFile,
  problemsRows,
  redShare,
  runCommand,
  waitForPausedAt,
} from './lib/workbench.mjs';

const ORIGIN_MARK = '# BUG';

let capture;
let workspace;
let bundle;

before(async () => {
  capture = await captureDemoWorkspace('flow');
  ({ workspace, bundle } = capture);
});

after(() => capture?.dispose());

/**
 * The glyph-margin icons of the active editor, by line, with the share of their opaque pixels that are red
 * (each data-URI icon drawn on a canvas). Lines and icons are measured in one page evaluation, so a view zone
 * (the CodeLens) appearing meanwhile cannot shift one against the other.
 */
async function gutterIconColors(page) {
  const icons = await page.locator(ACTIVE_EDITOR).evaluateAll((editors) => {
    const icons = [];
    for (const editor of editors) {
      const lines = [...editor.querySelectorAll('.margin-view-overlays .line-numbers')].map((element) => {
        const box = element.getBoundingClientRect();
        return { line: Number(element.textContent.trim()), top: box.top, bottom: box.bottom };
      });
      for (const element of editor.querySelectorAll('.cgmr')) {
        const box = element.getBoundingClientRect();
        const middle = (box.top + box.bottom) / 2;
        const line = lines.find((entry) => middle >= entry.top && middle < entry.bottom)?.line;
        const match = /url\("?(data:[^")]+)"?\)/.exec(getComputedStyle(element).backgroundImage);
        if (line === undefined || !match) continue;
        icons.push({ line, src: match[1] });
      }
    }
    return icons;
  });
  // Colors afterwards: every position above was read in one evaluation, before any image is decoded.
  return Promise.all(icons.map(async ({ line, src }) => ({ line, red: await redShare(page, src) })));
}

test('a capture bundle is marked in the editor and replays under the debugger', { timeout: 300000 }, async () => {
  const trainPy = join(workspace, 'train.py');
  const originLine = lineOf(trainPy, ORIGIN_MARK);
  const step = JSON.parse(readFileSync(join(bundle, 'manifest.json'), 'utf8')).step;
  assert.ok(Number.isInteger(step), `the bundle's manifest names its step (got ${step})`);
  const timings = {};
  const mark = (what, since) => (timings[what] = `${((Date.now() - since) / 1000).toFixed(1)} s`);

  await withSession({ name: 'flow', folder: workspace, timeoutMs: 270000 }, async (s) => {
    let since = Date.now();
    await openFile(s.page, 'train.py', { line: originLine });

    // 1. The server finds the bundle, locates it (replaying its step with a dump) and the line turns red.
    await waitForLocatedMarker(s.page, originLine, bundle);
    mark('marker', since);
    // The icon there is red, and it is the only red one: lines the NaN merely flows through are amber.
    const icons = await waitFor(
      async () => {
        const shown = await gutterIconColors(s.page);
        const redLines = shown.filter((icon) => icon.red > 0.5).map((icon) => icon.line);
        return redLines.length === 1 && redLines[0] === originLine && shown;
      },
      { timeoutMs: 15000, what: `a red gutter icon on line ${originLine} and on no other line` },
    );
    console.log(`# gutter icons (line: share of red pixels): ${icons.map((icon) => `${icon.line}: ${icon.red.toFixed(2)}`).join(', ')}`);
    await s.shot('marker');

    // 2. The CodeLens above the origin line offers to replay the captured step. (Checked before hovering:
    // its view zone shifts the lines below it, and hoverLine aims at a line by its position.)
    const lensTitle = `Replay eagerly (step ${step})`;
    const lenses = await waitFor(
      async () => {
        const shown = await codeLenses(s.page);
        return shown.some((lens) => lens.title.includes(lensTitle)) && shown;
      },
      { timeoutMs: 20000, what: `the CodeLens "${lensTitle}"` },
    );
    const lens = lenses.find((entry) => entry.title.includes(lensTitle));
    assert.equal(lens.line, originLine, `the lens stands above line ${originLine}`);
    await s.shot('codelens');

    // 3. The hover on that line names the op and the -inf it produced.
    const hover = await hoverLine(s.page, originLine, { timeoutMs: 15000 });
    assert.match(hover, /NaN Lens/);
    assert.match(hover, /\bLog\b/);
    assert.match(hover, /-inf/);
    assert.match(hover, /origin/i);
    // The step it names is the training step the bundle captured, the one the CodeLens replays.
    assert.match(hover, new RegExp(`step: ${step}\\b`));
    await s.shot('hover');
    await s.page.mouse.move(5, 5);
    await s.page.keyboard.press('Escape');

    // 4. The Problems view lists it as an error of NaN Lens on that line.
    await runCommand(s.page, 'View: Focus Problems (Errors, Warnings, Infos)');
    const isOriginProblem = (row) => row.error && row.text.includes('NaN Lens') && row.text.includes(`[Ln ${originLine},`);
    const problems = await waitFor(
      async () => {
        const rows = await problemsRows(s.page);
        return rows.some(isOriginProblem) && rows;
      },
      { timeoutMs: 15000, what: `a NaN Lens error at Ln ${originLine} in the Problems view` },
    );
    assert.match(problems.find(isOriginProblem).text, /\bLog\b.*-inf/s);
    await s.shot('problems');

    // 5. One click: a breakpoint on the origin line and a `nanlens` session replaying the step eagerly.
    since = Date.now();
    await clickCodeLens(s.page, lensTitle);
    const paused = await waitForPausedAt(s.page, originLine, { timeoutMs: 120000 });
    mark('paused', since);
    assert.ok(paused.toolbar, 'the debug toolbar is shown');
    const replay = s.codeServer.processes().find((proc) => /-m pyadapter replay\b/.test(proc.cmdline));
    assert.ok(replay, 'a `pyadapter replay` process runs under code-server');
    assert.ok(replay.cmdline.includes(bundle) && replay.cmdline.includes('--eager'), `replay command: ${replay.cmdline}`);

    // The Variables view holds the real tensor the origin line takes the log of.
    const variables = await waitFor(
      async () => {
        const rows = await debugVariables(s.page);
        return rows.some((row) => row.name === 'probs') && rows;
      },
      { timeoutMs: 30000, what: 'the variable "probs" in the Variables view' },
    );
    const probs = variables.find((row) => row.name === 'probs');
    assert.match(probs.value, /Tensor|tf\.|float32|shape/i, `probs is a tensor (shown as ${probs.value})`);
    await s.shot('paused');

    // 6. Stop the session: the toolbar goes away and the replay process ends.
    await debugAction(s.page, 'Stop');
    await waitFor(async () => !(await debugState(s.page)).toolbar, { timeoutMs: 20000, what: 'the debug toolbar to close' });
    await waitFor(() => !s.codeServer.processes().some((proc) => proc.pid === replay.pid), {
      timeoutMs: 20000,
      what: `the replay process (pid ${replay.pid}) to end`,
    });
  });
  console.log(`# time to the gutter marker ${timings.marker}, from the click to the paused debugger ${timings.paused}`);
});
