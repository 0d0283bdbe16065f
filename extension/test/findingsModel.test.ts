import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FindingsModel } from '../src/core/findingsModel';
import { readFindingsNotification } from '../src/core/protocol';
import { at, bundleSource, dumpSource, finding, MODEL, TRAIN } from './fixtures';

function modelWith(notification: unknown, platform: NodeJS.Platform = 'linux'): FindingsModel {
  const model = new FindingsModel(platform);
  model.replace(readFindingsNotification(notification));
  return model;
}

describe('FindingsModel markers', () => {
  it('marks the origin line red and the carrying lines amber, one marker per line', () => {
    const model = modelWith({ sources: [bundleSource()] });
    const markers = model.markersFor(TRAIN);
    assert.deepEqual(
      markers.map((m) => [m.line, m.style]),
      [
        [42, 'origin'],
        [43, 'propagated'],
      ],
    );
    assert.equal(at(markers, 0).afterText, '⟵ NaN origin: Log produced 561 -inf from input probs:0 which holds 561 zeros');
    assert.equal(at(markers, 1).afterText, '⟵ NaN carried: Mean carried 1 -inf');
    assert.deepEqual(model.markersFor(MODEL).map((m) => [m.line, m.style]), [[7, 'propagated']]);
    assert.deepEqual(model.markersFor('/work/proj/other.py'), []);
  });

  it('does not repeat the origin when the findings list holds it too', () => {
    const model = modelWith({ sources: [bundleSource()] });
    const origin = model.markersFor(TRAIN).find((m) => m.line === 42);
    assert.equal(origin?.others, 0);
  });

  it('paints a backward-pass origin amber and says so', () => {
    const backward = finding({
      line: 30,
      role: 'backward-origin',
      op: { name: 'gradients/SqrtGrad', type: 'SqrtGrad', forward_op: 'Sqrt' },
      message: 'SqrtGrad produced 4 +inf: the gradient of Sqrt at 0',
    });
    const model = modelWith({ sources: [bundleSource({ origin: backward, findings: [backward] })] });
    const marker = at(model.markersFor(TRAIN), 0);
    assert.equal(marker.style, 'propagated');
    assert.match(marker.afterText, /^⟵ NaN origin \(backward pass\): SqrtGrad produced 4 \+inf/);
  });

  it('greys stale findings and labels them', () => {
    const stale = finding({ line: 42, role: 'origin', stale: true });
    const model = modelWith({ sources: [bundleSource({ origin: stale, findings: [stale] })] });
    const marker = at(model.markersFor(TRAIN), 0);
    assert.equal(marker.style, 'stale');
    assert.match(marker.afterText, /^⟵ \(stale\) NaN origin: /);
  });

  it('shows the most severe current finding when several share a line, and counts the others', () => {
    const dump = dumpSource({
      origin: finding({ line: 43, role: 'origin', op: { name: 'Mean', type: 'Mean' }, message: 'Mean produced NaN' }),
      findings: [finding({ line: 42, role: 'propagated', message: 'Log carried -inf' })],
    });
    const model = modelWith({ sources: [bundleSource(), dump] });
    const byLine = new Map(model.markersFor(TRAIN).map((m) => [m.line, m]));
    assert.equal(byLine.get(42)?.finding.role, 'origin');
    assert.equal(byLine.get(42)?.others, 1);
    assert.match(byLine.get(42)?.afterText ?? '', /\(\+1 more\)$/);
    assert.equal(byLine.get(43)?.style, 'origin', 'the dump origin outranks the bundle\'s carried finding');
  });

  it('a current finding outranks a stale origin on the same line', () => {
    const staleOrigin = finding({ line: 42, role: 'origin', stale: true });
    const fresh = finding({ line: 42, role: 'propagated', message: 'Log carried -inf' });
    const model = modelWith({ sources: [bundleSource({ origin: staleOrigin, findings: [staleOrigin, fresh] })] });
    const marker = at(model.markersFor(TRAIN), 0);
    assert.equal(marker.style, 'propagated');
    assert.equal(marker.others, 1);
  });

  it('draws nothing for sources in error, and replaces everything on each notification', () => {
    const model = modelWith({ sources: [bundleSource()] });
    assert.equal(model.originCount(), 1);
    model.replace(readFindingsNotification({ sources: [bundleSource({ status: 'error', error: 'bundle is truncated' })] }));
    assert.deepEqual(model.markersFor(TRAIN), []);
    assert.equal(model.originCount(), 0);
    assert.equal(model.sources.length, 1, 'the errored source is still listed (the view shows its error)');
    model.replace(readFindingsNotification({ sources: [] }));
    assert.equal(model.sources.length, 0);
  });

  it('matches files case-insensitively on Windows and exactly on Linux', () => {
    const winFinding = finding({ file: 'C:\\proj\\train.py', line: 5, role: 'origin' });
    const notification = { sources: [bundleSource({ origin: winFinding, findings: [] })] };
    assert.equal(modelWith(notification, 'win32').markersFor('c:\\PROJ\\Train.py').length, 1);
    assert.equal(modelWith({ sources: [bundleSource()] }, 'linux').markersFor('/work/proj/TRAIN.py').length, 0);
    assert.equal(modelWith({ sources: [bundleSource()] }, 'linux').markersFor('/work/proj/./train.py').length, 2);
  });

  it('tells listeners about every change', () => {
    const model = new FindingsModel('linux');
    let calls = 0;
    const subscription = model.onDidChange(() => (calls += 1));
    model.replace([bundleSource()]);
    model.clear();
    subscription.dispose();
    model.replace([bundleSource()]);
    assert.equal(calls, 2);
  });

  it('counts origins and notices scanning sources', () => {
    const model = modelWith({
      sources: [bundleSource(), dumpSource({ status: 'scanning' }), dumpSource({ id: 'dump:2', origin: finding({ line: 9, role: 'origin' }) })],
    });
    assert.equal(model.originCount(), 2);
    assert.equal(model.isScanning(), true);
    assert.deepEqual(model.files().sort(), [MODEL, TRAIN].sort());
  });
});

describe('readFindingsNotification', () => {
  it('drops malformed sources and findings instead of throwing', () => {
    const sources = readFindingsNotification({
      sources: [
        null,
        { id: 'x' },
        {
          id: 'dump:/d',
          kind: 'dump',
          path: '/d',
          label: '',
          status: 'weird',
          origin: { file: TRAIN, line: 0, role: 'origin', op: { name: 'a', type: 'Log' } },
          findings: [
            { file: TRAIN, line: 3, role: 'propagated', op: { name: 'a', type: 'Mul' } },
            { file: TRAIN, line: 4, role: 'sideways', op: { name: 'b', type: 'Mul' } },
            { file: TRAIN, line: 5, role: 'propagated' },
          ],
        },
      ],
    });
    assert.equal(sources.length, 1);
    const source = at(sources, 0);
    assert.equal(source.label, '/d', 'an empty label falls back to the path');
    assert.equal(source.status, 'ok');
    assert.equal(source.origin, null, 'line 0 is not a source line');
    assert.deepEqual(source.findings.map((f) => f.line), [3]);
    assert.deepEqual(readFindingsNotification('garbage'), []);
    assert.deepEqual(readFindingsNotification({ sources: 'no' }), []);
  });
});

describe('FindingsModel change markers (the line a cause says to change)', () => {
  const divergence = {
    kind: 'divergence',
    summary: 'the run diverged at learning rate 0.05: the loss grew x3.1 per step for 14 steps',
    evidence: { rate_per_step: 3.1 },
    change: { file: TRAIN, line: 20, what: 'learning rate 0.05 (SGD): try 0.005, or clip the gradients' },
  };

  it('marks the optimizer line apart from the findings, with what to change after it', () => {
    const model = modelWith({ sources: [{ ...bundleSource(), cause: divergence }] });
    const changes = model.changeMarkersFor(TRAIN);
    assert.deepEqual(changes.map((m) => [m.line, m.style, m.cause.kind]), [[20, 'change', 'divergence']]);
    assert.equal(at(changes, 0).afterText, '⟵ NaN Lens: change here: learning rate 0.05 (SGD): try 0.005, or clip the gradients');
    assert.deepEqual(model.markersFor(TRAIN).map((m) => m.line), [42, 43]);
    assert.deepEqual(model.changeMarkersFor(MODEL), []);
  });

  it('draws none for an op cause, on a line a finding marks, or from a malformed cause', () => {
    const onOrigin = { ...divergence, change: { ...divergence.change, line: 42 } };
    for (const cause of [{ ...divergence, kind: 'op' }, onOrigin, { kind: 'bogus' }, { ...divergence, change: { file: TRAIN, line: 0 } }]) {
      const model = modelWith({ sources: [{ ...bundleSource(), cause }] });
      assert.deepEqual(model.changeMarkersFor(TRAIN), [], JSON.stringify(cause));
    }
  });

  it('puts a notebook cause on its cell', () => {
    const cause = { ...divergence, change: { file: '/work/proj/a.ipynb', cell: 3, line: 2, what: 'lower it' } };
    const model = modelWith({ sources: [{ ...bundleSource(), cause }] });
    assert.deepEqual(model.changeMarkersFor('/work/proj/a.ipynb', 3).map((m) => m.line), [2]);
    assert.deepEqual(model.changeMarkersFor('/work/proj/a.ipynb', 2), []);
  });
});
