// Colors and words for tensor health: one place, used by the graph, the legend and the charts.

import type { HealthClass, PictureNode } from './model';

/** Fill colors by health class. Non-finite kinds are all warm (red family), so "bad" reads at a glance. */
export const HEALTH_COLORS: Record<HealthClass, string> = {
  finite: '#2e7d32',
  nan: '#8e0000',
  neg_inf: '#d32f2f',
  pos_inf: '#ef6c00',
  mixed: '#ad1457',
  unknown: '#78909c',
};

export const HEALTH_LABELS: Record<HealthClass, string> = {
  finite: 'finite',
  nan: 'NaN',
  neg_inf: '−inf',
  pos_inf: '+inf',
  mixed: 'several kinds',
  unknown: 'not traced',
};

/** Order of the legend. */
export const LEGEND_ORDER: readonly HealthClass[] = ['finite', 'nan', 'neg_inf', 'pos_inf', 'mixed', 'unknown'];

export function isNonFinite(health: HealthClass): boolean {
  return health === 'nan' || health === 'neg_inf' || health === 'pos_inf' || health === 'mixed';
}

/** Share of the values that are non-finite (0..1), when the counts are known. */
export function nonFiniteShare(node: PictureNode): number | undefined {
  const h = node.health;
  if (!h?.size) {
    return undefined;
  }
  const bad = (h.nan ?? 0) + (h.neg_inf ?? 0) + (h.pos_inf ?? 0);
  return Math.min(1, bad / h.size);
}

/** CSS classes of a node's group: its health, role and partialness (the stylesheet colors by these). */
export function nodeClasses(node: PictureNode): string[] {
  const classes = ['nl-node', `nl-health-${node.health_class}`, `nl-role-${node.role}`];
  if (node.partial) {
    classes.push('nl-partial');
  }
  if (node.gradient) {
    classes.push('nl-gradient');
  }
  if (node.file !== undefined) {
    classes.push('nl-has-source');
  }
  return classes;
}
