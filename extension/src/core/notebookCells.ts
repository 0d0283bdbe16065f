// Notebook findings, as plain logic. A finding in notebook code names the `.ipynb` (`file`), the 0-based index
// of its cell among ALL the notebook's cells, markdown cells included (`cell`), and a 1-based line inside that
// cell. The editor shows each cell as a text document of its own (`vscode-notebook-cell:` URI); these functions
// map between the two over anything shaped like vscode.NotebookDocument. No `vscode` import here.

import * as path from 'node:path';
import { fileKey } from './findingsModel';

export const NOTEBOOK_CELL_SCHEME = 'vscode-notebook-cell';

/** Where a finding is shown: a file, or one cell of a notebook file. */
export interface Place {
  file: string;
  cell?: number;
}

/** What these functions read of a vscode.TextDocument / vscode.NotebookDocument. */
export interface DocumentLike {
  readonly uri: { readonly scheme: string; readonly fsPath: string; toString(): string };
}

export interface NotebookLike<D extends DocumentLike = DocumentLike> {
  readonly uri: { readonly scheme: string; readonly fsPath: string };
  readonly cellCount: number;
  cellAt(index: number): { readonly document: D };
}

/** The open notebook saved as `file` (notebooks not backed by a file, e.g. untitled ones, never match). */
export function findNotebook<N extends NotebookLike>(
  notebooks: readonly N[],
  file: string,
  platform: NodeJS.Platform = process.platform,
): N | undefined {
  const key = fileKey(file, platform);
  return notebooks.find((nb) => nb.uri.scheme === 'file' && fileKey(nb.uri.fsPath, platform) === key);
}

/** The document of cell `cell` of the open notebook `file`; undefined when it is not open or has fewer cells. */
export function cellDocument<D extends DocumentLike>(
  notebooks: readonly NotebookLike<D>[],
  file: string,
  cell: number,
  platform: NodeJS.Platform = process.platform,
): D | undefined {
  const notebook = findNotebook(notebooks, file, platform);
  if (!notebook || !Number.isInteger(cell) || cell < 0 || cell >= notebook.cellCount) {
    return undefined;
  }
  return notebook.cellAt(cell).document;
}

/**
 * The place a document shows: a `file:` document is its file; a notebook cell's document is (its notebook's
 * file, the cell's index); anything else (untitled, output, a cell of an unsaved notebook) shows none.
 */
export function placeOf(document: DocumentLike, notebooks: readonly NotebookLike[]): Place | undefined {
  const uri = document.uri;
  if (uri.scheme === 'file') {
    return { file: uri.fsPath };
  }
  if (uri.scheme !== NOTEBOOK_CELL_SCHEME) {
    return undefined;
  }
  const wanted = uri.toString();
  for (const notebook of notebooks) {
    if (notebook.uri.scheme !== 'file') {
      continue;
    }
    for (let index = 0; index < notebook.cellCount; index++) {
      if (notebook.cellAt(index).document.uri.toString() === wanted) {
        return { file: notebook.uri.fsPath, cell: index };
      }
    }
  }
  return undefined;
}

/** Where a finding is, as a person reads it: `train.py:42`, or `analysis.ipynb cell 3:2` (cells counted from 1). */
export function locationText(file: string, line: number, cell?: number): string {
  const base = path.basename(file);
  return cell === undefined ? `${base}:${line}` : `${base} cell ${cell + 1}:${line}`;
}
