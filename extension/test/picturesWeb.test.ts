// The pure parts of the pictures web bundle (extension/webview/core): reading the model, the dagre layout,
// the chart series and captions.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { layoutGraph, nodeLines, type Dagre } from '../webview/core/layout';
import { readPictureModel, type PictureModel } from '../webview/core/model';
import { HEALTH_COLORS, isNonFinite, nodeClasses, nonFiniteShare } from '../webview/core/palette';
import { shortOpName } from '../webview/core/text';
import { lossCaption, lossSeries, timelineCaption, timelineSeries, trendCaption } from '../webview/core/timelineSeries';

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
    assert.equal(series.gradNorm, null, 'an older bundle has no gradient norm: no second line');
    assert.equal(series.logLoss, false);
    assert.equal(model.cause, null);
  });
});

/** A diverging run as pyadapter/pictures writes it: loss x100 per step from step 3, both non-finite at step 6. */
function divergenceJson(): Record<string, unknown> {
  const rows: Record<string, unknown>[] = [0, 1, 2, 3, 4, 5].map((step) => ({
    step, loss: step < 3 ? 2 - 0.1 * step : 1.7 * 100 ** (step - 3), logged_loss: 2, grad_norm: step === 0 ? 0 : 1.5 * 9 ** step,
    weight_norm: 30, update_ratio: null, max_abs_output: 4,
  }));
  rows.push({ step: 6, loss: null, loss_nonfinite: 'inf', logged_loss: null, grad_norm: null, grad_norm_nonfinite: 'nan', weight_norm: 30, update_ratio: null, max_abs_output: null });
  return {
    ...demoJson(),
    loss_history: rows,
    failing_step: 6,
    cause: {
      kind: 'divergence',
      summary: 'the run diverged at learning rate 0.5: the loss grew x100 per step for 2 steps',
      trend: { series: 'loss', start_step: 3, end_step: 5, steps: 2, start_value: 1.7, end_value: 17000, factor: 10000, rate_per_step: 100 },
    },
  };
}

describe('the loss chart of a divergence', () => {
  const model = readPictureModel(divergenceJson());
  assert.ok(model);

  it('reads the cause, its trend window and the extra series', () => {
    const cause = model.cause;
    assert.ok(cause);
    assert.equal(cause.kind, 'divergence');
    assert.deepEqual([cause.trend?.start_step, cause.trend?.end_step], [3, 5]);
    const rows = model.loss_history;
    assert.ok(rows);
    assert.equal(rows[4]?.grad_norm, 1.5 * 9 ** 4);
    assert.deepEqual(rows[6]?.nonfinite, { loss: 'inf', grad_norm: 'nan' });
  });

  it('plots the gradient norm (gaps at zero and non-finite), a log loss, and marks the non-finite step', () => {
    const series = lossSeries(model.loss_history ?? [], model.failing_step);
    assert.deepEqual(series.gradNorm, [null, 13.5, 121.5, 1093.5, 9841.5, 88573.5, null]);
    assert.equal(series.logLoss, true, 'the loss spans four decades');
    assert.deepEqual(series.nonFinite, [{ step: 6, what: 'loss inf, grad norm nan' }]);
  });

  it('states the growth in numbers with the cause kind', () => {
    assert.equal(trendCaption(model.cause), 'divergence: the loss grew x100 per step for 2 steps (steps 3–5, x10000 in all)');
    assert.equal(trendCaption({ kind: 'op', summary: 'Log of 0', trend: null }), 'cause: op — Log of 0');
    assert.equal(trendCaption(null), null);
  });

  it('drops a malformed trend window but keeps the cause', () => {
    const json = divergenceJson();
    json.cause = { kind: 'divergence', summary: 's', trend: { start_step: 5, end_step: 3 } };
    assert.equal(readPictureModel(json)?.cause?.trend, null);
    assert.equal(readPictureModel(json)?.cause?.kind, 'divergence');
  });
});
