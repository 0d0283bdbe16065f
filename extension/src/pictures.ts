// The "Op Graph" and "Health Timeline" webviews: their commands and the panels (one per source and view) that
// draw the server's picture model with dist/pictures.js. The lenses and hover links that run the commands on
// origin lines are the language server's (it owns every lens and hover there); this side only draws.

import { randomBytes } from 'node:crypto';
import * as vscode from 'vscode';
import type { FindingsModel } from './core/findingsModel';
import {
  PICTURE_MODEL_COMMAND,
  SHOW_OP_GRAPH,
  SHOW_TIMELINE,
  VIEW_TITLES,
  drawableSources,
  makeNonce,
  panelTitle,
  pictureSourceId,
  readPictureAnswer,
  readWebviewMessage,
  webviewHtml,
  type PictureView,
} from './core/pictures';
import { showLocation } from './locations';
import { getLog } from './log';
import type { NanLensServer } from './server';

const VIEW_TYPE = 'nanlens.pictures';

class PicturePanel {
  private disposed = false;

  constructor(
    readonly panel: vscode.WebviewPanel,
    readonly view: PictureView,
    readonly sourceId: string,
    private readonly server: NanLensServer,
    onDispose: () => void,
  ) {
    panel.webview.onDidReceiveMessage(async (raw: unknown) => {
      const message = readWebviewMessage(raw);
      if (message?.type === 'ready') {
        await this.load();
      } else if (message?.type === 'open') {
        await showLocation(message.file, message.line, undefined, vscode.ViewColumn.One);
      }
    });
    panel.onDidDispose(() => {
      this.disposed = true;
      onDispose();
    });
  }

  /** Ask the server for the picture model and hand it to the page. */
  async load(): Promise<void> {
    await this.post({ type: 'status', text: 'Asking the NaN Lens server for the picture…' });
    let answer: unknown;
    try {
      answer = await this.server.executeCommand<unknown>(PICTURE_MODEL_COMMAND, [this.sourceId]);
    } catch (error) {
      answer = { error: `the language server failed: ${String(error)}` };
    }
    const reply = readPictureAnswer(answer);
    if ('error' in reply) {
      getLog().warn(`No ${VIEW_TITLES[this.view]} for ${this.sourceId}: ${reply.error}`);
      await this.post({ type: 'error', text: `NaN Lens: ${reply.error}` });
    } else {
      await this.post({ type: 'model', model: reply.model });
    }
  }

  private async post(message: unknown): Promise<void> {
    if (!this.disposed) {
      await this.panel.webview.postMessage(message);
    }
  }
}

export class Pictures implements vscode.Disposable {
  private readonly panels = new Map<string, PicturePanel>();
  private readonly disposables: { dispose(): unknown }[] = [];

  constructor(
    private readonly context: vscode.ExtensionContext,
    private readonly model: FindingsModel,
    private readonly server: NanLensServer,
  ) {
    this.disposables.push(
      vscode.commands.registerCommand(SHOW_OP_GRAPH, (arg: unknown) => this.show('graph', arg)),
      vscode.commands.registerCommand(SHOW_TIMELINE, (arg: unknown) => this.show('timeline', arg)),
    );
  }

  private async pickSource(): Promise<string | undefined> {
    const sources = drawableSources(this.model.sources);
    if (sources.length === 0) {
      void vscode.window.showInformationMessage(
        'NaN Lens: no capture bundle or dump has been read yet. Locate a bundle or run a file with a dump first.',
      );
      return undefined;
    }
    const withOrigin = sources.filter((s) => s.origin !== null);
    if (sources.length === 1 || withOrigin.length === 1) {
      return (withOrigin[0] ?? sources[0])?.id;
    }
    const items = sources.map((s) => ({
      label: s.label,
      description: s.origin ? `origin: ${s.origin.op.type}` : 'finite',
      detail: s.path,
      id: s.id,
    }));
    return (await vscode.window.showQuickPick(items, { title: 'NaN Lens: draw which source?' }))?.id;
  }

  async show(view: PictureView, arg: unknown): Promise<void> {
    const sourceId = pictureSourceId(arg, this.model.sources) ?? (await this.pickSource());
    if (!sourceId) {
      return;
    }
    const key = `${view}\0${sourceId}`;
    const open = this.panels.get(key);
    if (open) {
      open.panel.reveal();
      await open.load();
      return;
    }
    const label = this.model.sources.find((s) => s.id === sourceId)?.label ?? sourceId.replace(/^\w+:/, '');
    const dist = vscode.Uri.joinPath(this.context.extensionUri, 'dist');
    const panel = vscode.window.createWebviewPanel(VIEW_TYPE, panelTitle(view, label), vscode.ViewColumn.Beside, {
      enableScripts: true,
      localResourceRoots: [dist],
      retainContextWhenHidden: true,
    });
    const webview = panel.webview;
    const picture = new PicturePanel(panel, view, sourceId, this.server, () => this.panels.delete(key));
    this.panels.set(key, picture);
    webview.html = webviewHtml({
      view,
      scriptUri: webview.asWebviewUri(vscode.Uri.joinPath(dist, 'pictures.js')).toString(),
      styleUri: webview.asWebviewUri(vscode.Uri.joinPath(dist, 'pictures.css')).toString(),
      cspSource: webview.cspSource,
      nonce: makeNonce((n) => randomBytes(n)),
      title: panelTitle(view, label),
    });
    getLog().info(`Showing the ${VIEW_TITLES[view]} of ${sourceId}`);
  }

  dispose(): void {
    for (const picture of this.panels.values()) {
      picture.panel.dispose();
    }
    this.panels.clear();
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}
