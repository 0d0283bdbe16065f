// NaN Lens: wire the findings model to the language server, the editor decorations, the status bar,
// the view, the commands and the debugger.

import * as vscode from 'vscode';
import { registerCommands } from './commands';
import { UnlocatedNotifier } from './consent';
import { TrustMemory } from './core/consent';
import { FindingsModel } from './core/findingsModel';
import { DecorationPainter } from './decorations';
import { registerDebugSupport } from './debug';
import { getLog } from './log';
import { Pictures } from './pictures';
import { onPythonExtensionInterpreterChanged } from './python';
import { NanLensServer } from './server';
import { affectsDecorations, affectsInterpreter, affectsServer, getSettings } from './settings';
import { SourcesView } from './sourcesView';
import { NanLensStatusBar } from './statusBar';

let server: NanLensServer | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const log = getLog();
  context.subscriptions.push(log);
  const manifest = context.extension.packageJSON as { version?: string };
  log.info(`NaN Lens ${manifest.version ?? ''} activating`);

  const model = new FindingsModel();
  server = new NanLensServer(model);
  const painter = new DecorationPainter(model);
  context.subscriptions.push(server, painter, new NanLensStatusBar(model, server), new SourcesView(model));
  const notifier = new UnlocatedNotifier(model);
  context.subscriptions.push(notifier);
  registerCommands(context, { model, server, trust: new TrustMemory(), notifier });
  context.subscriptions.push(new Pictures(context, model, server));
  registerDebugSupport(context);

  const running = server;
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (affectsInterpreter(event)) {
        const python = getSettings().python;
        void running.restart(`nanlens.python changed to "${python}"`);
      } else if (affectsServer(event)) {
        void running.sendSettings();
      }
      if (affectsDecorations(event)) {
        painter.paintAll();
      }
    }),
  );
  // Not awaited: activating the Python extension must not delay NaN Lens.
  void onPythonExtensionInterpreterChanged(() => {
    if (!getSettings().python.trim()) {
      void running.restart('the Python extension selected another interpreter');
    }
  }).then((subscription) => context.subscriptions.push(subscription));

  void running.restart('activation');
}

export async function deactivate(): Promise<void> {
  await server?.stop();
}
