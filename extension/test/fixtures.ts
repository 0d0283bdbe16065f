// Notifications shaped like what `nanlens serve` sends (docs/protocol.md), for the unit tests.

import assert from 'node:assert/strict';
import type { Finding, Source } from '../src/core/protocol';

export const TRAIN = '/work/proj/train.py';
export const MODEL = '/work/proj/model.py';

export function finding(overrides: Partial<Finding> & Pick<Finding, 'line' | 'role'>): Finding {
  return {
    file: TRAIN,
    op: { name: 'loss/Log', type: 'Log', graph: 'train_step', step: 12 },
    health: { dtype: 'float32', size: 640, nan: 0, neg_inf: 561, pos_inf: 0 },
    inputs: [{ name: 'probs:0', health: { size: 640, zero: 561 } }],
    stack: [],
    message: 'Log produced 561 -inf from input probs:0 which holds 561 zeros',
    stale: false,
    ...overrides,
  };
}

/** A located bundle whose origin is a Log on train.py:42, carried by a Mean on train.py:43 and a MatMul in model.py. */
export function bundleSource(overrides: Partial<Source> = {}): Source {
  const origin = finding({ line: 42, role: 'origin' });
  return {
    id: 'bundle:/work/proj/captures/run-step12',
    kind: 'bundle',
    path: '/work/proj/captures/run-step12',
    label: 'run-step12 (step 12)',
    step: 12,
    status: 'ok',
    error: null,
    origin,
    findings: [
      origin,
      finding({ line: 43, role: 'propagated', op: { name: 'loss/Mean', type: 'Mean' }, message: 'Mean carried 1 -inf' }),
      finding({ file: MODEL, line: 7, role: 'propagated', op: { name: 'dense/MatMul', type: 'MatMul' }, message: 'MatMul carried 64 NaN' }),
    ],
    entry: null,
    foreign: null,
    untrusted: null,
    ...overrides,
  };
}

export const NOTEBOOK = '/work/proj/analysis.ipynb';

/**
 * A bundle captured in a notebook: origin on line 2 of cell 2 (the notebook starts with a markdown cell, so
 * that is the second code cell), carried on line 3 of the same cell and on line 2 of cell 1.
 */
export function notebookSource(overrides: Partial<Source> = {}): Source {
  const origin = finding({ file: NOTEBOOK, cell: 2, line: 2, role: 'origin' });
  return {
    id: 'bundle:/work/proj/.nanlens/captures/nb-step5',
    kind: 'bundle',
    path: '/work/proj/.nanlens/captures/nb-step5',
    label: 'nb-step5 (step 5)',
    step: 5,
    status: 'ok',
    error: null,
    origin,
    findings: [
      origin,
      finding({ file: NOTEBOOK, cell: 2, line: 3, role: 'propagated', op: { name: 'Mul', type: 'Mul' }, message: 'Mul carried 1 -inf' }),
      finding({ file: NOTEBOOK, cell: 1, line: 2, role: 'propagated', op: { name: 'Mean', type: 'Mean' }, message: 'Mean carried 1 -inf' }),
    ],
    entry: null,
    foreign: null,
    untrusted: null,
    ...overrides,
  };
}

export function dumpSource(overrides: Partial<Source> = {}): Source {
  return {
    id: 'dump:/work/proj/.nanlens/dumps/20250101-120000',
    kind: 'dump',
    path: '/work/proj/.nanlens/dumps/20250101-120000',
    label: '20250101-120000',
    step: null,
    status: 'ok',
    error: null,
    origin: null,
    findings: [],
    entry: null,
    foreign: null,
    untrusted: null,
    ...overrides,
  };
}

/** The item at `index`, failing the test (not crashing on undefined) when the list is shorter. */
export function at<T>(items: readonly T[], index: number): T {
  const item = items[index];
  if (item === undefined) {
    throw new assert.AssertionError({ message: `expected an item at index ${index}, got ${items.length} items`, actual: items.length });
  }
  return item;
}
