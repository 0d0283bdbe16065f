// paths.mjs — where the end-to-end harness finds things. Every path can be overridden by an env variable:
//   NANLENS_CACHE             cache outside the repo holding code-server (default ~/.cache/nanlens)
//   NANLENS_CODE_SERVER       the code-server binary (default: the cached install scripts/setup-e2e.sh makes)
//   NANLENS_CHROMIUM          the browser (default /usr/bin/chromium, Debian's)
//   NANLENS_E2E_VSIX          the extension under test (default dist/nanlens.vsix, built by run.mjs)
//   NANLENS_E2E_PYTHON        the interpreter the extension is told to use (default <repo>/.venv/bin/python)
//   NANLENS_E2E_ARTIFACTS     where screenshots and logs go (default <repo>/artifacts/e2e, gitignored)

import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** tests/e2e */
export const E2E_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..');
/** The repository root (computed from this file's location, so it works in any clone). */
export const REPO_DIR = resolve(E2E_DIR, '../..');

/** The code-server version: tests/e2e/code-server.version is the one place it is written (setup-e2e.sh reads it too). */
export const CODE_SERVER_VERSION =
  process.env.NANLENS_CODE_SERVER_VERSION || readFileSync(join(E2E_DIR, 'code-server.version'), 'utf8').trim();
export const CACHE_DIR = process.env.NANLENS_CACHE || join(homedir(), '.cache', 'nanlens');
export const CODE_SERVER_BIN =
  process.env.NANLENS_CODE_SERVER ||
  join(CACHE_DIR, `code-server-${CODE_SERVER_VERSION}`, 'node_modules', '.bin', 'code-server');
export const CHROMIUM_BIN = process.env.NANLENS_CHROMIUM || '/usr/bin/chromium';
export const SETUP_SCRIPT = join(REPO_DIR, 'scripts', 'setup-e2e.sh');

export const VSIX_PATH = process.env.NANLENS_E2E_VSIX || join(REPO_DIR, 'dist', 'nanlens.vsix');
export const VENV_PYTHON = process.env.NANLENS_E2E_PYTHON || join(REPO_DIR, '.venv', 'bin', 'python');
export const ARTIFACTS_DIR = process.env.NANLENS_E2E_ARTIFACTS || join(REPO_DIR, 'artifacts', 'e2e');
export const DEMO_DIR = join(REPO_DIR, 'demo');

/** True when the tools the harness drives are installed (else run scripts/setup-e2e.sh). */
export function toolsInstalled() {
  return existsSync(CODE_SERVER_BIN) && existsSync(CHROMIUM_BIN);
}
