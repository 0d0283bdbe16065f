// Which Python runs the NaN Lens server and the debugger, in a fixed order of preference.

import * as os from 'node:os';
import * as path from 'node:path';

export type InterpreterSource = 'setting' | 'python-extension' | 'default';

export interface Interpreter {
  path: string;
  source: InterpreterSource;
}

export interface InterpreterLookups {
  /** The `nanlens.python` setting, raw (may hold ${workspaceFolder} or ~). */
  setting: string | undefined;
  /** The first workspace folder, for relative paths and ${workspaceFolder}. */
  workspaceFolder: string | undefined;
  /** The interpreter the ms-python.python extension has selected, when that extension is installed. */
  fromPythonExtension: () => Promise<string | undefined>;
  platform?: NodeJS.Platform;
  home?: string;
}

/** Expand ${workspaceFolder}, ${userHome}, ~ and ${env:NAME}; a relative path is taken from the workspace folder. */
export function expandPythonSetting(
  value: string,
  workspaceFolder: string | undefined,
  home: string = os.homedir(),
  env: NodeJS.ProcessEnv = process.env,
): string {
  let out = value.trim();
  out = out.replace(/\$\{env:([^}]+)\}/g, (_m, name: string) => env[name] ?? '');
  out = out.replace(/\$\{userHome\}/g, home);
  if (workspaceFolder !== undefined) {
    out = out.replace(/\$\{workspaceFolder\}/g, workspaceFolder);
  }
  if (out === '~' || out.startsWith('~/')) {
    out = path.join(home, out.slice(1));
  }
  // A bare command name ('python3') is looked up on PATH; anything with a separator is a path.
  const looksLikePath = out.includes('/') || out.includes('\\');
  if (looksLikePath && !path.isAbsolute(out) && workspaceFolder !== undefined) {
    out = path.join(workspaceFolder, out);
  }
  return out;
}

export function defaultPython(platform: NodeJS.Platform = process.platform): string {
  return platform === 'win32' ? 'python' : 'python3';
}

/** The setting wins; then the Python extension's interpreter; then python3 on PATH. */
export async function findInterpreter(lookups: InterpreterLookups): Promise<Interpreter> {
  const setting = lookups.setting?.trim();
  if (setting) {
    return { path: expandPythonSetting(setting, lookups.workspaceFolder, lookups.home), source: 'setting' };
  }
  let fromExtension: string | undefined;
  try {
    fromExtension = (await lookups.fromPythonExtension())?.trim();
  } catch {
    fromExtension = undefined; // The Python extension failing must not stop NaN Lens.
  }
  if (fromExtension) {
    return { path: fromExtension, source: 'python-extension' };
  }
  return { path: defaultPython(lookups.platform), source: 'default' };
}

export function describeInterpreter(interpreter: Interpreter): string {
  switch (interpreter.source) {
    case 'setting':
      return `${interpreter.path} (from the nanlens.python setting)`;
    case 'python-extension':
      return `${interpreter.path} (selected in the Python extension)`;
    case 'default':
      return `${interpreter.path} (default; set nanlens.python to choose another)`;
  }
}
