// The op graph: dagre places the boxes (core/layout.ts); this draws them as SVG and handles clicks.

import dagre from '@dagrejs/dagre';
import { layoutGraph, type PlacedEdge, type PlacedNode } from './core/layout';
import type { PictureModel, PictureNode } from './core/model';
import { HEALTH_COLORS, HEALTH_LABELS, LEGEND_ORDER, isNonFinite, nodeClasses, nonFiniteShare } from './core/palette';
import { baseName } from './core/text';

const SVG = 'http://www.w3.org/2000/svg';

export interface GraphHandlers {
  /** A node was clicked (or Enter pressed on it). */
  open(node: PictureNode): void;
}

function el<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number>,
  parent?: Element,
): SVGElementTagNameMap[K] {
  const element = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) {
    element.setAttribute(key, String(value));
  }
  parent?.appendChild(element);
  return element;
}

function html<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string,
  parent?: Element,
): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  element.className = className;
  if (text !== undefined) {
    element.textContent = text;
  }
  parent?.appendChild(element);
  return element;
}

function pathOf(points: readonly { x: number; y: number }[]): string {
  if (points.length === 0) {
    return '';
  }
  const [first, ...rest] = points;
  if (!first) {
    return '';
  }
  // A smooth curve through dagre's points: quadratic segments between midpoints.
  let d = `M${first.x.toFixed(1)},${first.y.toFixed(1)}`;
  for (let i = 0; i < rest.length - 1; i++) {
    const p = rest[i];
    const q = rest[i + 1];
    if (p && q) {
      d += ` Q${p.x.toFixed(1)},${p.y.toFixed(1)} ${((p.x + q.x) / 2).toFixed(1)},${((p.y + q.y) / 2).toFixed(1)}`;
    }
  }
  const last = rest[rest.length - 1];
  if (last) {
    d += ` L${last.x.toFixed(1)},${last.y.toFixed(1)}`;
  }
  return d;
}

function tooltip(node: PictureNode): string {
  const lines = [`${node.type}  ${node.name}`, node.summary || 'not traced'];
  const h = node.health;
  if (h?.size !== undefined) {
    const parts = [`NaN ${h.nan ?? 0}`, `−inf ${h.neg_inf ?? 0}`, `+inf ${h.pos_inf ?? 0}`];
    if (h.zero !== undefined) {
      parts.push(`zero ${h.zero}`, `neg ${h.neg ?? 0}`, `pos ${h.pos ?? 0}`);
    }
    lines.push(`${parts.join(', ')} of ${h.size}${h.dtype ? ` (${h.dtype})` : ''}`);
  }
  if (node.file !== undefined) {
    const library = node.user_code ? '' : ' (library code: no line of yours made this op)';
    lines.push(`${node.file}:${node.line ?? 1}${node.function ? ` in ${node.function}` : ''}${library}`);
  }
  return lines.join('\n');
}

function drawEdge(placed: PlacedEdge, parent: SVGElement): void {
  const { edge } = placed;
  const bad = isNonFinite(edge.health_class);
  const path = el(
    'path',
    {
      d: pathOf(placed.points),
      class: `nl-edge nl-edge-${edge.kind}${bad ? ' nl-edge-bad' : ''}`,
      'marker-end': edge.kind === 'gradient' ? 'url(#nl-arrow-gradient)' : bad ? 'url(#nl-arrow-bad)' : 'url(#nl-arrow)',
      'data-source': edge.source,
      'data-target': edge.target,
    },
    parent,
  );
  el('title', {}, path).textContent = edge.kind === 'gradient' ? 'gradient of (forward op → its gradient op)' : edge.tensor;
  if (edge.kind === 'gradient') {
    const mid = placed.points[Math.floor(placed.points.length / 2)];
    if (mid) {
      const label = el('text', { x: mid.x + 6, y: mid.y - 4, class: 'nl-edge-label' }, parent);
      label.textContent = 'gradient of';
    }
  }
}

function drawNode(placed: PlacedNode, parent: SVGElement, handlers: GraphHandlers, select: (n: PictureNode) => void): void {
  const { node } = placed;
  const left = placed.x - placed.width / 2;
  const top = placed.y - placed.height / 2;
  const group = el(
    'g',
    {
      class: nodeClasses(node).join(' '),
      transform: `translate(${left.toFixed(1)},${top.toFixed(1)})`,
      'data-id': node.id,
      'data-name': node.name,
      'data-type': node.type,
      'data-health': node.health_class,
      'data-role': node.role,
      'data-partial': String(node.partial),
      tabindex: 0,
      role: 'button',
      'aria-label': `${node.type} ${node.name}: ${node.summary}${node.role === 'origin' ? ' (origin)' : ''}`,
    },
    parent,
  );
  el('title', {}, group).textContent = tooltip(node);
  if (node.role === 'origin') {
    el('rect', { class: 'nl-origin-ring', x: -5, y: -5, width: placed.width + 10, height: placed.height + 10, rx: 10 }, group);
    const tag = el('text', { class: 'nl-origin-tag', x: placed.width / 2, y: -10, 'text-anchor': 'middle' }, group);
    tag.textContent = 'ORIGIN';
  }
  el('rect', { class: 'nl-node-box', width: placed.width, height: placed.height, rx: 6, fill: HEALTH_COLORS[node.health_class] }, group);
  const [type, name, summary] = placed.lines;
  el('text', { class: 'nl-node-type', x: 10, y: 18 }, group).textContent = node.gradient ? `${type} ∇` : type;
  el('text', { class: 'nl-node-name', x: 10, y: 35 }, group).textContent = name;
  el('text', { class: 'nl-node-summary', x: 10, y: 52 }, group).textContent = summary;
  const share = nonFiniteShare(node);
  if (share !== undefined && share > 0) {
    // How much of the tensor is non-finite: a bar along the bottom (at least a sliver, so 3 of 640 shows).
    const width = placed.width - 20;
    el('rect', { class: 'nl-share-track', x: 10, y: placed.height - 9, width, height: 4, rx: 2 }, group);
    el('rect', { class: 'nl-share-bar', x: 10, y: placed.height - 9, width: Math.max(3, width * share), height: 4, rx: 2 }, group);
  }
  const activate = (): void => {
    select(node);
    handlers.open(node);
  };
  group.addEventListener('click', activate);
  group.addEventListener('keydown', (event) => {
    if (event.key === 'Enter' || event.key === ' ') {
      event.preventDefault();
      activate();
    }
  });
}

function legend(parent: HTMLElement, model: PictureModel): void {
  const present = new Set(model.nodes.map((n) => n.health_class));
  const list = html('ul', 'nl-legend', undefined, parent);
  for (const cls of LEGEND_ORDER) {
    if (cls === 'mixed' && !present.has('mixed')) {
      continue;
    }
    const item = html('li', `nl-legend-item nl-legend-${cls}`, undefined, list);
    const swatch = html('span', 'nl-swatch', undefined, item);
    swatch.style.background = HEALTH_COLORS[cls];
    html('span', '', HEALTH_LABELS[cls], item);
  }
  const partly = html('li', 'nl-legend-item nl-legend-partly', undefined, list);
  html('span', 'nl-swatch nl-swatch-partly', undefined, partly);
  html('span', '', 'partly non-finite (bar = share)', partly);
  const origin = html('li', 'nl-legend-item', undefined, list);
  html('span', 'nl-swatch nl-swatch-origin', undefined, origin);
  html('span', '', 'origin', origin);
}

function details(node: PictureNode): string {
  const library = node.user_code ? '' : ' (library code)';
  const where = node.file !== undefined ? ` — ${baseName(node.file)}:${node.line ?? 1}${library}` : ' — no source line';
  return `${node.type} ${node.name}: ${node.summary}${where}`;
}

/** Draw the op graph of `model` into `root` (replacing what was there). */
export function renderGraph(root: HTMLElement, model: PictureModel, handlers: GraphHandlers): void {
  root.replaceChildren();
  root.classList.add('nl-graph-view');
  const header = html('div', 'nl-caption', undefined, root);
  if (model.origin) {
    const o = model.origin;
    const forward = o.op.forward_op ? ` (gradient of ${o.op.forward_op})` : '';
    header.textContent = `Origin: ${o.op.type} ${o.op.name}${forward} at ${baseName(o.file)}:${o.line}`;
  } else if (model.nodes.length === 0) {
    header.textContent = 'No origin: nothing went non-finite, so there is no op graph to draw.';
  } else {
    header.textContent = 'The origin op and its neighbourhood';
  }
  if (model.nodes.length === 0) {
    for (const note of model.notes) {
      html('p', 'nl-note', note, root);
    }
    return;
  }
  legend(root, model);
  const hint = html('p', 'nl-hint', '', root);
  hint.textContent = `Inputs above, consumers below${model.graph_name ? ` (graph ${model.graph_name})` : ''}. ` +
    'Click an op to open its line.';
  const layout = layoutGraph(model, dagre);
  const frame = html('div', 'nl-graph-frame', undefined, root);
  const svg = el('svg', {
    class: 'nl-graph',
    viewBox: `0 0 ${Math.ceil(layout.width)} ${Math.ceil(layout.height)}`,
    width: Math.ceil(layout.width),
    height: Math.ceil(layout.height),
    role: 'img',
    'aria-label': `Op graph around the origin: ${model.nodes.length} ops`,
  });
  frame.appendChild(svg);
  const defs = el('defs', {}, svg);
  for (const [id, cls] of [['nl-arrow', 'nl-arrowhead'], ['nl-arrow-bad', 'nl-arrowhead nl-arrowhead-bad'], ['nl-arrow-gradient', 'nl-arrowhead nl-arrowhead-gradient']] as const) {
    const marker = el('marker', { id, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, defs);
    el('path', { d: 'M0,0 L10,5 L0,10 z', class: cls }, marker);
  }
  const edges = el('g', { class: 'nl-edges' }, svg);
  const nodes = el('g', { class: 'nl-nodes' }, svg);
  const info = html('p', 'nl-details', 'Click an op for its details.', root);
  const select = (node: PictureNode): void => {
    for (const g of svg.querySelectorAll('.nl-node.nl-selected')) {
      g.classList.remove('nl-selected');
    }
    svg.querySelector(`.nl-node[data-id="${node.id}"]`)?.classList.add('nl-selected');
    info.textContent = details(node);
  };
  for (const placed of layout.edges) {
    drawEdge(placed, edges);
  }
  for (const placed of layout.nodes) {
    drawNode(placed, nodes, handlers, select);
  }
  for (const note of model.notes) {
    html('p', 'nl-note', note, root);
  }
}
