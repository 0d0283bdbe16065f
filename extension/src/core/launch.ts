// Debug configurations of type `nanlens` and the command lines NaN Lens runs, as plain data.

import * as path from 'node:path';
import type { ReplayTarget } from './protocol';

export const DEBUG_TYPE = 'nanlens';

/** The launch attributes the `nanlens` debugger understands (debugpy's launch request plus `eager`). */
export interface LaunchConfig {
  type: string;
  name: string;
  request: string;
  program?: string;
  module?: string;
  args?: string[];
  cwd?: string;
  env?: Record<string, string | null>;
  justMyCode?: boolean;
  /** Run tf.function bodies eagerly (rewrites `program` into `-m pyadapter run --eager --no-dump -- program`). */
  eager?: boolean;
  python?: string | string[];
  console?: string;
  [key: string]: unknown;
}

export interface LaunchContext {
  /** The interpreter NaN Lens found (used when the configuration names none). */
  python: string;
  workspaceFolder?: string;
  /** Default of `justMyCode` (setting nanlens.replay.justMyCode); library frames matter when replaying. */
  justMyCode: boolean;
}

export type Resolved = { config: LaunchConfig } | { error: string };

/**
 * Turn a `nanlens` launch configuration into what debugpy's adapter runs.
 * With `eager` (the default) a `program` becomes `module: pyadapter, args: [run, --eager, --no-dump, --, program, ...args]`.
 */
export function resolveLaunchConfig(input: LaunchConfig, ctx: LaunchContext): Resolved {
  if (input.request !== 'launch') {
    return { error: `NaN Lens debug configurations support "request": "launch" only (got "${input.request}").` };
  }
  const hasProgram = typeof input.program === 'string' && input.program.trim() !== '';
  const hasModule = typeof input.module === 'string' && input.module.trim() !== '';
  if (hasProgram && hasModule) {
    return { error: `The debug configuration "${input.name}" sets both "program" and "module"; keep one.` };
  }
  if (!hasProgram && !hasModule) {
    return { error: `The debug configuration "${input.name}" needs "program" (a Python file) or "module".` };
  }
  if (input.args !== undefined && (!Array.isArray(input.args) || input.args.some((a) => typeof a !== 'string'))) {
    return { error: `"args" of the debug configuration "${input.name}" must be a list of strings.` };
  }
  const config: LaunchConfig = { ...input };
  const args = input.args ?? [];
  const eager = input.eager !== false;
  if (hasProgram && eager) {
    delete config.program;
    config.module = 'pyadapter';
    // --no-dump: under the debugger the point is eager code and breakpoints, not a (slow) dump.
    config.args = ['run', '--eager', '--no-dump', '--', input.program as string, ...args];
  } else {
    config.args = [...args];
  }
  config.eager = eager;
  config.python = pythonList(input.python, ctx.python);
  config.cwd = input.cwd || ctx.workspaceFolder || (hasProgram ? path.dirname(input.program as string) : undefined);
  if (config.cwd === undefined) {
    delete config.cwd;
  }
  config.justMyCode = input.justMyCode ?? ctx.justMyCode;
  config.console = input.console ?? 'integratedTerminal';
  return { config };
}

function pythonList(value: unknown, fallback: string): [string, ...string[]] {
  if (typeof value === 'string' && value.trim()) {
    return [value];
  }
  if (Array.isArray(value) && value.every((v) => typeof v === 'string')) {
    const [first, ...rest] = value;
    if (first !== undefined) {
      return [first, ...rest];
    }
  }
  return [fallback];
}

/** The interpreter that runs debugpy's adapter: the configuration's `python`, else the one NaN Lens found. */
export function adapterPython(config: { python?: unknown }, fallback: string): string {
  return pythonList(config.python, fallback)[0];
}

/** Protocol's replay session: the bundle's step, run eagerly, stopped on the origin line by a breakpoint. */
export function replayLaunchConfig(
  target: ReplayTarget,
  cwd: string | undefined,
  justMyCode = false,
  trustEntry: readonly string[] = [],
): LaunchConfig {
  const step = target.step !== null ? `step ${target.step} ` : '';
  const config: LaunchConfig = {
    type: DEBUG_TYPE,
    request: 'launch',
    name: `NaN Lens: replay ${step}eagerly`,
    module: 'pyadapter',
    // --trust-entry: the programs the user agreed to run for this bundle (asked when the replay would refuse them).
    args: ['replay', target.bundle, '--eager', ...trustEntry.flatMap((file) => ['--trust-entry', file])],
    justMyCode,
  };
  if (cwd !== undefined) {
    config.cwd = cwd;
  }
  return config;
}

/** Run a script under the debugger with tf.function bodies executed eagerly. */
export function eagerRunLaunchConfig(script: string, cwd: string | undefined): LaunchConfig {
  const config: LaunchConfig = {
    type: DEBUG_TYPE,
    request: 'launch',
    name: `NaN Lens: run ${path.basename(script)} eagerly`,
    program: script,
    eager: true,
  };
  if (cwd !== undefined) {
    config.cwd = cwd;
  }
  return config;
}

/** Folder name of a new dump: local time, sortable, e.g. 20250131-142501. */
export function dumpFolderName(date: Date): string {
  const two = (n: number) => String(n).padStart(2, '0');
  return (
    `${date.getFullYear()}${two(date.getMonth() + 1)}${two(date.getDate())}-` +
    `${two(date.getHours())}${two(date.getMinutes())}${two(date.getSeconds())}`
  );
}

/** Where `Run with a dump` writes: inside the first watched dump folder, so the server picks it up. */
export function newDumpDir(workspaceFolder: string, dumpDirs: readonly string[], date: Date): string {
  const base = dumpDirs.find((d) => d.trim() !== '') ?? '.nanlens/dumps';
  return path.resolve(workspaceFolder, base, dumpFolderName(date));
}

/** Arguments after the interpreter for `Run with a dump`. */
export function runWithDumpArgs(script: string, dumpDir: string): string[] {
  return ['-m', 'pyadapter', 'run', '--dump', dumpDir, '--', script];
}

export interface BreakpointLocation {
  file: string;
  /** 1-based. */
  line: number;
}

export function hasBreakpointAt(
  breakpoints: readonly BreakpointLocation[],
  file: string,
  line: number,
  sameFile: (a: string, b: string) => boolean = (a, b) => a === b,
): boolean {
  return breakpoints.some((bp) => bp.line === line && sameFile(bp.file, file));
}

/** `python -m pyadapter pull URL DIR`: copy a capture bundle from cluster storage into DIR, verified on arrival. */
export function pullArgs(url: string, dir: string): string[] {
  return ['-m', 'pyadapter', 'pull', url, dir, '--no-progress'];
}

/** Why `text` cannot be pulled (for the input box), or undefined when it can. */
export function bundleUrlProblem(text: string): string | undefined {
  const value = text.trim();
  if (!value) {
    return 'The URL of a capture bundle folder (gs://…, s3://…, hdfs://…) or a mounted folder path.';
  }
  if (/^[a-z][a-z0-9+.-]*:\/\/$/i.test(value)) {
    return 'Add the bundle folder after the scheme, e.g. gs://bucket/run/captures/train-step4711.';
  }
  return undefined;
}

/** The local bundle folder from `nanlens pull`'s report line `pulled URL into PATH` (relative to `cwd`). */
export function pulledBundlePath(stdout: string, cwd: string): string | undefined {
  const local = /^pulled .+ into (.+)$/m.exec(stdout)?.[1]?.trim();
  return local ? path.resolve(cwd, local) : undefined;
}
