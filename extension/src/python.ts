// Interpreter discovery: nanlens.python, else the Python extension's choice (optional), else python3.
// Also the one-time "this interpreter cannot import pyadapter" message.

import * as vscode from 'vscode';
import { describeInterpreter, findInterpreter, type Interpreter } from './core/interpreter';
import { checkPyadapter, pyadapterProblemMessage } from './core/pyadapterCheck';
import { getLog, showLog } from './log';
import { firstWorkspaceFolder, getSettings } from './settings';

/** The part of ms-python.python's exported API NaN Lens uses (no build-time dependency on it). */
interface EnvironmentPath {
  id: string;
  path: string;
}
interface PythonExtensionApi {
  environments: {
    getActiveEnvironmentPath(resource?: vscode.Uri): EnvironmentPath;
    resolveEnvironment(env: EnvironmentPath | string): Promise<{ executable: { uri?: vscode.Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath: vscode.Event<unknown>;
  };
}

const PYTHON_EXTENSION_ID = 'ms-python.python';

async function pythonExtensionApi(): Promise<PythonExtensionApi | undefined> {
  const extension = vscode.extensions.getExtension<Partial<PythonExtensionApi>>(PYTHON_EXTENSION_ID);
  if (!extension) {
    return undefined;
  }
  try {
    const api = extension.isActive ? extension.exports : await extension.activate();
    return api.environments ? (api as PythonExtensionApi) : undefined;
  } catch (error) {
    getLog().warn(`The Python extension did not activate: ${String(error)}`);
    return undefined;
  }
}

async function interpreterFromPythonExtension(): Promise<string | undefined> {
  const api = await pythonExtensionApi();
  if (!api) {
    return undefined;
  }
  const resource = vscode.workspace.workspaceFolders?.[0]?.uri;
  const active = api.environments.getActiveEnvironmentPath(resource);
  const resolved = await api.environments.resolveEnvironment(active);
  return resolved?.executable.uri?.fsPath ?? active.path;
}

export async function resolveInterpreter(): Promise<Interpreter> {
  return findInterpreter({
    setting: getSettings().python,
    workspaceFolder: firstWorkspaceFolder(),
    fromPythonExtension: interpreterFromPythonExtension,
  });
}

/** Calls `listener` when the Python extension's selected interpreter changes (nothing without that extension). */
export async function onPythonExtensionInterpreterChanged(listener: () => void): Promise<vscode.Disposable> {
  const api = await pythonExtensionApi();
  if (!api) {
    return new vscode.Disposable(() => undefined);
  }
  return api.environments.onDidChangeActiveEnvironmentPath(() => {
    listener();
  });
}

const reported = new Set<string>();

/** Forget which interpreters were reported, so an explicit restart shows the message again. */
export function resetPyadapterReports(): void {
  reported.clear();
}

/**
 * True when `interpreter` can import pyadapter. Otherwise logs why and shows one error message per
 * interpreter (not one per restart or command).
 */
export async function ensurePyadapter(interpreter: Interpreter): Promise<{ ok: boolean; problem?: string; version?: string }> {
  const log = getLog();
  log.info(`Python: ${describeInterpreter(interpreter)}`);
  const check = await checkPyadapter(interpreter.path, firstWorkspaceFolder());
  if (check.ok) {
    log.info(`pyadapter ${check.version} found`);
    return { ok: true, version: check.version };
  }
  const message = pyadapterProblemMessage(interpreter.path, check);
  log.error(`${message} (${check.detail})`);
  if (!reported.has(interpreter.path)) {
    reported.add(interpreter.path);
    void vscode.window.showErrorMessage(message, 'Open Settings', 'Show Logs').then((choice) => {
      if (choice === 'Open Settings') {
        void vscode.commands.executeCommand('workbench.action.openSettings', 'nanlens.python');
      } else if (choice === 'Show Logs') {
        showLog();
      }
    });
  }
  return { ok: false, problem: message };
}
