// Going to a finding's place: a line of a file, or a line of one cell of a notebook (opened in the notebook
// editor, that cell revealed and the cursor put on the line).

import * as vscode from 'vscode';
import { cellDocument } from './core/notebookCells';
import { getLog } from './log';

/** Internal (not in the palette): `[file, line, cell?]`, used by the Captures and Dumps view's notebook rows. */
export const SHOW_LOCATION_COMMAND = 'nanlens.showLocation';

/** The document of a notebook cell, opening the notebook (without showing it) when it is not open yet. */
export async function notebookCellDocument(file: string, cell: number): Promise<vscode.TextDocument | undefined> {
  const open = cellDocument(vscode.workspace.notebookDocuments, file, cell);
  if (open) {
    return open;
  }
  try {
    const notebook = await vscode.workspace.openNotebookDocument(vscode.Uri.file(file));
    return cell < notebook.cellCount ? notebook.cellAt(cell).document : undefined;
  } catch (error) {
    getLog().warn(`Cannot open the notebook ${file}: ${String(error)}`);
    return undefined;
  }
}

/** Show `file` at `line` (1-based); with `cell`, that line of that cell of the notebook `file`. */
export async function showLocation(
  file: string,
  line: number,
  cell?: number,
  viewColumn?: vscode.ViewColumn,
): Promise<void> {
  const position = new vscode.Position(Math.max(line - 1, 0), 0);
  const selection = new vscode.Range(position, position);
  if (cell === undefined) {
    if (file.toLowerCase().endsWith('.ipynb')) {
      // A notebook place without a cell: open the notebook editor rather than its JSON.
      await vscode.commands.executeCommand('vscode.open', vscode.Uri.file(file), { viewColumn });
      return;
    }
    await vscode.window.showTextDocument(vscode.Uri.file(file), { selection, viewColumn });
    return;
  }
  const document = await notebookCellDocument(file, cell);
  if (!document) {
    void vscode.window.showWarningMessage(`NaN Lens: ${file} has no cell ${cell + 1} (it changed since the run?).`);
    return;
  }
  const notebook = vscode.workspace.notebookDocuments.find((nb) =>
    nb.getCells().some((c) => c.document.uri.toString() === document.uri.toString()),
  );
  if (notebook) {
    await vscode.window.showNotebookDocument(notebook, {
      viewColumn,
      selections: [new vscode.NotebookRange(cell, cell + 1)],
    });
  }
  // A cell's document opens in its notebook's editor; this focuses the cell and puts the cursor on the line.
  await vscode.window.showTextDocument(document, { selection, viewColumn });
}
