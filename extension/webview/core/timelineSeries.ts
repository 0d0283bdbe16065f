// What the health timeline and the loss chart plot, as plain arrays (uPlot's data format), and their captions.

import type { LossRow, PictureCause, PictureModel, Timeline, TimelinePoint, TrendWindow } from './model';
import { plural } from './text';

export interface TimelineSeries {
  /** x values (execution or trace index). */
  x: number[];
  /** Non-finite tensors per execution (execution unit) or so far (trace unit). */
  nonFinite: number[];
  /** Tensors with a health record per execution (execution unit only). */
  tensors: number[] | null;
  yLabel: string;
  xLabel: string;
}

export function timelineSeries(timeline: Timeline): TimelineSeries {
  const x = timeline.points.map((p) => p.x);
  if (timeline.unit === 'trace') {
    return {
      x,
      nonFinite: timeline.points.map((p) => p.cumulative),
      tensors: null,
      yLabel: 'non-finite tensors so far',
      xLabel: 'traced tensor (in the order written)',
    };
  }
  return {
    x,
    nonFinite: timeline.points.map((p) => p.non_finite),
    tensors: timeline.points.map((p) => p.tensors),
    yLabel: 'non-finite tensors',
    xLabel: timeline.binned ? 'execution (binned)' : 'execution',
  };
}

export function pointAt(timeline: Timeline, x: number | null): TimelinePoint | undefined {
  return x === null ? undefined : timeline.points.find((p) => p.x === x);
}

function unitWord(timeline: Timeline): string {
  return timeline.unit === 'trace' ? 'traced tensor' : 'execution';
}

function described(timeline: Timeline, point: TimelinePoint): string {
  const name = point.label.replace(/^#\d+\s*/, '').replace(/\s*\(\+\d+ eager ops?\)$/, '');
  const what = name ? ` (${name})` : '';
  return `${unitWord(timeline)} ${point.x}${what}`;
}

/** One sentence: where non-finite values begin, and whether that is where the origin is. */
export function timelineCaption(model: Pick<PictureModel, 'timeline' | 'origin'>): string {
  const timeline = model.timeline;
  if (!timeline || timeline.points.length === 0) {
    return 'The dump has no health records to draw.';
  }
  const first = pointAt(timeline, timeline.first_nonfinite_x);
  const scope =
    timeline.unit === 'trace'
      ? `Inside the one recorded execution (${plural(timeline.traces, 'traced tensor')})`
      : `Over ${plural(timeline.executions, 'execution')}`;
  if (!first) {
    return `${scope}: every tensor stayed finite.`;
  }
  let text = `${scope}: non-finite values begin at ${described(timeline, first)}`;
  const origin = pointAt(timeline, timeline.origin_x);
  const op = model.origin ? `${model.origin.op.type} ${model.origin.op.name}` : 'the origin';
  if (origin && origin.x === first.x) {
    text += `, where the origin ${op} is`;
  } else if (origin) {
    text += `; the origin ${op} is at ${described(timeline, origin)}`;
  }
  return text + '.';
}

export interface LossSeries {
  steps: number[];
  loss: (number | null)[];
  logged: (number | null)[];
  /** The global gradient norm per step (null where not finite or not measured); null when no row has one. */
  gradNorm: (number | null)[] | null;
  /** Steps whose loss or gradient norm was recorded non-finite, with the kind ("inf"). */
  nonFinite: { step: number; what: string }[];
  /** Draw the loss on a log scale: it spans three decades or more (a divergence), all of it positive. */
  logLoss: boolean;
  failingStep: number | null;
}

export function lossSeries(rows: readonly LossRow[], failingStep: number | null): LossSeries {
  const finite = rows.map((r) => r.loss).filter((v): v is number => v !== null);
  const low = Math.min(...finite);
  const high = Math.max(...finite);
  const hasGradNorm = rows.some((r) => r.grad_norm !== undefined && r.grad_norm !== null);
  return {
    steps: rows.map((r) => r.step),
    loss: rows.map((r) => r.loss),
    logged: rows.map((r) => r.logged_loss),
    // Drawn on a log scale of its own: a zero norm (no gradient) has no place there, so it is a gap.
    gradNorm: hasGradNorm ? rows.map((r) => (r.grad_norm !== undefined && r.grad_norm !== null && r.grad_norm > 0 ? r.grad_norm : null)) : null,
    nonFinite: rows.flatMap((r) => {
      const parts = (['loss', 'grad_norm'] as const).flatMap((name) =>
        r.nonfinite?.[name] ? [`${name === 'loss' ? 'loss' : 'grad norm'} ${r.nonfinite[name]}`] : [],
      );
      return parts.length ? [{ step: r.step, what: parts.join(', ') }] : [];
    }),
    logLoss: finite.length >= 2 && low > 0 && high / low >= 1000,
    failingStep,
  };
}

const SERIES_NAMES: Record<string, string> = {
  loss: 'loss',
  logged_loss: 'logged loss',
  grad_norm: 'gradient norm',
  update_ratio: 'update/weight ratio',
  max_abs_output: 'largest |output|',
};

export function seriesName(series: string): string {
  return SERIES_NAMES[series] ?? series.replace(/_/g, ' ');
}

function times(value: number | null): string {
  return value === null ? 'beyond float range' : `x${Number(value.toPrecision(3))}`;
}

/** "divergence: the loss grew x71.2 per step for 7 steps (steps 9–16, x9.2e+12 in all)". */
export function trendCaption(cause: PictureCause | null): string | null {
  if (!cause) {
    return null;
  }
  const trend: TrendWindow | null = cause.trend;
  if (!trend) {
    return cause.summary ? `cause: ${cause.kind} — ${cause.summary}` : `cause: ${cause.kind}`;
  }
  const factor = trend.factor === null ? '' : `, ${times(trend.factor)} in all`;
  return (
    `${cause.kind}: the ${seriesName(trend.series)} grew ${times(trend.rate_per_step)} per step for ` +
    `${plural(trend.steps, 'step')} (steps ${trend.start_step}–${trend.end_step}${factor})`
  );
}

export function lossCaption(rows: readonly LossRow[], failingStep: number | null): string {
  if (rows.length === 0) {
    return 'The bundle recorded no loss history.';
  }
  const finite = rows.filter((r) => r.loss !== null);
  const last = finite[finite.length - 1];
  const lastText = last ? `; the last finite loss was ${formatLoss(last.loss ?? 0)} at step ${last.step}` : '';
  const where = failingStep !== null ? `the failing step ${failingStep}` : 'the last step';
  return `Loss over ${plural(rows.length, 'step')} up to ${where}${lastText}.`;
}

export function formatLoss(value: number): string {
  const abs = Math.abs(value);
  return abs !== 0 && (abs >= 1e5 || abs < 1e-3) ? value.toExponential(3) : value.toPrecision(4);
}
