// The health timeline (and a bundle's loss history): uPlot charts, with the origin and the start of the
// non-finite values marked by vertical lines drawn in uPlot's draw hook.

import uPlot from 'uplot';
import type { PictureModel, Timeline } from './core/model';
import { HEALTH_COLORS } from './core/palette';
import { formatLoss, lossCaption, lossSeries, pointAt, timelineCaption, timelineSeries, trendCaption } from './core/timelineSeries';

const ORIGIN_COLOR = '#b71c1c';
const FIRST_COLOR = '#ef6c00';
const FAILING_COLOR = '#d32f2f';
const TENSORS_COLOR = '#90a4ae';
const LOSS_COLOR = '#1565c0';
const GRAD_NORM_COLOR = '#6a1b9a';
const TREND_FILL = 'rgba(239,108,0,0.16)';
// uPlot's Distr and Side are ambient const enums, which esbuild cannot inline (uPlot.Scale is undefined at run
// time): their documented values, typed.
// eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment -- see above
const LOG_SCALE = 3 as uPlot.Scale.Distr; // Logarithmic
// eslint-disable-next-line @typescript-eslint/no-unsafe-enum-assignment -- see above
const RIGHT_SIDE = 1 as uPlot.Axis.Side; // Right

interface Marker {
  x: number;
  color: string;
  label: string;
  dash: number[];
}

function html<K extends keyof HTMLElementTagNameMap>(tag: K, className: string, text?: string, parent?: Element): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  element.className = className;
  if (text !== undefined) {
    element.textContent = text;
  }
  parent?.appendChild(element);
  return element;
}

function foreground(): string {
  return getComputedStyle(document.body).color || '#1f2328';
}

/** A uPlot plugin drawing labelled vertical lines at x values. */
function markersPlugin(markers: readonly Marker[], afterDraw?: (u: uPlot) => void): uPlot.Plugin {
  return {
    hooks: {
      draw: [
        (u: uPlot) => {
          const ctx = u.ctx;
          const { top, height } = u.bbox;
          const ratio = uPlot.pxRatio;
          ctx.save();
          markers.forEach((m, i) => {
            const x = Math.round(u.valToPos(m.x, 'x', true));
            ctx.strokeStyle = m.color;
            ctx.lineWidth = 2 * ratio;
            ctx.setLineDash(m.dash.map((d) => d * ratio));
            ctx.beginPath();
            ctx.moveTo(x, top);
            ctx.lineTo(x, top + height);
            ctx.stroke();
            ctx.setLineDash([]);
            ctx.fillStyle = m.color;
            ctx.font = `${12 * ratio}px sans-serif`;
            ctx.textAlign = 'left'; // uPlot leaves its axis text settings on the context
            ctx.textBaseline = 'alphabetic';
            const text = m.label;
            const width = ctx.measureText(text).width;
            const right = u.bbox.left + u.bbox.width;
            const tx = x + 4 * ratio + width > right ? x - 4 * ratio - width : x + 4 * ratio;
            ctx.fillText(text, tx, top + (14 + 15 * i) * ratio);
          });
          ctx.restore();
          afterDraw?.(u);
        },
      ],
    },
  };
}

function chartWidth(container: HTMLElement): number {
  return Math.max(320, Math.floor(container.clientWidth || 800) - 8);
}

/** Keep a chart as wide as its container. */
function followWidth(container: HTMLElement, plot: uPlot, height: number): void {
  if (typeof ResizeObserver === 'undefined') {
    return;
  }
  let last = chartWidth(container);
  new ResizeObserver(() => {
    const width = chartWidth(container);
    if (width !== last) {
      last = width;
      plot.setSize({ width, height });
    }
  }).observe(container);
}

// Tick steps for counts and indices: whole numbers only (no "step 0.5").
const INTEGER_STEPS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 2500, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000];

function axes(xLabel: string, yLabel: string, integerY: boolean): uPlot.Axis[] {
  const fg = foreground();
  const grid = { stroke: 'rgba(128,128,128,0.18)', width: 1 };
  return [
    { label: xLabel, stroke: fg, grid, ticks: grid, incrs: INTEGER_STEPS },
    { label: yLabel, stroke: fg, grid, ticks: grid, size: 56, ...(integerY ? { incrs: INTEGER_STEPS } : {}) },
  ];
}

function timelineMarkers(model: PictureModel, timeline: Timeline): Marker[] {
  const markers: Marker[] = [];
  const origin = pointAt(timeline, timeline.origin_x);
  const first = pointAt(timeline, timeline.first_nonfinite_x);
  if (origin) {
    markers.push({ x: origin.x, color: ORIGIN_COLOR, label: `origin: ${model.origin?.op.type ?? 'op'}`, dash: [] });
  }
  if (first && (!origin || first.x !== origin.x)) {
    markers.push({ x: first.x, color: FIRST_COLOR, label: 'first non-finite', dash: [6, 4] });
  }
  return markers;
}

function renderTimelineChart(root: HTMLElement, model: PictureModel, timeline: Timeline): void {
  const section = html('div', 'nl-chart nl-timeline-chart', undefined, root);
  section.dataset.unit = timeline.unit;
  section.dataset.points = String(timeline.points.length);
  if (timeline.origin_x !== null) {
    section.dataset.originX = String(timeline.origin_x);
  }
  if (timeline.first_nonfinite_x !== null) {
    section.dataset.firstNonfiniteX = String(timeline.first_nonfinite_x);
  }
  html('p', 'nl-caption nl-timeline-caption', timelineCaption(model), section);
  const series = timelineSeries(timeline);
  const host = html('div', 'nl-plot', undefined, section);
  const height = 260;
  const bad = HEALTH_COLORS.neg_inf;
  const labels = timeline.points.map((p) => p.label);
  const opts: uPlot.Options = {
    width: chartWidth(root),
    height,
    scales: { x: { time: false }, y: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] } },
    axes: axes(series.xLabel, series.yLabel, true),
    legend: { live: true },
    cursor: { points: { show: false } },
    series: [
      {
        label: timeline.unit === 'trace' ? 'trace' : 'execution',
        value: (_u, v, _si, idx) => (idx === null ? '—' : `${v} ${labels[idx] ?? ''}`.trim()),
      },
      timeline.unit === 'trace'
        ? {
            label: series.yLabel,
            stroke: bad,
            width: 2,
            fill: 'rgba(211,47,47,0.15)',
            paths: uPlot.paths.stepped?.({ align: 1 }),
          }
        : {
            label: series.yLabel,
            stroke: bad,
            fill: 'rgba(211,47,47,0.55)',
            width: 1,
            paths: uPlot.paths.bars?.({ size: [0.9, 12, 1] }),
          },
      ...(series.tensors
        ? [{ label: 'tensors with a health record', stroke: TENSORS_COLOR, width: 1 } as uPlot.Series]
        : []),
    ],
    plugins: [
      markersPlugin(timelineMarkers(model, timeline), (u) => {
        if (timeline.origin_x !== null) {
          // Where the origin line is drawn, in CSS pixels from the plot's left edge (for tests and a11y tools).
          section.dataset.originPx = String(Math.round(u.valToPos(timeline.origin_x, 'x')));
        }
      }),
    ],
  };
  const data: uPlot.AlignedData = series.tensors ? [series.x, series.nonFinite, series.tensors] : [series.x, series.nonFinite];
  const plot = new uPlot(opts, data, host);
  followWidth(root, plot, height);
  if (timeline.note) {
    html('p', 'nl-note', timeline.note, section);
  }
}

/** Shade the trend window behind the series (uPlot's drawClear hook runs before axes and lines are drawn), and
 * say where it was drawn, in CSS pixels from the plot's left edge, for tests and a11y tools. */
function trendPlugin(section: HTMLElement, start: number, end: number): uPlot.Plugin {
  return {
    hooks: {
      drawClear: [
        (u: uPlot) => {
          const left = u.valToPos(start, 'x', true);
          const right = u.valToPos(end, 'x', true);
          const ctx = u.ctx;
          ctx.save();
          ctx.fillStyle = TREND_FILL;
          ctx.fillRect(left, u.bbox.top, Math.max(right - left, 2 * uPlot.pxRatio), u.bbox.height);
          ctx.restore();
          section.dataset.trendLeftPx = String(Math.round(u.valToPos(start, 'x')));
          section.dataset.trendRightPx = String(Math.round(u.valToPos(end, 'x')));
        },
      ],
    },
  };
}

/** Mark steps whose loss or gradient norm was not finite (a gap in the lines) with a red diamond at the top. */
function nonFinitePlugin(steps: readonly { step: number; what: string }[]): uPlot.Plugin {
  return {
    hooks: {
      draw: [
        (u: uPlot) => {
          const ctx = u.ctx;
          const r = 5 * uPlot.pxRatio;
          const y = u.bbox.top + r + 1;
          ctx.save();
          ctx.fillStyle = HEALTH_COLORS.nan;
          for (const { step } of steps) {
            const x = u.valToPos(step, 'x', true);
            ctx.beginPath();
            ctx.moveTo(x, y - r);
            ctx.lineTo(x + r, y);
            ctx.lineTo(x, y + r);
            ctx.lineTo(x - r, y);
            ctx.closePath();
            ctx.fill();
          }
          ctx.restore();
        },
      ],
    },
  };
}

function renderLossChart(root: HTMLElement, model: PictureModel): void {
  const rows = model.loss_history ?? [];
  const section = html('div', 'nl-chart nl-loss-chart', undefined, root);
  html('h3', 'nl-subtitle', 'Loss history (from the capture bundle)', section);
  html('p', 'nl-caption nl-loss-caption', lossCaption(rows, model.failing_step), section);
  const causeText = trendCaption(model.cause);
  if (model.cause && causeText) {
    const caption = html('p', 'nl-caption nl-trend-caption', causeText, section);
    caption.dataset.cause = model.cause.kind;
    section.dataset.cause = model.cause.kind;
  }
  if (rows.length === 0) {
    return;
  }
  const series = lossSeries(rows, model.failing_step);
  const height = 220;
  const markers: Marker[] =
    series.failingStep !== null
      ? [{ x: series.failingStep, color: FAILING_COLOR, label: `step ${series.failingStep}: non-finite`, dash: [] }]
      : [];
  if (series.failingStep !== null) {
    section.dataset.failingStep = String(series.failingStep);
  }
  if (series.nonFinite.length > 0) {
    section.dataset.nonfiniteSteps = series.nonFinite.map((n) => n.step).join(' ');
  }
  const trend = model.cause?.trend ?? null;
  if (trend) {
    section.dataset.trendStart = String(trend.start_step);
    section.dataset.trendEnd = String(trend.end_step);
    section.dataset.trendSeries = trend.series;
  }
  const gradNorm = series.gradNorm;
  if (gradNorm) {
    const drawn = series.steps.filter((_, i) => gradNorm[i] !== null);
    section.dataset.gradNormPoints = String(drawn.length);
    if (drawn.length > 0) {
      section.dataset.gradNormSteps = `${drawn[0]}-${drawn[drawn.length - 1]}`;
    }
  }
  const host = html('div', 'nl-plot', undefined, section);
  // Values in the legend while hovering; a missing value at a hovered step is a non-finite (or unseen) one.
  const format = (_u: uPlot, v: number | null, _series: number, idx: number | null): string =>
    idx === null ? '—' : v === null ? 'non-finite' : formatLoss(v);
  const yAxes = axes('step', series.logLoss ? 'loss (log)' : 'loss', false);
  const seriesOpts: uPlot.Series[] = [
    { label: 'step' },
    { label: 'loss', stroke: LOSS_COLOR, width: 2, points: { show: true, size: 5 }, value: format },
    { label: 'logged (epoch mean)', stroke: TENSORS_COLOR, width: 1, dash: [5, 4], value: format },
  ];
  const data: (number | null)[][] = [series.steps, series.loss, series.logged];
  if (gradNorm) {
    // The gradient norm spans other magnitudes than the loss: its own log scale, on the right.
    yAxes.push({ ...yAxes[1], scale: 'grad', side: RIGHT_SIDE, label: 'gradient norm (log)', grid: { show: false } });
    seriesOpts.push({ label: 'gradient norm', scale: 'grad', stroke: GRAD_NORM_COLOR, width: 1.5, value: format });
    data.push(gradNorm);
  }
  const plugins = [markersPlugin(markers), nonFinitePlugin(series.nonFinite)];
  if (trend) {
    plugins.unshift(trendPlugin(section, trend.start_step, trend.end_step));
  }
  const plot = new uPlot(
    {
      width: chartWidth(root),
      height,
      scales: { x: { time: false }, ...(series.logLoss ? { y: { distr: LOG_SCALE } } : {}), grad: { distr: LOG_SCALE } },
      axes: yAxes,
      series: seriesOpts,
      plugins,
    },
    data as uPlot.AlignedData,
    host,
  );
  followWidth(root, plot, height);
}

/** Draw the health timeline (and, for a bundle, the loss history) of `model` into `root`. */
export function renderTimeline(root: HTMLElement, model: PictureModel): void {
  root.replaceChildren();
  root.classList.add('nl-timeline-view');
  if (!model.timeline) {
    html('p', 'nl-note', 'This source has no health timeline.', root);
  } else {
    renderTimelineChart(root, model, model.timeline);
  }
  if (model.source.kind === 'bundle' || model.loss_history) {
    renderLossChart(root, model);
  }
}
