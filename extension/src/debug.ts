// The `nanlens` debugger: debugpy's adapter started with the chosen interpreter, configurations that run a
// script (or a bundle's step) with tf.function bodies executed eagerly, and the origin-line breakpoint.

import * as path from 'node:path';
import * as vscode from 'vscode';
import { fileKey } from './core/findingsModel';
import { adapterPython, DEBUG_TYPE, eagerRunLaunchConfig, hasBreakpointAt, resolveLaunchConfig, type LaunchConfig } from './core/launch';
import { locationText } from './core/notebookCells';
import { notebookCellDocument } from './locations';
import { getLog } from './log';
import { ensurePyadapter, resolveInterpreter } from './python';
import { getSettings } from './settings';

class AdapterFactory implements vscode.DebugAdapterDescriptorFactory {
  async createDebugAdapterDescriptor(session: vscode.DebugSession): Promise<vscode.DebugAdapterDescriptor> {
    const fallback = (await resolveInterpreter()).path;
    const python = adapterPython(session.configuration as LaunchConfig, fallback);
    getLog().info(`Debug adapter: ${python} -m debugpy.adapter (session "${session.name}")`);
    return new vscode.DebugAdapterExecutable(python, ['-m', 'debugpy.adapter']);
  }
}

function activePythonFile(): string | undefined {
  const document = vscode.window.activeTextEditor?.document;
  return document?.languageId === 'python' && document.uri.scheme === 'file' ? document.uri.fsPath : undefined;
}

class ConfigurationProvider implements vscode.DebugConfigurationProvider {
  provideDebugConfigurations(): vscode.DebugConfiguration[] {
    return [
      {
        type: DEBUG_TYPE,
        request: 'launch',
        name: 'NaN Lens: run this script with eager functions',
        program: '${file}',
        args: [],
        eager: true,
        justMyCode: false,
      },
    ];
  }

  /** F5 without a launch.json: run the active Python file eagerly. */
  resolveDebugConfiguration(
    folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): vscode.DebugConfiguration | undefined {
    if (!config.type && !config.request && !config.name) {
      const file = activePythonFile();
      if (!file) {
        void vscode.window.showWarningMessage('NaN Lens: open a Python file to run it eagerly under the debugger.');
        return undefined;
      }
      return eagerRunLaunchConfig(file, folder?.uri.fsPath);
    }
    return config;
  }

  async resolveDebugConfigurationWithSubstitutedVariables(
    folder: vscode.WorkspaceFolder | undefined,
    config: vscode.DebugConfiguration,
  ): Promise<vscode.DebugConfiguration | undefined> {
    const interpreter = await resolveInterpreter();
    const resolved = resolveLaunchConfig(config, {
      python: interpreter.path,
      workspaceFolder: folder?.uri.fsPath,
      justMyCode: getSettings(folder?.uri).replayJustMyCode,
    });
    if ('error' in resolved) {
      void vscode.window.showErrorMessage(`NaN Lens: ${resolved.error}`);
      return undefined;
    }
    const python = adapterPython(resolved.config, interpreter.path);
    const check = await ensurePyadapter(python === interpreter.path ? interpreter : { path: python, source: 'setting' });
    if (!check.ok) {
      return undefined; // ensurePyadapter told the person what to fix.
    }
    getLog().info(`Debug launch: ${JSON.stringify({ module: resolved.config.module, program: resolved.config.program, args: resolved.config.args })}`);
    return resolved.config;
  }
}

/**
 * Add a breakpoint at file:line (1-based) unless one is already there. With `cell`, on that line of that cell
 * of the notebook `file` (breakpoints in a notebook live on its cells' documents, not on the .ipynb).
 */
export async function ensureBreakpoint(file: string, line: number, cell?: number): Promise<void> {
  if (cell !== undefined) {
    const document = await notebookCellDocument(file, cell);
    if (!document) {
      return;
    }
    const uri = document.uri.toString();
    const there = vscode.debug.breakpoints.some(
      (bp) => bp instanceof vscode.SourceBreakpoint && bp.location.uri.toString() === uri && bp.location.range.start.line === line - 1,
    );
    if (!there) {
      vscode.debug.addBreakpoints([new vscode.SourceBreakpoint(new vscode.Location(document.uri, new vscode.Position(line - 1, 0)), true)]);
      getLog().info(`Breakpoint added at ${locationText(file, line, cell)}`);
    }
    return;
  }
  const existing = vscode.debug.breakpoints
    .filter((bp): bp is vscode.SourceBreakpoint => bp instanceof vscode.SourceBreakpoint)
    .map((bp) => ({ file: bp.location.uri.fsPath, line: bp.location.range.start.line + 1 }));
  if (hasBreakpointAt(existing, file, line, (a, b) => fileKey(a) === fileKey(b))) {
    return;
  }
  const location = new vscode.Location(vscode.Uri.file(file), new vscode.Position(line - 1, 0));
  vscode.debug.addBreakpoints([new vscode.SourceBreakpoint(location, true)]);
  getLog().info(`Breakpoint added at ${path.basename(file)}:${line}`);
}

export function registerDebugSupport(context: vscode.ExtensionContext): void {
  context.subscriptions.push(
    vscode.debug.registerDebugAdapterDescriptorFactory(DEBUG_TYPE, new AdapterFactory()),
    vscode.debug.registerDebugConfigurationProvider(DEBUG_TYPE, new ConfigurationProvider()),
  );
}
