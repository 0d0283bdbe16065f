// Issue 8: the op graph and health timeline webviews in a real VS Code (code-server) and Chromium.
// The demo runs under NanGuard in a fresh workspace; NaN Lens's server locates its capture bundle by itself.
// Then: the origin line's hover links to the health timeline, which marks where the non-finite values begin and
// shows the loss history up to the failing step; its CodeLens "Show op graph" opens a webview with the origin
// Log in red, fed by the softmax that holds the zeros; clicking the Log box opens its line in the editor; the
// Captures and Dumps view's inline action opens the timeline too. Screenshots: artifacts/e2e/pictures/.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, test } from 'node:test';
import { promisify } from 'node:util';
import { DEMO_DIR, VENV_PYTHON } from './lib/paths.mjs';
import { removeOnExit, waitFor } from './lib/procs.mjs';
import { withSession } from './lib/session.mjs';
import { clickCodeLens, codeLenses, cursorPosition, hoverLine, openFile, runCommand } from './lib/workbench.mjs';

const execFileAsync = promisify(execFile);
const LOCATE_TIMEOUT_MS = 120000;
const RED = 'rgb(211, 47, 47)';
const GREEN = 'rgb(46, 125, 50)';

let workspace;
let step;
let originLine;

function bundlesIn(dir) {
  return readdirSync(dir)
    .map((name) => join(dir, name))
    .filter((path) => {
      try {
        return JSON.parse(readFileSync(join(path, 'manifest.json'), 'utf8')).format === 'nanlens.bundle/1';
      } catch {
        return false;
      }
    });
}

before(async () => {
  workspace = realpathSync(mkdtempSync(join(tmpdir(), 'nanlens-e2e-pictures-')));
  removeOnExit(workspace);
  copyFileSync(join(DEMO_DIR, 'train.py'), join(workspace, 'train.py'));
  const captures = join(workspace, 'captures');
  mkdirSync(captures);
  const run = await execFileAsync(VENV_PYTHON, ['train.py'], {
    cwd: workspace,
    env: { ...process.env, NANLENS_CAPTURE_DIR: captures, TF_CPP_MIN_LOG_LEVEL: '2' },
    timeout: 180000,
    maxBuffer: 16 * 1024 * 1024,
  }).catch((error) => error);
  const found = bundlesIn(captures);
  assert.equal(found.length, 1, `the demo left one capture bundle:\n${`${run.stdout ?? ''}${run.stderr ?? ''}`.slice(-2000)}`);
  step = JSON.parse(readFileSync(join(found[0], 'manifest.json'), 'utf8')).step;
  const lines = readFileSync(join(workspace, 'train.py'), 'utf8').split('\n');
  originLine = lines.findIndex((line) => line.includes('tf.math.log(probs)')) + 1;
  assert.ok(originLine > 0);
});

/** The webview frame (VS Code nests it in two iframes) whose document matches `selector`, once it does. */
async function webviewFrame(page, selector, what, timeoutMs = 60000) {
  return waitFor(
    async () => {
      for (const frame of page.frames()) {
        if (await frame.locator(selector).count().catch(() => 0)) return frame;
      }
      return null;
    },
    { timeoutMs, intervalMs: 500, what },
  );
}

async function checkTimeline(frame) {
  const chart = await frame.locator('.nl-timeline-chart').evaluate((el) => ({ ...el.dataset }));
  assert.ok(chart.originX !== undefined && chart.originX === chart.firstNonfiniteX, JSON.stringify(chart));
  assert.match(await frame.locator('.nl-timeline-caption').innerText(), /non-finite values begin at .* where the origin Log/);
  assert.equal(await frame.locator('.nl-loss-chart').getAttribute('data-failing-step'), String(step));
}

test('the op graph and health timeline webviews draw the demo bundle', { timeout: 420000 }, async () => {
  await withSession({ name: 'pictures', folder: workspace, timeoutMs: 360000 }, async (s) => {
    // The cursor starts on line 1 (the origin line, further down, is still in view), so that step 3 can see the
    // click on the Log move it.
    await openFile(s.page, 'train.py', { line: 1 });

    // 1. Once the bundle is located, the origin line offers "Show op graph" and "Health timeline" lenses.
    const lenses = await waitFor(
      async () => {
        const shown = await codeLenses(s.page);
        return shown.some((lens) => lens.title.includes('Show op graph')) && shown;
      },
      { timeoutMs: LOCATE_TIMEOUT_MS, intervalMs: 1000, what: 'the CodeLens "Show op graph"' },
    );
    const graphLens = lenses.find((lens) => lens.title.includes('Show op graph'));
    assert.equal(graphLens.line, originLine, 'the lens stands above the origin line');
    assert.ok(lenses.some((lens) => lens.title.includes('Health timeline') && lens.line === originLine));
    await s.shot('lenses');

    // 2. The hover of the origin line links to both views; its "Health timeline" link opens the timeline.
    const hover = await hoverLine(s.page, originLine, { timeoutMs: 15000 });
    assert.match(hover, /Show op graph/);
    await s.page.locator('.monaco-hover a', { hasText: 'Health timeline' }).first().click();
    await checkTimeline(await webviewFrame(s.page, '.nl-timeline-chart canvas', 'the health timeline webview'));
    await s.shot('timeline-from-hover');

    // 3. The op graph webview from the lens: the Log in red and highlighted, its softmax input (finite, holding
    // zeros) above it.
    await runCommand(s.page, 'View: Focus First Editor Group'); // back to train.py (the timeline has the focus)
    await clickCodeLens(s.page, 'Show op graph');
    const graph = await webviewFrame(s.page, 'svg.nl-graph .nl-node', 'the op graph webview');
    const nodes = await graph.locator('svg.nl-graph .nl-node').evaluateAll((elements) =>
      elements.map((g) => ({
        id: g.dataset.id,
        type: g.dataset.type,
        health: g.dataset.health,
        role: g.dataset.role,
        label: g.getAttribute('aria-label'),
        fill: getComputedStyle(g.querySelector('.nl-node-box')).fill,
        ring: Boolean(g.querySelector('.nl-origin-ring')),
        top: g.getBoundingClientRect().top,
      })),
    );
    const origin = nodes.find((n) => n.role === 'origin');
    assert.ok(origin, `an origin node among ${nodes.map((n) => n.type)}`);
    assert.equal(origin.type, 'Log');
    assert.equal(origin.health, 'neg_inf');
    assert.equal(origin.fill, RED);
    assert.ok(origin.ring, 'the origin is highlighted');
    const softmax = nodes.find((n) => n.type === 'Softmax');
    assert.ok(softmax && softmax.health === 'finite' && softmax.fill === GREEN, JSON.stringify(softmax));
    assert.match(softmax.label, /zeros/);
    assert.ok(softmax.top < origin.top, 'the input is drawn above the origin');
    assert.equal(await graph.locator(`path.nl-edge[data-source="${softmax.id}"][data-target="${origin.id}"]`).count(), 1);
    await s.shot('op-graph');

    // Clicking the Log box opens its line in the editor.
    await graph.locator(`.nl-node[data-id="${origin.id}"]`).click();
    await waitFor(async () => (await cursorPosition(s.page))?.line === originLine, {
      timeoutMs: 15000,
      what: `the editor at line ${originLine} after clicking the Log`,
    });

    // 4. The Captures and Dumps view's inline action opens the timeline again after its tab was closed.
    await s.page.locator('.tab', { hasText: 'Health Timeline' }).first().locator('.codicon-close').click();
    await waitFor(
      async () => {
        for (const frame of s.page.frames()) {
          if (await frame.locator('.nl-timeline-chart').count().catch(() => 0)) return false;
        }
        return true;
      },
      { timeoutMs: 15000, what: 'the timeline tab to close' },
    );
    await runCommand(s.page, 'NaN Lens: Focus on Captures and Dumps View');
    const row = s.page.locator('.monaco-list-row', { hasText: `(step ${step})` }).first();
    await row.waitFor({ state: 'visible', timeout: 15000 });
    await row.hover();
    await row.locator('.action-label[aria-label="Show Health Timeline"]').click();
    await checkTimeline(await webviewFrame(s.page, '.nl-timeline-chart canvas', 'the health timeline webview'));
    await s.shot('timeline');
  });
});
