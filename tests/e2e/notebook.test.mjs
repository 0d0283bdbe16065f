// Notebook findings in VS Code's notebook editor. A training run in a Jupyter notebook went NaN; its findings
// name the .ipynb, the cell (0-based among ALL cells, markdown included) and the line inside that cell. The
// user opens the notebook (code-server's built-in .ipynb notebook editor; no Jupyter extension) and sees the
// origin where it is: a red gutter marker on line 2 of the third cell (the second CODE cell: a markdown cell
// comes first), in no other cell; a hover on that line with the op; a CodeLens "Replay eagerly (step 5)" above
// it; a NaN Lens error in the Problems view, which opens that cell when clicked.
//
// Input: a workspace with analysis.ipynb and a capture folder holding a bundle directory (a manifest only)
// and, beside it, the bundle's precomputed findings (`<bundle>.findings.json`, the file a locate writes and
// the server loads instead of locating when it is newer than the bundle: docs/protocol.md, "Precomputed
// findings"). That file is a legitimate input of the server, and it lets this test check the editor side
// alone: how findings with a `cell` are drawn, not how a notebook's step is captured and located (the
// pytest suites cover that). Everything after it is real: code-server, the extension, `nanlens serve`, LSP
// notebook sync, and what the workbench draws.

import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { removeOnExit, waitFor } from './lib/procs.mjs';
import { withSession } from './lib/session.mjs';
import {
  hoverNotebookLine,
  notebookCells,
  openNotebook,
  problemsRows,
  redShare,
  runCommand,
  waitForStatusBarItem,
} from './lib/workbench.mjs';

const STEP = 5;
// (kind, source lines). Cell 1 has a line 2 too, so "line 2 of the right cell" is a real check.
const CELLS = [
  ['markdown', ['# Training', '', 'The loss goes NaN in the third cell.']],
  ['code', ['import tensorflow as tf', 'x = tf.constant([0.0, 1.0])', 'print(x)']],
  ['code', ['def loss(x):', '    return tf.math.log(x)  # ORIGIN', '', 'print(loss(x))']],
  ['code', ['y = loss(x) * 2', 'print(y)']],
];
const ORIGIN_CELL = 2;
const ORIGIN_LINE = 2;
const CARRIED_LINE = 4; // the same cell's print(loss(x)): amber

let workspace;
let notebookPath;
let bundle;

function notebookJson() {
  return {
    cells: CELLS.map(([kind, lines], index) => ({
      cell_type: kind,
      id: `cell-${index}`,
      metadata: {},
      source: lines.map((line, i) => (i < lines.length - 1 ? `${line}\n` : line)),
      ...(kind === 'code' ? { execution_count: index, outputs: [] } : {}),
    })),
    metadata: {
      kernelspec: { display_name: 'Python 3', language: 'python', name: 'python3' },
      language_info: { name: 'python' },
    },
    nbformat: 4,
    nbformat_minor: 5,
  };
}

function finding({ line, role, op, message }) {
  return {
    file: notebookPath,
    cell: ORIGIN_CELL,
    line,
    role,
    op: { ...op, graph: '__inference_loss_12', step: 0 },
    health: { dtype: 'float32', rank: 1, shape: [2], size: 2, nan: 0, neg_inf: 1, pos_inf: 0, neg: 0, zero: 0, pos: 1 },
    inputs: [{ name: 'x:0', health: { dtype: 'float32', size: 2, nan: 0, neg_inf: 0, pos_inf: 0, neg: 0, zero: 1, pos: 1 } }],
    stack: [{ file: notebookPath, cell: ORIGIN_CELL, line, function: 'loss' }],
    message,
  };
}

before(() => {
  // realpath: the server reports files by their real path, the editor opens the folder by this one.
  workspace = realpathSync(mkdtempSync(join(tmpdir(), 'nanlens-e2e-notebook-')));
  removeOnExit(workspace);
  notebookPath = join(workspace, 'analysis.ipynb');
  writeFileSync(notebookPath, `${JSON.stringify(notebookJson(), null, 1)}\n`);
  bundle = join(workspace, 'captures', `analysis-step${STEP}`);
  mkdirSync(bundle, { recursive: true });
  writeFileSync(join(bundle, 'manifest.json'), JSON.stringify({ format: 'nanlens.bundle/1', step: STEP }));
  const origin = finding({ line: ORIGIN_LINE, role: 'origin', op: { name: 'Log', type: 'Log' }, message: 'Log produced 1 -inf of 2 from input x:0 which holds 1 zeros' });
  const carried = finding({ line: CARRIED_LINE, role: 'propagated', op: { name: 'mul', type: 'Mul' }, message: 'Mul carried 1 -inf of 2' });
  const findings = {
    schema: 'nanlens.findings/1',
    source: { kind: 'bundle', path: bundle, hosts: [] },
    bundle: { step: STEP },
    origin,
    findings: [origin, carried],
  };
  // Written after the bundle, so it is at least as new as the bundle's files: the server loads it.
  writeFileSync(`${bundle}.findings.json`, JSON.stringify(findings, null, 1));
});

after(() => {
  if (!process.env.NANLENS_E2E_KEEP) rmSync(workspace, { recursive: true, force: true });
});

test('notebook findings are drawn in the cell they name', { timeout: 240000 }, async () => {
  // Line numbers in cells: the test reads which line a marker is on from them, as a person would.
  const settings = { 'notebook.lineNumbers': 'on' };
  await withSession({ name: 'notebook', folder: workspace, settings, timeoutMs: 210000 }, async (s) => {
    await openNotebook(s.page, 'analysis.ipynb');
    await s.shot('opened');

    // 1. The server loads the findings and the markers appear in the third cell (index 2), on line 2.
    const cells = await waitFor(
      async () => {
        const shown = await notebookCells(s.page);
        const origin = shown.find((cell) => cell.index === ORIGIN_CELL);
        return origin?.gutter.some((icon) => icon.line === ORIGIN_LINE) && origin.lenses.length > 0 && shown;
      },
      { timeoutMs: 60000, intervalMs: 500, what: `a gutter marker on line ${ORIGIN_LINE} of notebook cell ${ORIGIN_CELL}` },
    );
    console.log(`# cells: ${JSON.stringify(cells.map(({ index, kind, gutter, lenses }) => ({ index, kind, gutter: gutter.map((g) => g.line), lenses })))}`);
    assert.deepEqual(cells.map((cell) => cell.kind), ['markdown', 'code', 'code', 'code'], 'all four cells are drawn');
    const origin = cells[ORIGIN_CELL];
    assert.match(origin.text, /tf\.math\.log\(x\)/, 'cell index 2 is the cell holding the log');
    // Exactly the two marked lines of that cell: the origin (red) and the line that carries it (amber).
    assert.deepEqual(origin.gutter.map((icon) => icon.line).sort(), [ORIGIN_LINE, CARRIED_LINE]);
    const originIcon = origin.gutter.find((icon) => icon.line === ORIGIN_LINE);
    const carriedIcon = origin.gutter.find((icon) => icon.line === CARRIED_LINE);
    assert.ok((await redShare(s.page, originIcon.src)) > 0.5, 'the origin icon is red');
    assert.ok((await redShare(s.page, carriedIcon.src)) < 0.5, 'the carried line icon is not red');
    assert.deepEqual(origin.afterText.map((entry) => entry.line), [ORIGIN_LINE, CARRIED_LINE]);
    assert.match(origin.afterText[0].text, /NaN origin: Log produced 1 -inf/);
    // No other cell is marked, although cell 1 (the first code cell) has a line 2 as well.
    for (const cell of cells.filter((c) => c.index !== ORIGIN_CELL)) {
      assert.deepEqual(cell.gutter, [], `no gutter marker in cell ${cell.index}`);
      assert.deepEqual(cell.lenses, [], `no CodeLens in cell ${cell.index}`);
      assert.deepEqual(cell.afterText, [], `no after-line text in cell ${cell.index}`);
    }
    await s.shot('markers');

    // 2. The server's CodeLens stands above the origin line of that cell.
    const replay = origin.lenses.find((lens) => lens.title.includes(`Replay eagerly (step ${STEP})`));
    assert.ok(replay, `a "Replay eagerly (step ${STEP})" lens (shown: ${JSON.stringify(origin.lenses)})`);
    assert.equal(replay.line, ORIGIN_LINE, `the lens stands above line ${ORIGIN_LINE} of the cell`);

    // 3. Hovering that line shows the op, its health and the training step.
    const hover = await hoverNotebookLine(s.page, ORIGIN_CELL, ORIGIN_LINE, { timeoutMs: 15000 });
    assert.match(hover, /NaN Lens/);
    assert.match(hover, /op: Log of type Log/);
    assert.match(hover, /-inf/);
    assert.match(hover, new RegExp(`step: ${STEP}\\b`));
    await s.shot('hover');
    await s.page.mouse.move(5, 5);
    await s.page.keyboard.press('Escape');

    // 4. The Problems view lists the origin as a NaN Lens error on line 2 (of the cell), and the carried line.
    await runCommand(s.page, 'View: Focus Problems (Errors, Warnings, Infos)');
    const isOrigin = (row) => row.error && row.text.includes('NaN Lens') && row.text.includes(`[Ln ${ORIGIN_LINE},`);
    const problems = await waitFor(
      async () => {
        const rows = await problemsRows(s.page);
        return rows.some(isOrigin) && rows;
      },
      { timeoutMs: 15000, what: `a NaN Lens error at Ln ${ORIGIN_LINE} in the Problems view` },
    );
    console.log(`# Problems rows: ${JSON.stringify(problems.map((row) => row.text))}`);
    assert.match(problems.find(isOrigin).text, /\bLog produced 1 -inf/);
    assert.ok(problems.some((row) => !row.error && row.text.includes('Mul carried') && row.text.includes(`[Ln ${CARRIED_LINE},`)));
    // One resource, the cell (shown under the notebook's name): nothing was published on the .ipynb file itself,
    // whose lines are JSON (that would be a second "analysis.ipynb" group).
    assert.equal(problems.filter((row) => /^analysis\.ipynb\n\d+$/.test(row.text)).length, 1, 'one resource group');
    assert.equal(problems.filter((row) => /\nNaN Lens\n/.test(row.text)).length, 2, 'two NaN Lens entries');
    await s.shot('problems');

    // 5. Clicking the entry goes to that cell of the notebook (the status bar counts cells from 1).
    await s.page.locator('.markers-panel .monaco-list-row', { hasText: 'Log produced 1 -inf' }).first().click();
    await waitForStatusBarItem(s.page, `Cell ${ORIGIN_CELL + 1} of ${CELLS.length}`, { timeoutMs: 15000 });
    await s.shot('problem-opened');
  });
});
