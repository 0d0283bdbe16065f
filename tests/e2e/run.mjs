#!/usr/bin/env node
// run.mjs — `npm run test:e2e`: the end-to-end suite in a real VS Code (code-server) and Chromium.
//   1. scripts/setup-e2e.sh  (Chromium + code-server into ~/.cache/nanlens; about a second when installed)
//   2. `npm run build && npm run package` when dist/nanlens.vsix is missing or older than its sources
//   3. node --test on tests/e2e/*.test.mjs, one file at a time (each starts its own code-server)
// Extra arguments go to `node --test` (e.g. `npm run test:e2e -- --test-name-pattern=activation`), except test
// files: `npm run test:e2e -- tests/e2e/notebook.test.mjs` runs that file alone (any number of them).
// Env: NANLENS_E2E_SKIP_SETUP=1 skips step 1; NANLENS_E2E_VSIX=<file> tests that package and skips step 2;
// NANLENS_E2E_TIMEOUT_S bounds the whole test step (default 1500 s); see lib/paths.mjs for paths.
// Screenshots and logs: artifacts/e2e/<test>/.

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, relative, resolve } from 'node:path';
import { ARTIFACTS_DIR, E2E_DIR, REPO_DIR, SETUP_SCRIPT, VENV_PYTHON, VSIX_PATH } from './lib/paths.mjs';

function fail(message) {
  console.error(`test:e2e: error: ${message}`);
  process.exit(1);
}

function run(command, args, what) {
  console.log(`test:e2e: ${what}: ${command} ${args.join(' ')}`);
  const result = spawnSync(command, args, { cwd: REPO_DIR, stdio: ['ignore', 'inherit', 'inherit'] });
  if (result.status !== 0) fail(`${what} failed (${result.error?.message ?? `exit ${result.status}`})`);
}

/** Newest modification time under the given repo paths (files or folders), skipping extension tests. */
function newestMtime(paths) {
  let newest = 0;
  const visit = (path) => {
    if (!existsSync(path)) return;
    const stat = statSync(path);
    if (stat.isDirectory()) {
      if (path === join(REPO_DIR, 'extension', 'test')) return;
      for (const name of readdirSync(path)) visit(join(path, name));
    } else {
      newest = Math.max(newest, stat.mtimeMs);
    }
  };
  for (const path of paths) visit(join(REPO_DIR, path));
  return newest;
}

// 1. tools
if (process.env.NANLENS_E2E_SKIP_SETUP !== '1') run('bash', [SETUP_SCRIPT], 'setup');

// 2. the extension package
if (!process.env.NANLENS_E2E_VSIX) {
  const sources = ['extension', 'package.json', 'media', 'README.md', 'CHANGELOG.md', 'LICENSE', '.vscodeignore'];
  const built = existsSync(VSIX_PATH) ? statSync(VSIX_PATH).mtimeMs : 0;
  const newestSource = newestMtime(sources);
  if (built < newestSource) {
    if (!existsSync(join(REPO_DIR, 'node_modules', '.bin', 'vsce'))) fail('node_modules is not installed: run `npm ci` first');
    console.log(`test:e2e: ${existsSync(VSIX_PATH) ? 'sources changed since' : 'no'} ${relative(REPO_DIR, VSIX_PATH)}: building it`);
    run('npm', ['run', 'build'], 'build');
    run('npm', ['run', 'package'], 'package');
  } else {
    console.log(`test:e2e: ${relative(REPO_DIR, VSIX_PATH)} is up to date`);
  }
}
if (!existsSync(VSIX_PATH)) fail(`no extension package at ${VSIX_PATH}`);
if (!existsSync(VENV_PYTHON)) fail(`no Python at ${VENV_PYTHON} (create the repo's .venv, or set NANLENS_E2E_PYTHON)`);

// 3. the tests: the files named on the command line, else every tests/e2e/*.test.mjs
const extraArgs = process.argv.slice(2).filter((arg) => !arg.endsWith('.test.mjs'));
const picked = process.argv.slice(2).filter((arg) => arg.endsWith('.test.mjs')).map((arg) => resolve(REPO_DIR, arg));
for (const file of picked) if (!existsSync(file)) fail(`no test file ${file}`);
const testFiles = picked.length
  ? picked
  : readdirSync(E2E_DIR)
      .filter((name) => name.endsWith('.test.mjs'))
      .sort()
      .map((name) => join(E2E_DIR, name));
if (!testFiles.length) fail(`no *.test.mjs in ${E2E_DIR}`);
// --test-force-exit: a test file whose test timed out still exits (its exit handler kills its code-server).
const args = ['--test', '--test-reporter=spec', '--test-concurrency=1', '--test-timeout=600000', '--test-force-exit',
  ...extraArgs, ...testFiles];
console.log(`test:e2e: node ${args.map((arg) => relative(REPO_DIR, arg) || arg).join(' ')}`);
console.log(`test:e2e: screenshots and logs go to ${relative(REPO_DIR, ARTIFACTS_DIR)}/`);

const child = spawn(process.execPath, args, { cwd: REPO_DIR, stdio: 'inherit', detached: true });
const limitS = Number(process.env.NANLENS_E2E_TIMEOUT_S || 1500);
const killGroup = (signal) => {
  try {
    process.kill(-child.pid, signal);
  } catch {
    // already gone
  }
};
// The test processes kill their code-servers on SIGTERM (lib/procs.mjs); SIGKILL only if they hang.
const watchdog = setTimeout(() => {
  console.error(`test:e2e: error: the suite ran over ${limitS} s; stopping it`);
  killGroup('SIGTERM');
  setTimeout(() => killGroup('SIGKILL'), 10000).unref();
}, limitS * 1000);
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => killGroup(signal));
child.on('exit', (code, signal) => {
  clearTimeout(watchdog);
  process.exit(code ?? (signal ? 1 : 0));
});
