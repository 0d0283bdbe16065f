// The status bar item `nanlens.status`: server state, or how many origins were found.

import * as vscode from 'vscode';
import type { FindingsModel } from './core/findingsModel';
import { statusView } from './core/status';
import type { NanLensServer } from './server';

export const SOURCES_VIEW_ID = 'nanlens.sources';

export class NanLensStatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly disposables: { dispose(): unknown }[] = [];

  constructor(
    private readonly model: FindingsModel,
    private readonly server: NanLensServer,
  ) {
    this.item = vscode.window.createStatusBarItem('nanlens.status', vscode.StatusBarAlignment.Left, 50);
    this.item.name = 'NaN Lens';
    this.disposables.push(
      model.onDidChange(() => {
        this.update();
      }),
      server.onDidChangeState(() => {
        this.update();
      }),
    );
    this.update();
    this.item.show();
  }

  update(): void {
    const view = statusView(this.server.state, this.model.originCount(), this.model.isScanning(), this.server.failure);
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor = view.alarm ? new vscode.ThemeColor('statusBarItem.errorBackground') : undefined;
    this.item.command = this.server.state === 'failed' ? 'nanlens.showLogs' : `${SOURCES_VIEW_ID}.focus`;
  }

  dispose(): void {
    for (const disposable of this.disposables) {
      disposable.dispose();
    }
    this.item.dispose();
  }
}
