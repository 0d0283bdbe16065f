import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { FindingsModel } from '../src/core/findingsModel';
import { cellDocument, findNotebook, locationText, placeOf, type DocumentLike, type NotebookLike } from '../src/core/notebookCells';
import { readFinding, readFindingsNotification, readReplayTarget } from '../src/core/protocol';
import { replayTargetOf, sourceRows } from '../src/core/sourceTree';
import { at, bundleSource, NOTEBOOK, notebookSource, TRAIN } from './fixtures';

function doc(scheme: string, fsPath: string, text = `${scheme}:${fsPath}`): DocumentLike {
  return { uri: { scheme, fsPath, toString: () => text } };
}

/** A notebook as vscode.NotebookDocument shows it: cell documents with `vscode-notebook-cell:` URIs. */
function notebook(file: string, cells: number, scheme = 'file'): NotebookLike & { docs: DocumentLike[] } {
  const docs = Array.from({ length: cells }, (_, i) => doc('vscode-notebook-cell', file, `vscode-notebook-cell:${file}#W${i}sZmlsZQ%3D%3D`));
  return {
    uri: { scheme, fsPath: file },
    cellCount: cells,
    cellAt: (index: number) => ({ document: at(docs, index) }),
    docs,
  };
}

describe('notebook cells', () => {
  it('finds the document of cell N of an open notebook, counting every cell', () => {
    const nb = notebook(NOTEBOOK, 3);
    const other = notebook('/work/proj/other.ipynb', 5);
    assert.equal(findNotebook([other, nb], NOTEBOOK, 'linux'), nb);
    assert.equal(cellDocument([other, nb], NOTEBOOK, 2, 'linux'), nb.docs[2]);
    assert.equal(cellDocument([other, nb], NOTEBOOK, 3, 'linux'), undefined); // fewer cells than the run had
    assert.equal(cellDocument([other, nb], NOTEBOOK, -1, 'linux'), undefined);
    assert.equal(cellDocument([other], NOTEBOOK, 0, 'linux'), undefined); // not open
    // An untitled notebook is never the saved file, whatever its path looks like.
    assert.equal(findNotebook([notebook(NOTEBOOK, 3, 'untitled')], NOTEBOOK, 'linux'), undefined);
    // Same file rules as everywhere: case-insensitive where the file system is.
    const win = notebook('c:\\proj\\Analysis.ipynb', 2);
    assert.equal(cellDocument([win], 'C:\\PROJ\\analysis.ipynb', 1, 'win32'), win.docs[1]);
  });

  it('maps a document back to the file, or the notebook file and cell index, it shows', () => {
    const nb = notebook(NOTEBOOK, 3);
    assert.deepEqual(placeOf(nb.docs[2] as DocumentLike, [nb]), { file: NOTEBOOK, cell: 2 });
    assert.deepEqual(placeOf(nb.docs[0] as DocumentLike, [nb]), { file: NOTEBOOK, cell: 0 });
    assert.deepEqual(placeOf(doc('file', TRAIN), [nb]), { file: TRAIN });
    assert.equal(placeOf(doc('untitled', 'Untitled-1'), [nb]), undefined);
    assert.equal(placeOf(doc('vscode-notebook-cell', NOTEBOOK, 'vscode-notebook-cell:elsewhere#1'), [nb]), undefined);
    const unsaved = notebook('Untitled-1.ipynb', 1, 'untitled');
    assert.equal(placeOf(unsaved.docs[0] as DocumentLike, [unsaved]), undefined);
  });

  it('says where a finding is, cells counted from 1 as a person counts them', () => {
    assert.equal(locationText(TRAIN, 42), 'train.py:42');
    assert.equal(locationText(NOTEBOOK, 2, 2), 'analysis.ipynb cell 3:2');
  });
});

describe('notebook findings in the model', () => {
  it('keeps markers per cell: a cell line is never drawn in another cell or on the .ipynb', () => {
    const model = new FindingsModel('linux');
    model.replace(readFindingsNotification({ sources: [notebookSource(), bundleSource()] }));
    assert.deepEqual(model.markersFor(NOTEBOOK, 2).map((m) => [m.line, m.style]), [[2, 'origin'], [3, 'propagated']]);
    assert.deepEqual(model.markersFor(NOTEBOOK, 1).map((m) => [m.line, m.style]), [[2, 'propagated']]);
    assert.deepEqual(model.markersFor(NOTEBOOK, 0), []);
    assert.deepEqual(model.markersFor(NOTEBOOK), []);
    assert.deepEqual(model.markersFor(TRAIN).map((m) => m.line), [42, 43]);
    assert.equal(at(model.markersFor(NOTEBOOK, 2), 0).finding.cell, 2);
  });

  it('reads the cell of findings and replay targets, and drops findings whose cell is unusable', () => {
    const base = { file: NOTEBOOK, line: 2, role: 'origin', op: { name: 'Log', type: 'Log' } };
    assert.equal(readFinding({ ...base, cell: 0 })?.cell, 0);
    assert.equal(readFinding({ ...base, cell: null })?.cell, undefined);
    assert.equal('cell' in (readFinding({ ...base, file: TRAIN }) ?? {}), false);
    assert.equal(readFinding({ ...base, cell: -1 }), undefined);
    assert.equal(readFinding({ ...base, cell: '2' }), undefined);
    assert.equal(readFinding({ ...base, cell: 1.5 }), undefined);
    const target = { bundle: '/b', file: NOTEBOOK, line: 2, step: 5, cell: 2 };
    assert.deepEqual(readReplayTarget(target), target);
    assert.deepEqual(readReplayTarget({ ...target, cell: 'x' }), { bundle: '/b', file: NOTEBOOK, line: 2, step: 5 });
    // The replay runs the cells as a script from their cell files: the debugger's breakpoint goes there.
    const withFile = { ...target, cellFile: '/w/.nanlens/cells/analysis-0a1b2c3d/cell2.py' };
    assert.deepEqual(readReplayTarget(withFile), withFile);
  });

  it('shows notebook findings in the view by cell, and replays the origin cell', () => {
    const source = notebookSource();
    assert.deepEqual(replayTargetOf(source), { bundle: source.path, file: NOTEBOOK, line: 2, step: 5, cell: 2 });
    const row = at(sourceRows([source]), 0);
    assert.equal(row.description, 'origin: Log at analysis.ipynb cell 3:2');
    assert.deepEqual(
      row.children.map((c) => [c.label, c.cell, c.line]),
      [
        ['Log — analysis.ipynb cell 3:2', 2, 2],
        ['Mul — analysis.ipynb cell 3:3', 2, 3],
        ['Mean — analysis.ipynb cell 2:2', 1, 2],
      ],
    );
    assert.equal('cell' in at(at(sourceRows([bundleSource()]), 0).children, 0), false);
  });
});
