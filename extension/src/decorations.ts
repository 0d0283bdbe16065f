// Marked lines in visible editors: gutter icon, whole-line tint, overview-ruler mark and after-line text; the line
// a cause says to change (the optimizer, the reading line, the layer) gets its own blue marker.
// Lines that hold a breakpoint get the same marker without a gutter icon, so the breakpoint dot stays visible.
// A notebook cell's editor shows the markers of that cell (core/notebookCells.ts maps it to notebook and index).

import * as vscode from 'vscode';
import type { FindingsModel, MarkerStyle } from './core/findingsModel';
import { gutterIconSvg, MARKER_COLORS, svgDataUri } from './core/gutterIcons';
import { placeOf } from './core/notebookCells';
import { getSettings } from './settings';

const STYLES: readonly MarkerStyle[] = ['origin', 'propagated', 'stale', 'change'];

interface StyleTypes {
  withIcon: vscode.TextEditorDecorationType;
  /** For lines with a breakpoint: no gutter icon over the breakpoint dot. */
  withoutIcon: vscode.TextEditorDecorationType;
}

function decorationType(style: MarkerStyle, withIcon: boolean): vscode.TextEditorDecorationType {
  const colors = MARKER_COLORS[style];
  return vscode.window.createTextEditorDecorationType({
    isWholeLine: true,
    backgroundColor: colors.lineBackground,
    overviewRulerColor: colors.solid,
    overviewRulerLane: vscode.OverviewRulerLane.Left,
    rangeBehavior: vscode.DecorationRangeBehavior.ClosedClosed,
    ...(withIcon ? { gutterIconPath: vscode.Uri.parse(svgDataUri(gutterIconSvg(style))), gutterIconSize: '80%' } : {}),
    after: { color: colors.text, margin: '0 0 0 2em', fontStyle: style === 'stale' ? 'italic' : 'normal' },
  });
}

export class DecorationPainter implements vscode.Disposable {
  private readonly types = new Map<MarkerStyle, StyleTypes>();
  private readonly disposables: { dispose(): unknown }[] = [];

  constructor(private readonly model: FindingsModel) {
    for (const style of STYLES) {
      this.types.set(style, { withIcon: decorationType(style, true), withoutIcon: decorationType(style, false) });
    }
    this.disposables.push(
      model.onDidChange(() => {
        this.paintAll();
      }),
      vscode.window.onDidChangeVisibleTextEditors(() => {
        this.paintAll();
      }),
      // Cells added, removed or moved: a cell editor may now show another index.
      vscode.workspace.onDidChangeNotebookDocument((event) => {
        if (event.contentChanges.length > 0) {
          this.paintAll();
        }
      }),
      vscode.debug.onDidChangeBreakpoints(() => {
        this.paintAll();
      }),
    );
  }

  paintAll(): void {
    for (const editor of vscode.window.visibleTextEditors) {
      this.paint(editor);
    }
  }

  paint(editor: vscode.TextEditor): void {
    const settings = getSettings(editor.document.uri);
    const document = editor.document;
    const place = settings.decorationsEnabled ? placeOf(document, vscode.workspace.notebookDocuments) : undefined;
    const markers: { line: number; style: MarkerStyle; afterText: string }[] = place
      ? [...this.model.markersFor(place.file, place.cell), ...this.model.changeMarkersFor(place.file, place.cell)]
      : [];
    const breakpointLines = markers.length > 0 ? this.breakpointLines(document.uri) : new Set<number>();
    const ranges = new Map<vscode.TextEditorDecorationType, vscode.DecorationOptions[]>();
    for (const types of this.types.values()) {
      ranges.set(types.withIcon, []);
      ranges.set(types.withoutIcon, []);
    }
    for (const marker of markers) {
      if (marker.line > document.lineCount) {
        continue; // The file got shorter than the run it was marked from.
      }
      const types = this.types.get(marker.style);
      if (!types) {
        continue;
      }
      const type = breakpointLines.has(marker.line) ? types.withoutIcon : types.withIcon;
      const option: vscode.DecorationOptions = { range: document.lineAt(marker.line - 1).range };
      if (settings.afterLineText) {
        option.renderOptions = { after: { contentText: marker.afterText } };
      }
      ranges.get(type)?.push(option);
    }
    for (const [type, options] of ranges) {
      editor.setDecorations(type, options);
    }
  }

  /** 1-based lines of `uri` that hold a source breakpoint (enabled or not: both draw a dot). */
  private breakpointLines(uri: vscode.Uri): Set<number> {
    const lines = new Set<number>();
    for (const bp of vscode.debug.breakpoints) {
      if (bp instanceof vscode.SourceBreakpoint && bp.location.uri.toString() === uri.toString()) {
        lines.add(bp.location.range.start.line + 1);
      }
    }
    return lines;
  }

  dispose(): void {
    for (const disposable of this.disposables) {
      disposable.dispose();
    }
    for (const types of this.types.values()) {
      types.withIcon.dispose();
      types.withoutIcon.dispose();
    }
  }
}
