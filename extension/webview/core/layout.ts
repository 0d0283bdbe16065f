// Where the op graph's boxes and arrows go: dagre's layered layout (inputs above, consumers below).

// Types only (dagre is an ES module; this file is also compiled as CommonJS for the unit tests).
import type dagreModule from '@dagrejs/dagre' with { 'resolution-mode': 'import' };
import type { EdgeLabel, GraphLabel, NodeLabel } from '@dagrejs/dagre' with { 'resolution-mode': 'import' };
import type { PictureEdge, PictureModel, PictureNode } from './model';
import { shortOpName } from './text';

export interface Point {
  x: number;
  y: number;
}

export interface PlacedNode {
  node: PictureNode;
  /** Center. */
  x: number;
  y: number;
  width: number;
  height: number;
  lines: [string, string, string];
}

export interface PlacedEdge {
  edge: PictureEdge;
  points: Point[];
}

export interface GraphLayout {
  width: number;
  height: number;
  nodes: PlacedNode[];
  edges: PlacedEdge[];
}

export const NODE_HEIGHT = 66;
const CHAR_WIDTH = 7.2; // about right for 12px sans-serif; boxes only need to be roughly wide enough
const MIN_WIDTH = 150;
const MAX_WIDTH = 280;
const MARGIN = 24;

/** The three text lines of a node: type, (shortened) name, health summary. */
export function nodeLines(node: PictureNode): [string, string, string] {
  return [node.type, shortOpName(node.name), node.summary || (node.traced ? '' : 'not traced')];
}

export function nodeWidth(lines: readonly string[]): number {
  const longest = Math.max(...lines.map((l) => l.length));
  return Math.round(Math.min(MAX_WIDTH, Math.max(MIN_WIDTH, longest * CHAR_WIDTH + 28)));
}

/** The dagre module (passed in: the web bundle imports it, Node tests load it with a dynamic import). */
export type Dagre = typeof dagreModule;

export function layoutGraph(model: Pick<PictureModel, 'nodes' | 'edges'>, dagre: Dagre): GraphLayout {
  const g = new dagre.graphlib.Graph<GraphLabel, NodeLabel, EdgeLabel>({ multigraph: true });
  g.setGraph({ rankdir: 'TB', nodesep: 28, ranksep: 46, edgesep: 14, marginx: MARGIN, marginy: MARGIN });
  g.setDefaultEdgeLabel(() => ({}));
  const lines = new Map<string, [string, string, string]>();
  for (const node of model.nodes) {
    const text = nodeLines(node);
    lines.set(node.id, text);
    g.setNode(node.id, { width: nodeWidth(text), height: NODE_HEIGHT });
  }
  model.edges.forEach((edge, i) => {
    // A gradient link is a cross-reference, not data flow: it must not pull the layers into shape.
    g.setEdge(edge.source, edge.target, { minlen: 1, weight: edge.kind === 'gradient' ? 0 : 1 }, `e${i}`);
  });
  dagre.layout(g);
  const nodes: PlacedNode[] = model.nodes.map((node) => {
    const placed = g.node(node.id);
    return {
      node,
      x: placed.x ?? 0,
      y: placed.y ?? 0,
      width: placed.width,
      height: placed.height,
      lines: lines.get(node.id) ?? nodeLines(node),
    };
  });
  const edges: PlacedEdge[] = model.edges.map((edge, i) => {
    const placed = g.edge(edge.source, edge.target, `e${i}`);
    return { edge, points: placed.points ?? [] };
  });
  const graph = g.graph();
  return { width: graph.width ?? 0, height: graph.height ?? 0, nodes, edges };
}
