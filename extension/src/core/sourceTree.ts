// The rows of the "Captures and dumps" view, as plain data (the view turns them into TreeItems).

import { runsText, waitingReason } from './consent';
import { findingSentence, roleLabel, truncate } from './markerText';
import { markerStyle, sourceFindings } from './findingsModel';
import { locationText } from './notebookCells';
import type { Finding, ReplayTarget, Source } from './protocol';

export type IconId = 'package' | 'database' | 'loading~spin' | 'error' | 'warning' | 'circle-slash' | 'pass' | 'search';
export type IconColor = 'error' | 'warning' | 'disabled' | 'passed' | undefined;

export interface SourceRow {
  type: 'source';
  id: string;
  /** The bundle or dump folder (the argument "Locate" takes). */
  path: string;
  label: string;
  description: string;
  tooltip: string;
  icon: IconId;
  iconColor: IconColor;
  /**
   * `nanlens.bundle.origin` (can be replayed), `nanlens.bundle.unlocated` (waits for the user's Locate),
   * `nanlens.bundle`, `nanlens.dump`.
   */
  contextValue: string;
  replayTarget?: ReplayTarget;
  children: FindingRow[];
}

export interface FindingRow {
  type: 'finding';
  id: string;
  label: string;
  description: string;
  tooltip: string;
  icon: IconId;
  iconColor: IconColor;
  contextValue: 'nanlens.finding';
  file: string;
  line: number;
  /** The finding is in this cell (0-based, among all cells) of the notebook `file`. */
  cell?: number;
}

export function replayTargetOf(source: Source): ReplayTarget | undefined {
  if (source.kind !== 'bundle' || source.status !== 'ok' || source.origin === null) {
    return undefined;
  }
  const { file, line, cell } = source.origin;
  return cell === undefined ? { bundle: source.path, file, line, step: source.step } : { bundle: source.path, file, line, step: source.step, cell };
}

function where(finding: Finding): string {
  return locationText(finding.file, finding.line, finding.cell);
}

function findingRow(source: Source, finding: Finding, index: number): FindingRow {
  const style = markerStyle(finding);
  const stale = finding.stale ? ' (stale: the file changed since this run)' : '';
  return {
    type: 'finding',
    id: `${source.id}#${index}`,
    label: `${finding.op.type} — ${where(finding)}`,
    description: `${roleLabel(finding.role)}${finding.stale ? ' (stale)' : ''}`,
    tooltip: `${findingSentence(finding)}\n${finding.file}${finding.cell === undefined ? '' : ` cell ${finding.cell + 1}`}:${finding.line}${stale}`,
    icon: style === 'stale' ? 'circle-slash' : style === 'origin' ? 'error' : 'warning',
    iconColor: style === 'stale' ? 'disabled' : style === 'origin' ? 'error' : 'warning',
    contextValue: 'nanlens.finding',
    file: finding.file,
    line: finding.line,
    ...(finding.cell === undefined ? {} : { cell: finding.cell }),
  };
}

function sourceDescription(source: Source): string {
  switch (source.status) {
    case 'scanning':
      return 'scanning…';
    case 'error':
      return truncate(source.error ?? 'could not be read', 80);
    case 'unlocated': {
      const why = waitingReason(source);
      return `not located${why ? ` (${why})` : ''}: Locate ${runsText(source)}`;
    }
    case 'ok':
      return source.origin
        ? `origin: ${source.origin.op.type} at ${where(source.origin)}`
        : 'finite: no NaN/Inf found';
  }
}

export function sourceRows(sources: readonly Source[]): SourceRow[] {
  return sources.map((source) => {
    const replayTarget = replayTargetOf(source);
    const kindText = source.kind === 'bundle' ? 'Capture bundle' : 'Dump';
    const description = sourceDescription(source);
    let icon: IconId = source.kind === 'bundle' ? 'package' : 'database';
    let iconColor: IconColor;
    let tooltip = `${kindText}: ${source.path}\n${source.status === 'error' ? (source.error ?? 'error') : description}`;
    if (source.status === 'unlocated') {
      icon = 'search';
      tooltip =
        `${kindText}: ${source.path}\nNo findings yet. Locating it replays the captured step, which ` +
        `${source.entry ? `runs ${source.entry}` : "runs the bundle's training program"}: NaN Lens does that only ` +
        'when you click Locate.' +
        (source.foreign ? `\nFrom elsewhere (${source.foreign}): never located automatically.` : '') +
        (source.untrusted ? `\n${source.untrusted.message}` : '');
    } else if (source.status === 'scanning') {
      icon = 'loading~spin';
    } else if (source.status === 'error') {
      icon = 'warning';
      iconColor = 'warning';
    } else if (source.origin) {
      iconColor = 'error';
    }
    const row: SourceRow = {
      type: 'source',
      id: source.id,
      path: source.path,
      label: source.label,
      description,
      tooltip,
      icon,
      iconColor,
      contextValue: replayTarget
        ? 'nanlens.bundle.origin'
        : source.kind === 'dump'
          ? 'nanlens.dump'
          : source.status === 'unlocated'
            ? 'nanlens.bundle.unlocated'
            : 'nanlens.bundle',
      children: source.status === 'error' || source.status === 'unlocated' ? [] : sourceFindings(source).map((f, i) => findingRow(source, f, i)),
    };
    if (replayTarget) {
      row.replayTarget = replayTarget;
    }
    return row;
  });
}
