// Entry of the pictures bundle (dist/pictures.js): the op graph and the health timeline.
// In a VS Code webview the model arrives by postMessage and clicks go back to the extension; in the
// `nanlens report` page the model is inlined as JSON and everything works offline.

import 'uplot/dist/uPlot.min.css';
import './pictures.css';
import { readPictureModel, type PictureModel, type PictureNode } from './core/model';
import { renderGraph } from './graphView';
import { renderTimeline } from './timelineView';

interface VsCodeApi {
  postMessage(message: unknown): void;
}

declare function acquireVsCodeApi(): VsCodeApi;

type View = 'graph' | 'timeline';

function containers(): { root: HTMLElement; view: View }[] {
  return [...document.querySelectorAll<HTMLElement>('[data-nanlens-view]')].map((root) => ({
    root,
    view: root.dataset.nanlensView === 'timeline' ? 'timeline' : 'graph',
  }));
}

function showMessage(root: HTMLElement, text: string, className = 'nl-status'): void {
  const p = document.createElement('p');
  p.className = className;
  p.textContent = text;
  root.replaceChildren(p);
}

function render(model: PictureModel, open: (node: PictureNode) => void): void {
  for (const { root, view } of containers()) {
    try {
      if (view === 'graph') {
        renderGraph(root, model, { open });
      } else {
        renderTimeline(root, model);
      }
    } catch (error) {
      showMessage(root, `Could not draw this picture: ${String(error)}`, 'nl-status nl-error');
    }
  }
  document.body.dataset.nanlensRendered = 'true';
}

function startReport(data: HTMLElement): void {
  let model: PictureModel | undefined;
  try {
    model = readPictureModel(JSON.parse(data.textContent || 'null'));
  } catch {
    model = undefined;
  }
  if (!model) {
    for (const { root } of containers()) {
      showMessage(root, 'This report holds no picture data.', 'nl-status nl-error');
    }
    return;
  }
  // A report cannot open files: selecting a node shows its file and line under the graph.
  render(model, () => undefined);
}

function startWebview(): void {
  const vscode = acquireVsCodeApi();
  window.addEventListener('message', (event: MessageEvent<unknown>) => {
    const message = event.data as { type?: unknown; model?: unknown; text?: unknown } | null;
    if (!message || typeof message !== 'object') {
      return;
    }
    if (message.type === 'model') {
      const model = readPictureModel(message.model);
      if (!model) {
        for (const { root } of containers()) {
          showMessage(root, 'The language server sent no usable picture data.', 'nl-status nl-error');
        }
        return;
      }
      render(model, (node) => {
        if (node.file !== undefined) {
          vscode.postMessage({ type: 'open', file: node.file, line: node.line ?? 1 });
        }
      });
    } else if (message.type === 'status' && typeof message.text === 'string') {
      for (const { root } of containers()) {
        showMessage(root, message.text, 'nl-status');
      }
    } else if (message.type === 'error' && typeof message.text === 'string') {
      for (const { root } of containers()) {
        showMessage(root, message.text, 'nl-status nl-error');
      }
    }
  });
  vscode.postMessage({ type: 'ready' });
}

const inlined = document.getElementById('nanlens-pictures');
if (inlined) {
  startReport(inlined);
} else if (typeof acquireVsCodeApi === 'function') {
  startWebview();
}
