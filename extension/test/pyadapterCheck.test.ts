// Runs real interpreters: the repository's .venv (where pyadapter is installed) and that same Python with
// site-packages switched off (where it is not).
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';
import { checkPyadapter, pyadapterProblemMessage } from '../src/core/pyadapterCheck';

const repo = path.resolve(__dirname, '..', '..');
const venvPython = path.join(repo, '.venv', 'bin', 'python');
const hasVenv = process.platform !== 'win32' && fs.existsSync(venvPython);

function projectVersion(): string {
  const pyproject = fs.readFileSync(path.join(repo, 'pyproject.toml'), 'utf8');
  const match = /^version\s*=\s*"([^"]+)"/m.exec(pyproject);
  assert.ok(match?.[1], 'pyproject.toml has a version');
  return match[1];
}

describe('checkPyadapter', { skip: hasVenv ? false : 'needs the repository .venv' }, () => {
  it('accepts the environment where nanlens is installed and reports its version', async () => {
    const check = await checkPyadapter(venvPython, os.tmpdir());
    assert.deepEqual(check, { ok: true, version: projectVersion() });
  });

  it('rejects an interpreter that cannot import pyadapter, with the fix in the message', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'nanlens-python-'));
    const bare = path.join(dir, 'python');
    // -I -S: no site-packages, no cwd on sys.path: a real Python without the package.
    fs.writeFileSync(bare, `#!/bin/sh\nexec "${venvPython}" -I -S "$@"\n`, { mode: 0o755 });
    try {
      const check = await checkPyadapter(bare, dir);
      if (check.ok) {
        assert.fail(`pyadapter imported from ${bare}`);
      }
      assert.equal(check.reason, 'cannot-import');
      assert.match(check.detail, /No module named 'pyadapter'/);
      const message = pyadapterProblemMessage(bare, check);
      assert.match(message, /^NaN Lens: .* cannot import pyadapter\. Set nanlens\.python .*`pip install nanlens`/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('says when the interpreter does not exist', async () => {
    const check = await checkPyadapter('/no/such/python3');
    assert.ok(!check.ok && check.reason === 'not-found');
    assert.match(pyadapterProblemMessage('/no/such/python3', check), /was not found/);
  });
});
