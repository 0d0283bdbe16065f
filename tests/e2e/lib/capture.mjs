// capture.mjs — a workspace holding a real capture bundle: demo/train.py copied into a temporary folder and run
// under NanGuard (real TensorFlow), which stops it at the step whose loss went NaN and writes the bundle to
// <workspace>/captures/.
//
//   const { workspace, bundle, step } = await captureDemoWorkspace('quickfix');   // ~20-60 s
//   lineOf(join(workspace, 'train.py'), '# BUG')                                   // 1-based line of a mark
//
// The folder is removed when the process exits (and by dispose(), unless NANLENS_E2E_KEEP is set).

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DEMO_DIR, VENV_PYTHON } from './paths.mjs';
import { removeOnExit, waitFor } from './procs.mjs';
import { gutterDecorations } from './workbench.mjs';

const execFileAsync = promisify(execFile);

/** The 1-based line of the first line of `file` containing `mark`. */
export function lineOf(file, mark) {
  const index = readFileSync(file, 'utf8').split('\n').findIndex((text) => text.includes(mark));
  assert.ok(index >= 0, `${file} has no line with "${mark}"`);
  return index + 1;
}

/** Capture bundles (folders whose manifest.json says nanlens.bundle/1) directly under dir. */
export function bundlesIn(dir) {
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

/**
 * Copy the demo into a fresh workspace, run it under NanGuard, and return the workspace and its one bundle.
 * `env`: extra environment of the training run (e.g. NANLENS_LOCATE_AT_SCENE: '0' for a bundle without findings).
 */
export async function captureDemoWorkspace(name, { env = {} } = {}) {
  // realpath: the server reports files by their real path, the editor opens the folder by this one.
  const workspace = realpathSync(mkdtempSync(join(tmpdir(), `nanlens-e2e-${name}-`)));
  removeOnExit(workspace);
  copyFileSync(join(DEMO_DIR, 'train.py'), join(workspace, 'train.py'));
  const captures = join(workspace, 'captures');
  mkdirSync(captures);
  // The demo exits 1 when its loss went NaN (that is the point); NanGuard stops it at the failing step.
  const started = Date.now();
  const run = await execFileAsync(VENV_PYTHON, ['train.py'], {
    cwd: workspace,
    env: { ...process.env, NANLENS_CAPTURE_DIR: captures, TF_CPP_MIN_LOG_LEVEL: '2', ...env },
    timeout: 180000,
    maxBuffer: 16 * 1024 * 1024,
  }).catch((error) => error);
  const output = `${run.stdout ?? ''}${run.stderr ?? ''}`;
  const found = bundlesIn(captures);
  assert.equal(found.length, 1, `the demo under NanGuard left one capture bundle in ${captures}:\n${output.slice(-3000)}`);
  const bundle = found[0];
  const step = JSON.parse(readFileSync(join(bundle, 'manifest.json'), 'utf8')).step;
  assert.ok(Number.isInteger(step), `the bundle's manifest names its step (got ${step})`);
  console.log(`# capture bundle ${bundle} (step ${step}) written in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return {
    workspace,
    bundle,
    step,
    dispose() {
      if (!process.env.NANLENS_E2E_KEEP) rmSync(workspace, { recursive: true, force: true });
    },
  };
}

/** How long the server may take to find and locate a bundle (about 10-20 s idle; this box is often loaded). */
export const LOCATE_TIMEOUT_MS = 90000;

/** Wait until the language server has located `bundle` and the editor shows a gutter marker on `line`. */
export async function waitForLocatedMarker(page, line, bundle) {
  await waitFor(async () => (await gutterDecorations(page, { line })).length > 0, {
    timeoutMs: LOCATE_TIMEOUT_MS,
    intervalMs: 500,
    what: `a gutter marker on train.py:${line} (the server locating ${bundle})`,
  });
}
