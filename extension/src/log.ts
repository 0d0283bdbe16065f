// The "NaN Lens" output channel: the extension's own log and the language server's stderr.

import * as vscode from 'vscode';

let channel: vscode.LogOutputChannel | undefined;

export function getLog(): vscode.LogOutputChannel {
  channel ??= vscode.window.createOutputChannel('NaN Lens', { log: true });
  return channel;
}

export function showLog(): void {
  getLog().show(true);
}
