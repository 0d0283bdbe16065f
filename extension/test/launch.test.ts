import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  adapterPython,
  dumpFolderName,
  eagerRunLaunchConfig,
  hasBreakpointAt,
  newDumpDir,
  replayLaunchConfig,
  resolveLaunchConfig,
  runWithDumpArgs,
  bundleUrlProblem,
  pullArgs,
  pulledBundlePath,
  type LaunchConfig,
} from '../src/core/launch';

const ctx = { python: '/envs/tf/bin/python', workspaceFolder: '/ws', justMyCode: false };

function resolved(config: LaunchConfig): LaunchConfig {
  const out = resolveLaunchConfig(config, ctx);
  if ('error' in out) {
    assert.fail(out.error);
  }
  return out.config;
}

describe('resolveLaunchConfig', () => {
  it('runs a program through `pyadapter run --eager --no-dump --` by default, keeping its arguments', () => {
    const config = resolved({ type: 'nanlens', request: 'launch', name: 'x', program: '/ws/train.py', args: ['--epochs', '3'] });
    assert.equal(config.program, undefined);
    assert.equal(config.module, 'pyadapter');
    assert.deepEqual(config.args, ['run', '--eager', '--no-dump', '--', '/ws/train.py', '--epochs', '3']);
    assert.equal(config.type, 'nanlens');
    assert.deepEqual(config.python, ['/envs/tf/bin/python']);
    assert.equal(config.cwd, '/ws');
    assert.equal(config.justMyCode, false);
    assert.equal(config.console, 'integratedTerminal');
  });

  it('runs the program as is with eager: false', () => {
    const config = resolved({ type: 'nanlens', request: 'launch', name: 'x', program: '/ws/train.py', eager: false });
    assert.equal(config.program, '/ws/train.py');
    assert.equal(config.module, undefined);
    assert.deepEqual(config.args, []);
  });

  it('keeps a module launch and the user\'s own interpreter, cwd and justMyCode', () => {
    const config = resolved({
      type: 'nanlens',
      request: 'launch',
      name: 'replay',
      module: 'pyadapter',
      args: ['replay', '/ws/captures/b', '--eager'],
      python: '/other/python',
      cwd: '/elsewhere',
      justMyCode: true,
    });
    assert.deepEqual(config.args, ['replay', '/ws/captures/b', '--eager']);
    assert.deepEqual(config.python, ['/other/python']);
    assert.equal(adapterPython(config, ctx.python), '/other/python');
    assert.equal(config.cwd, '/elsewhere');
    assert.equal(config.justMyCode, true);
  });

  it('uses the program folder as cwd when there is no workspace', () => {
    const out = resolveLaunchConfig(
      { type: 'nanlens', request: 'launch', name: 'x', program: '/tmp/a/train.py' },
      { python: 'python3', justMyCode: false },
    );
    assert.ok(!('error' in out) && out.config.cwd === '/tmp/a');
  });

  it('explains what is wrong with a configuration it cannot run', () => {
    const cases: [LaunchConfig, RegExp][] = [
      [{ type: 'nanlens', request: 'attach', name: 'a' }, /"launch" only/],
      [{ type: 'nanlens', request: 'launch', name: 'b' }, /needs "program".*or "module"/],
      [{ type: 'nanlens', request: 'launch', name: 'c', program: 'x.py', module: 'm' }, /both "program" and "module"/],
      [{ type: 'nanlens', request: 'launch', name: 'd', program: 'x.py', args: 'a b' as unknown as string[] }, /list of strings/],
    ];
    for (const [config, message] of cases) {
      const out = resolveLaunchConfig(config, ctx);
      assert.ok('error' in out, config.name);
      assert.match(out.error, message);
    }
  });
});

describe('replay and run configurations', () => {
  it('replays a bundle eagerly exactly as docs/protocol.md says', () => {
    const config = replayLaunchConfig({ bundle: '/ws/captures/run-step12', file: '/ws/train.py', line: 42, step: 12 }, '/ws');
    assert.deepEqual(config, {
      type: 'nanlens',
      request: 'launch',
      name: 'NaN Lens: replay step 12 eagerly',
      module: 'pyadapter',
      args: ['replay', '/ws/captures/run-step12', '--eager'],
      cwd: '/ws',
      justMyCode: false,
    });
    assert.equal(resolved(config).module, 'pyadapter', 'stays a module launch after resolution');
  });

  it('passes the programs the user agreed to run as --trust-entry', () => {
    const target = { bundle: '/ws/captures/run-step12', file: '/ws/train.py', line: 42, step: 12 };
    assert.deepEqual(replayLaunchConfig(target, '/ws', false, ['/ws/train.py', '/lib/my model.py']).args, [
      'replay',
      '/ws/captures/run-step12',
      '--eager',
      '--trust-entry',
      '/ws/train.py',
      '--trust-entry',
      '/lib/my model.py',
    ]);
  });

  it('runs the current file eagerly through the same resolution', () => {
    const config = resolved(eagerRunLaunchConfig('/ws/train.py', '/ws'));
    assert.equal(config.name, 'NaN Lens: run train.py eagerly');
    assert.deepEqual(config.args, ['run', '--eager', '--no-dump', '--', '/ws/train.py']);
  });

  it('writes dumps into a new, sortable folder under the first watched dump folder', () => {
    const date = new Date(2025, 0, 31, 14, 5, 9);
    assert.equal(dumpFolderName(date), '20250131-140509');
    assert.equal(newDumpDir('/ws', ['.nanlens/dumps', 'other'], date), '/ws/.nanlens/dumps/20250131-140509');
    assert.equal(newDumpDir('/ws', [], date), '/ws/.nanlens/dumps/20250131-140509');
    assert.equal(newDumpDir('/ws', ['/data/dumps'], date), '/data/dumps/20250131-140509');
    assert.deepEqual(runWithDumpArgs('/ws/train.py', '/ws/.nanlens/dumps/x'), [
      '-m',
      'pyadapter',
      'run',
      '--dump',
      '/ws/.nanlens/dumps/x',
      '--',
      '/ws/train.py',
    ]);
  });

  it('finds an existing breakpoint on the same line only', () => {
    const breakpoints = [{ file: '/ws/train.py', line: 42 }];
    assert.equal(hasBreakpointAt(breakpoints, '/ws/train.py', 42), true);
    assert.equal(hasBreakpointAt(breakpoints, '/ws/train.py', 43), false);
    assert.equal(hasBreakpointAt(breakpoints, '/ws/model.py', 42), false);
  });

  it('pulls a bundle URL into the captures folder without a progress bar (the notification shows progress)', () => {
    assert.deepEqual(pullArgs('gs://b/run/captures/t-step7', '.nanlens/captures'), [
      '-m',
      'pyadapter',
      'pull',
      'gs://b/run/captures/t-step7',
      '.nanlens/captures',
      '--no-progress',
    ]);
  });

  it('asks for a URL with a folder, takes any other text as a path', () => {
    assert.match(bundleUrlProblem('  ') ?? '', /URL of a capture bundle/);
    assert.match(bundleUrlProblem('gs://') ?? '', /after the scheme/);
    assert.equal(bundleUrlProblem('gs://bucket/captures/train-step4711'), undefined);
    assert.equal(bundleUrlProblem('/mnt/cluster/captures/train-step4711'), undefined);
  });

  it("reads the pulled bundle's local folder from nanlens pull's report", () => {
    const out = 'pulled gs://b/x into y/train-step7 into .nanlens/captures/train-step7-1\nnext: nanlens locate ...\n';
    assert.equal(pulledBundlePath(out, '/ws'), '/ws/.nanlens/captures/train-step7-1');
    assert.equal(pulledBundlePath('nothing here', '/ws'), undefined);
  });
});
