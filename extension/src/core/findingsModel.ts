// What the extension knows: the server's latest sources, and the per-file line markers drawn from them
// (per notebook cell for findings in notebook code: `cell` set, `line` counted inside that cell).

import * as path from 'node:path';
import { afterLineText, changeLineText } from './markerText';
import type { Cause, Finding, Role, Source } from './protocol';

/**
 * How a marked line is painted: red for an origin, amber for carried / backward-pass origins, grey if stale,
 * blue for the line a cause says to change (the optimizer, the reading line, the layer).
 */
export type MarkerStyle = 'origin' | 'propagated' | 'stale' | 'change';

/** The line a source's cause says to change (drawn apart from the findings: it holds no op). */
export interface ChangeMarker {
  /** 1-based, as in findings. */
  line: number;
  style: 'change';
  cause: Cause;
  /** The source's label, for the after-line text when several sources mark the line. */
  source: string;
  afterText: string;
}

export interface LineMarker {
  /** 1-based, as in findings. */
  line: number;
  style: MarkerStyle;
  /** The finding shown for the line (the most severe one when several share it). */
  finding: Finding;
  /** How many other findings share the line. */
  others: number;
  afterText: string;
}

const SEVERITY: Record<Role, number> = { origin: 0, 'backward-origin': 1, propagated: 2 };

export function markerStyle(finding: Finding): MarkerStyle {
  if (finding.stale) {
    return 'stale';
  }
  return finding.role === 'origin' ? 'origin' : 'propagated';
}

/** Same file test the editor needs: normalized, and case-insensitive where the file system is. */
export function fileKey(file: string, platform: NodeJS.Platform = process.platform): string {
  const normal = platform === 'win32' ? path.win32.normalize(file) : path.posix.normalize(file);
  return platform === 'win32' || platform === 'darwin' ? normal.toLowerCase() : normal;
}

/** The key of a place: one file, or one cell of a notebook file. */
export function placeKey(file: string, cell: number | undefined, platform: NodeJS.Platform = process.platform): string {
  return cell === undefined ? fileKey(file, platform) : `${fileKey(file, platform)}\0cell ${cell}`;
}

/** The origin first, then the other findings, without repeating the origin when the list holds it too. */
export function sourceFindings(source: Source): Finding[] {
  const out: Finding[] = [];
  const seen = new Set<string>();
  for (const finding of source.origin ? [source.origin, ...source.findings] : source.findings) {
    const key = `${finding.file}\0${finding.cell ?? ''}\0${finding.line}\0${finding.role}\0${finding.op.name}`;
    if (!seen.has(key)) {
      seen.add(key);
      out.push(finding);
    }
  }
  return out;
}

function moreSevere(a: Finding, b: Finding): boolean {
  // A current finding beats a stale one; then origin > backward-origin > propagated.
  if (Boolean(a.stale) !== Boolean(b.stale)) {
    return !a.stale;
  }
  return SEVERITY[a.role] < SEVERITY[b.role];
}

type Listener = () => void;

export class FindingsModel {
  private current: Source[] = [];
  private byPlace = new Map<string, Map<number, Finding[]>>();
  private readonly listeners = new Set<Listener>();

  constructor(private readonly platform: NodeJS.Platform = process.platform) {}

  get sources(): readonly Source[] {
    return this.current;
  }

  /** Replace everything with the server's full current state (each notification is complete). */
  replace(sources: Source[]): void {
    this.current = sources;
    this.byPlace = new Map();
    for (const source of sources) {
      if (source.status === 'error') {
        continue;
      }
      for (const finding of sourceFindings(source)) {
        const key = placeKey(finding.file, finding.cell, this.platform);
        let lines = this.byPlace.get(key);
        if (!lines) {
          lines = new Map();
          this.byPlace.set(key, lines);
        }
        const list = lines.get(finding.line) ?? [];
        list.push(finding);
        lines.set(finding.line, list);
      }
    }
    this.fire();
  }

  clear(): void {
    this.replace([]);
  }

  /** Files (as sent by the server) that hold at least one marker. */
  files(): string[] {
    const out = new Set<string>();
    for (const source of this.current) {
      if (source.status !== 'error') {
        for (const finding of sourceFindings(source)) {
          out.add(finding.file);
        }
      }
    }
    return [...out];
  }

  /** One marker per marked line of `file` (of its cell `cell`, for a notebook), sorted by line. */
  markersFor(file: string, cell?: number, afterTextMax?: number): LineMarker[] {
    const lines = this.byPlace.get(placeKey(file, cell, this.platform));
    if (!lines) {
      return [];
    }
    const markers: LineMarker[] = [];
    for (const [line, findings] of lines) {
      let shown = findings[0];
      if (shown === undefined) {
        continue;
      }
      for (const finding of findings) {
        if (moreSevere(finding, shown)) {
          shown = finding;
        }
      }
      const others = findings.length - 1;
      markers.push({ line, style: markerStyle(shown), finding: shown, others, afterText: afterLineText(shown, others, afterTextMax) });
    }
    return markers.sort((a, b) => a.line - b.line);
  }

  /**
   * The lines of `file` (of its cell `cell`) that a cause says to change, sorted by line; none on a line a finding
   * marks already (its hover says the cause) and none for an `op` cause (its line to change is the origin).
   */
  changeMarkersFor(file: string, cell?: number, afterTextMax?: number): ChangeMarker[] {
    const key = placeKey(file, cell, this.platform);
    const marked = this.byPlace.get(key);
    const out = new Map<number, ChangeMarker>();
    for (const source of this.current) {
      const cause = source.cause;
      const change = cause?.change;
      if (source.status === 'error' || !cause || !change || cause.kind === 'op') {
        continue;
      }
      if (placeKey(change.file, change.cell, this.platform) !== key || marked?.has(change.line) || out.has(change.line)) {
        continue;
      }
      out.set(change.line, { line: change.line, style: 'change', cause, source: source.label, afterText: changeLineText(cause, afterTextMax) });
    }
    return [...out.values()].sort((a, b) => a.line - b.line);
  }

  /** Sources that name a causal origin (what the status bar counts). */
  originCount(): number {
    return this.current.filter((s) => s.status !== 'error' && s.origin !== null).length;
  }

  isScanning(): boolean {
    return this.current.some((s) => s.status === 'scanning');
  }

  onDidChange(listener: Listener): { dispose(): void } {
    this.listeners.add(listener);
    return { dispose: () => this.listeners.delete(listener) };
  }

  private fire(): void {
    for (const listener of [...this.listeners]) {
      listener();
    }
  }
}
