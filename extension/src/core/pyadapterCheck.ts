// Can this interpreter run NaN Lens? Checked before the server starts, so a wrong environment gives one
// clear message instead of a language client crash loop.

import { execFile } from 'node:child_process';

export type PyadapterCheck =
  | { ok: true; version: string }
  | { ok: false; reason: 'not-found' | 'cannot-import' | 'timeout'; detail: string };

const PROBE = 'import pyadapter, sys; print(pyadapter.__version__)';

/** Runs `<python> -c "import pyadapter, sys; print(pyadapter.__version__)"`. Never throws. */
export function checkPyadapter(python: string, cwd?: string, timeoutMs = 30_000): Promise<PyadapterCheck> {
  return new Promise((resolve) => {
    execFile(python, ['-c', PROBE], { cwd, timeout: timeoutMs, windowsHide: true }, (error, stdout, stderr) => {
      if (!error) {
        resolve({ ok: true, version: stdout.trim() });
        return;
      }
      const err = error as NodeJS.ErrnoException & { killed?: boolean };
      if (err.code === 'ENOENT' || err.code === 'EACCES') {
        resolve({ ok: false, reason: 'not-found', detail: `${python} was not found or is not executable` });
      } else if (err.killed) {
        resolve({ ok: false, reason: 'timeout', detail: `${python} did not answer within ${timeoutMs / 1000} s` });
      } else {
        resolve({ ok: false, reason: 'cannot-import', detail: lastLine(stderr) || err.message });
      }
    });
  });
}

function lastLine(text: string): string {
  const lines = text.trim().split(/\r?\n/);
  return lines[lines.length - 1]?.trim() ?? '';
}

/** The one message a person sees when the interpreter cannot run NaN Lens, with the fix. */
export function pyadapterProblemMessage(python: string, check: Exclude<PyadapterCheck, { ok: true }>): string {
  const fix =
    'Set nanlens.python to the interpreter of the environment where you ran `pip install nanlens`, ' +
    `or install it into this one: \`${python} -m pip install nanlens\`.`;
  switch (check.reason) {
    case 'not-found':
      return `NaN Lens: the Python interpreter ${python} was not found. Set nanlens.python to the interpreter of the environment where you ran \`pip install nanlens\`.`;
    case 'timeout':
      return `NaN Lens: ${python} did not answer when asked to import pyadapter. ${fix}`;
    case 'cannot-import':
      return `NaN Lens: ${python} cannot import pyadapter. ${fix}`;
  }
}
