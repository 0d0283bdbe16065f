import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { readEagerRunTarget, readReplayTarget } from '../src/core/protocol';
import { sourceRows } from '../src/core/sourceTree';
import { at, bundleSource, dumpSource, finding } from './fixtures';

describe('sourceRows', () => {
  it('lists a located bundle with its origin first, replayable from the view', () => {
    const row = at(sourceRows([bundleSource()]), 0);
    assert.equal(row.label, 'run-step12 (step 12)');
    assert.equal(row.description, 'origin: Log at train.py:42');
    assert.equal(row.contextValue, 'nanlens.bundle.origin');
    assert.deepEqual(row.replayTarget, { bundle: '/work/proj/captures/run-step12', file: '/work/proj/train.py', line: 42, step: 12 });
    assert.deepEqual(
      row.children.map((c) => [c.label, c.description, c.icon]),
      [
        ['Log — train.py:42', 'NaN origin', 'error'],
        ['Mean — train.py:43', 'NaN carried', 'warning'],
        ['MatMul — model.py:7', 'NaN carried', 'warning'],
      ],
    );
    assert.deepEqual([at(row.children, 2).file, at(row.children, 2).line], ['/work/proj/model.py', 7]);
  });

  it('offers no replay for dumps, unlocated bundles or errors, and shows the error', () => {
    const rows = sourceRows([
      dumpSource({ origin: finding({ line: 3, role: 'origin' }) }),
      bundleSource({ origin: null, findings: [] }),
      bundleSource({ id: 'b2', status: 'error', error: 'bundle.json is missing' }),
      bundleSource({ id: 'b3', status: 'scanning', origin: null, findings: [] }),
    ]);
    assert.deepEqual(
      rows.map((r) => [r.contextValue, r.replayTarget === undefined, r.description]),
      [
        ['nanlens.dump', true, 'origin: Log at train.py:3'],
        ['nanlens.bundle', true, 'finite: no NaN/Inf found'],
        ['nanlens.bundle', true, 'bundle.json is missing'],
        ['nanlens.bundle', true, 'scanning…'],
      ],
    );
    assert.equal(at(rows, 2).children.length, 0);
    assert.equal(at(rows, 3).icon, 'loading~spin');
  });

  it('marks stale findings in the view too', () => {
    const stale = finding({ line: 42, role: 'origin', stale: true });
    const row = at(sourceRows([bundleSource({ origin: stale, findings: [stale] })]), 0);
    assert.equal(at(row.children, 0).description, 'NaN origin (stale)');
    assert.equal(at(row.children, 0).iconColor, 'disabled');
    assert.match(at(row.children, 0).tooltip, /file changed since this run/);
  });
});

describe('command arguments', () => {
  it('reads a ReplayTarget from the CodeLens JSON and from a view row', () => {
    const lens = { bundle: '/b', file: '/f.py', line: 42, step: 12 };
    assert.deepEqual(readReplayTarget(lens), lens);
    const row = at(sourceRows([bundleSource()]), 0);
    assert.equal(readReplayTarget(row)?.line, 42);
    assert.equal(readReplayTarget({ bundle: '/b', file: '/f.py', line: 0 }), undefined);
    assert.equal(readReplayTarget(undefined), undefined);
    assert.deepEqual(readReplayTarget({ bundle: '/b', file: '/f.py', line: 3 }), { bundle: '/b', file: '/f.py', line: 3, step: null });
  });

  it('reads the debugEagerly argument of dump CodeLenses', () => {
    assert.deepEqual(readEagerRunTarget({ script: '/ws/train.py', file: '/ws/model.py', line: 7 }), {
      script: '/ws/train.py',
      file: '/ws/model.py',
      line: 7,
    });
    assert.deepEqual(readEagerRunTarget({ script: '/ws/train.py' }), { script: '/ws/train.py' });
    assert.equal(readEagerRunTarget({ fsPath: '/x' }), undefined);
  });
});
