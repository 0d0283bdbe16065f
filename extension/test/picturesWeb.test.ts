// The pure parts of the pictures web bundle (extension/webview/core): reading the model, the dagre layout,
// the chart series and captions.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { layoutGraph, nodeLines, type Dagre } from '../webview/core/layout';
import { readPictureModel, type PictureModel } from '../webview/core/model';
import { HEALTH_COLORS, isNonFinite, nodeClasses, nonFiniteShare } from '../webview/core/palette';
import { shortOpName } from '../webview/core/text';
import { lossCaption, lossSeries, timelineCaption, timelineSeries } from '../webview/core/timelineSeries';

/** Shaped like pyadapter.pictures for the demo: Softmax (finite, with zeros) -> Log (origin, -inf) -> Mul. */
function demoJson(): Record<string, unknown> {
  return {
    schema: 'nanlens.pictures/1',
    source: { kind: 'bundle', path: '/w/captures/run-step2', label: 'run-step2 (step 2)' },
    origin: { file: '/w/train.py', line: 35, role: 'origin', op: { name: 'loss/Log', type: 'Log' }, message: 'Log produced 3 -inf' },
    graph_name: 'train_step',
    truncated: false,
    nodes: [
      { id: 'n0', name: 'loss/Log', type: 'Log', role: 'origin', distance: 0, health_class: 'neg_inf', partial: true,
        summary: '3 -inf of 640 (partly)', health: { size: 640, neg_inf: 3, nan: 0, pos_inf: 0 }, traced: true,
        gradient: false, file: '/w/train.py', line: 35 },
      { id: 'n1', name: 'model/softmax/Softmax', type: 'Softmax', role: 'input', distance: -1, health_class: 'finite',
        partial: false, summary: 'finite, 3 zeros of 640', health: { size: 640, zero: 3 }, traced: true, gradient: false,
        file: '/w/train.py', line: 50 },
      { id: 'n2', name: 'loss/mul', type: 'Mul', role: 'consumer', distance: 1, health_class: 'nan', partial: true,
        summary: '3 NaN of 640 (partly)', health: { size: 640, nan: 3 }, traced: true, gradient: false },
      { id: 'n3', name: 'gradient_tape/loss/mul/Mul', type: 'Mul', role: 'consumer', distance: 1, health_class: 'pos_inf',
        partial: true, summary: '3 +inf of 640', traced: true, gradient: true },
      { name: 'no id' },
    ],
    edges: [
      { source: 'n1', target: 'n0', tensor: 'model/softmax/Softmax:0', kind: 'data', health_class: 'finite' },
      { source: 'n0', target: 'n2', tensor: 'loss/Log:0', kind: 'data', health_class: 'neg_inf' },
      { source: 'n0', target: 'n3', tensor: 'loss/Log:0', kind: 'data', health_class: 'neg_inf' },
      { source: 'n2', target: 'n3', tensor: '', kind: 'gradient', health_class: 'unknown' },
      { source: 'n9', target: 'n0', tensor: 'x:0', kind: 'data', health_class: 'finite' },
    ],
    timeline: {
      unit: 'trace',
      points: [0, 0, 1, 1, 1].map((bad, i, all) => ({
        x: i, end: i, tensors: 1, non_finite: bad, cumulative: all.slice(0, i + 1).reduce((a, b) => a + b, 0),
        label: `op${i}:0 (T)`,
      })),
      origin_x: 2, first_nonfinite_x: 2, executions: 1, traces: 5, binned: false, note: null,
    },
    loss_history: [
      { step: 1, loss: 2.95, logged_loss: 4.8 },
      { step: 0, loss: 6.7, logged_loss: 6.7 },
      { step: 2, loss: null, logged_loss: null },
    ],
    failing_step: 2,
    notes: [],
  };
}

function demo(): PictureModel {
  const model = readPictureModel(demoJson());
  assert.ok(model);
  return model;
}

describe('readPictureModel', () => {
  it('keeps well-formed nodes and edges and drops the rest', () => {
    const model = demo();
    assert.deepEqual(model.nodes.map((n) => n.id), ['n0', 'n1', 'n2', 'n3']);
    assert.equal(model.edges.length, 4, 'the edge from an unknown node is dropped');
    assert.deepEqual(model.loss_history?.map((r) => r.step), [0, 1, 2]);
    assert.equal(model.failing_step, 2);
    assert.equal(model.origin?.op.type, 'Log');
  });

  it('rejects other documents', () => {
    assert.equal(readPictureModel({ schema: 'nanlens.findings/1' }), undefined);
    assert.equal(readPictureModel(null), undefined);
  });
});

/** dagre is an ES module; these tests are CommonJS. */
async function loadDagre(): Promise<Dagre> {
  return (await import('@dagrejs/dagre')).default;
}

describe('layoutGraph', () => {
  it('puts inputs above the origin and consumers below it, without overlaps', async () => {
    const layout = layoutGraph(demo(), await loadDagre());
    const y = (id: string) => layout.nodes.find((n) => n.node.id === id)?.y ?? NaN;
    assert.ok(y('n1') < y('n0') && y('n0') < y('n2'), `softmax ${y('n1')}, log ${y('n0')}, mul ${y('n2')}`);
    for (const a of layout.nodes) {
      for (const b of layout.nodes) {
        if (a !== b) {
          const apart = Math.abs(a.x - b.x) >= (a.width + b.width) / 2 || Math.abs(a.y - b.y) >= (a.height + b.height) / 2;
          assert.ok(apart, `${a.node.id} and ${b.node.id} overlap`);
        }
      }
    }
    assert.ok(layout.width > 0 && layout.height > 0);
    for (const edge of layout.edges) {
      assert.ok(edge.points.length >= 2, 'every edge has a route');
    }
  });

  it('labels a node with its type, short name and health', () => {
    assert.deepEqual(nodeLines(demo().nodes[1] ?? assert.fail()), ['Softmax', 'model/softmax/Softmax', 'finite, 3 zeros of 640']);
    assert.equal(shortOpName('a/very/long/scope/name/of/some/op/ReadVariableOp', 24), '…/some/op/ReadVariableOp');
    assert.ok(shortOpName('x'.repeat(80), 20).length <= 20);
  });
});

describe('palette', () => {
  it('colors non-finite kinds red and finite green, and marks the origin and partial tensors', () => {
    const [log, softmax] = demo().nodes;
    assert.ok(log && softmax);
    assert.equal(HEALTH_COLORS[log.health_class], '#d32f2f');
    assert.equal(HEALTH_COLORS[softmax.health_class], '#2e7d32');
    assert.ok(isNonFinite('nan') && isNonFinite('pos_inf') && !isNonFinite('finite') && !isNonFinite('unknown'));
    assert.deepEqual(nodeClasses(log), ['nl-node', 'nl-health-neg_inf', 'nl-role-origin', 'nl-partial', 'nl-has-source']);
    assert.equal(nonFiniteShare(log), 3 / 640);
    assert.equal(nonFiniteShare(softmax), 0);
  });
});

describe('timeline series and captions', () => {
  it('plots non-finite tensors so far inside one execution, and says where they begin', () => {
    const model = demo();
    assert.ok(model.timeline);
    const series = timelineSeries(model.timeline);
    assert.deepEqual(series.x, [0, 1, 2, 3, 4]);
    assert.deepEqual(series.nonFinite, [0, 0, 1, 2, 3]);
    assert.equal(series.tensors, null);
    assert.equal(
      timelineCaption(model),
      'Inside the one recorded execution (5 traced tensors): non-finite values begin at traced tensor 2 (op2:0 (T)), where the origin Log loss/Log is.',
    );
  });

  it('plots per-execution counts and tells apart the origin from an earlier first non-finite value', () => {
    const model = demo();
    model.timeline = {
      unit: 'execution',
      points: [
        { x: 3, end: 3, tensors: 70, non_finite: 0, cumulative: 0, label: '#3 train_step' },
        { x: 6, end: 6, tensors: 70, non_finite: 2, cumulative: 2, label: '#6 train_step (+2 eager ops)' },
        { x: 9, end: 9, tensors: 70, non_finite: 40, cumulative: 42, label: '#9 train_step' },
      ],
      origin_x: 9, first_nonfinite_x: 6, executions: 10, traces: 210, binned: false, note: null,
    };
    const series = timelineSeries(model.timeline);
    assert.deepEqual(series.nonFinite, [0, 2, 40]);
    assert.deepEqual(series.tensors, [70, 70, 70]);
    assert.equal(
      timelineCaption(model),
      'Over 10 executions: non-finite values begin at execution 6 (train_step); the origin Log loss/Log is at execution 9 (train_step).',
    );
  });

  it('plots the loss with gaps where it was not finite', () => {
    const model = demo();
    const series = lossSeries(model.loss_history ?? [], model.failing_step);
    assert.deepEqual(series.steps, [0, 1, 2]);
    assert.deepEqual(series.loss, [6.7, 2.95, null]);
    assert.equal(lossCaption(model.loss_history ?? [], 2), 'Loss over 3 steps up to the failing step 2; the last finite loss was 2.950 at step 1.');
  });
});
