import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { describeInterpreter, expandPythonSetting, findInterpreter } from '../src/core/interpreter';

const never = () => Promise.reject(new Error('must not be asked'));

describe('findInterpreter', () => {
  it('uses nanlens.python first, without asking the Python extension', async () => {
    const found = await findInterpreter({ setting: '/envs/tf/bin/python', workspaceFolder: '/ws', fromPythonExtension: never });
    assert.deepEqual(found, { path: '/envs/tf/bin/python', source: 'setting' });
    assert.match(describeInterpreter(found), /nanlens\.python setting/);
  });

  it('uses the Python extension interpreter when the setting is empty', async () => {
    const found = await findInterpreter({
      setting: '  ',
      workspaceFolder: '/ws',
      fromPythonExtension: () => Promise.resolve('/ws/.venv/bin/python'),
    });
    assert.deepEqual(found, { path: '/ws/.venv/bin/python', source: 'python-extension' });
  });

  it('falls back to python3 (python on Windows) without the extension or when it fails', async () => {
    const none = () => Promise.resolve(undefined);
    assert.deepEqual(await findInterpreter({ setting: '', workspaceFolder: undefined, fromPythonExtension: none, platform: 'linux' }), {
      path: 'python3',
      source: 'default',
    });
    assert.deepEqual(
      await findInterpreter({ setting: undefined, workspaceFolder: undefined, fromPythonExtension: never, platform: 'win32' }),
      { path: 'python', source: 'default' },
    );
  });
});

describe('expandPythonSetting', () => {
  it('expands workspace, home and environment variables', () => {
    assert.equal(expandPythonSetting('${workspaceFolder}/.venv/bin/python', '/ws', '/home/u'), '/ws/.venv/bin/python');
    assert.equal(expandPythonSetting('~/envs/tf/bin/python', '/ws', '/home/u'), '/home/u/envs/tf/bin/python');
    assert.equal(expandPythonSetting('${env:CONDA}/bin/python', '/ws', '/home/u', { CONDA: '/opt/conda' }), '/opt/conda/bin/python');
  });

  it('takes a relative path from the workspace folder and leaves a bare command for PATH', () => {
    assert.equal(expandPythonSetting('.venv/bin/python', '/ws', '/home/u'), '/ws/.venv/bin/python');
    assert.equal(expandPythonSetting('python3.11', '/ws', '/home/u'), 'python3.11');
  });
});
