// The short texts a person reads next to a marked line, in the tree and in the status bar.

import type { Cause, Finding, Role, TensorHealth } from './protocol';

/** Longest after-line text in characters; longer messages end with an ellipsis (the hover has the rest). */
export const AFTER_LINE_MAX_LENGTH = 90;

/** '561 -inf of 640', '3 NaN, 2 +inf', 'finite (640 values, 561 zeros)' — mirrors TensorHealth.describe(). */
export function describeHealth(health: TensorHealth | undefined): string {
  if (health === undefined) {
    return 'non-finite values';
  }
  const parts: string[] = [];
  const counts: [number | undefined, string][] = [
    [health.nan, 'NaN'],
    [health.neg_inf, '-inf'],
    [health.pos_inf, '+inf'],
  ];
  for (const [count, label] of counts) {
    if (count) {
      parts.push(`${count} ${label}`);
    }
  }
  const of = health.size !== undefined ? ` of ${health.size}` : '';
  if (parts.length > 0) {
    return parts.join(', ') + of;
  }
  const zeros = health.zero ? `, ${health.zero} zero${health.zero === 1 ? '' : 's'}` : '';
  const values = health.size === 1 ? 'value' : 'values';
  return health.size !== undefined ? `finite (${health.size} ${values}${zeros})` : 'finite';
}

export function roleLabel(role: Role): string {
  switch (role) {
    case 'origin':
      return 'NaN origin';
    case 'backward-origin':
      return 'NaN origin (backward pass)';
    case 'propagated':
      return 'NaN carried';
  }
}

/** What the finding says in one sentence: the server's message, or one built from op and health. */
export function findingSentence(finding: Finding): string {
  const message = finding.message?.trim();
  if (message) {
    return message;
  }
  return `${finding.op.type} produced ${describeHealth(finding.health)}`;
}

/** Cut `text` to `max` characters, preferring a word boundary, ending with '…' when cut. */
export function truncate(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  if (flat.length <= max) {
    return flat;
  }
  const room = Math.max(1, max - 1);
  const cut = flat.slice(0, room);
  const space = cut.lastIndexOf(' ');
  // Only back off to a word boundary when that keeps most of the text.
  const base = space >= room * 0.6 ? cut.slice(0, space) : cut;
  return `${base.replace(/[\s,;:]+$/, '')}…`;
}

/**
 * The text drawn after a marked line, e.g. '⟵ NaN origin: Log produced 561 -inf from input probs:0 which…'.
 * `others` is how many more findings share the line (shown as '(+N more)').
 */
export function afterLineText(finding: Finding, others = 0, max = AFTER_LINE_MAX_LENGTH): string {
  const stale = finding.stale ? '(stale) ' : '';
  const more = others > 0 ? ` (+${others} more)` : '';
  const head = `⟵ ${stale}${roleLabel(finding.role)}: `;
  const room = Math.max(8, max - head.length - more.length);
  return `${head}${truncate(findingSentence(finding), room)}${more}`;
}

/** The text drawn after the line a cause says to change: '⟵ NaN Lens: change here: learning rate 0.05 (SGD): try…'. */
export function changeLineText(cause: Cause, max = AFTER_LINE_MAX_LENGTH): string {
  const head = '⟵ NaN Lens: change here: ';
  const what = cause.change?.what || cause.summary;
  return `${head}${truncate(what, Math.max(8, max - head.length))}`;
}

export function plural(count: number, word: string): string {
  return `${count} ${word}${count === 1 ? '' : 's'}`;
}
