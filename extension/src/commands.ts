// The `nanlens.*` commands.

import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as vscode from 'vscode';
import { askTrust, type UnlocatedNotifier } from './consent';
import { bundlePathOf, runsText, withConsent, type TrustMemory } from './core/consent';
import type { FindingsModel } from './core/findingsModel';
import {
  bundleUrlProblem,
  eagerRunLaunchConfig,
  newDumpDir,
  pullArgs,
  pulledBundlePath,
  replayLaunchConfig,
  runWithDumpArgs,
} from './core/launch';
import {
  readEagerRunTarget,
  readReplayTarget,
  readSource,
  readUntrusted,
  type ReplayTarget,
  type Source,
} from './core/protocol';
import { locationText } from './core/notebookCells';
import { replayTargetOf } from './core/sourceTree';
import { ensureBreakpoint } from './debug';
import { SHOW_LOCATION_COMMAND, showLocation } from './locations';
import { getLog, showLog } from './log';
import { ensurePyadapter, resetPyadapterReports, resolveInterpreter } from './python';
import type { NanLensServer } from './server';
import { getSettings, workspaceFolderFor } from './settings';

interface Deps {
  model: FindingsModel;
  server: NanLensServer;
  /** The programs the user agreed to run, per bundle, this session. */
  trust: TrustMemory;
  notifier: UnlocatedNotifier;
}

/** The Python file a command acts on: an explicit Uri (explorer / editor menus), else the active editor's. */
async function pythonFileFrom(arg: unknown): Promise<string | undefined> {
  if (arg instanceof vscode.Uri && arg.scheme === 'file') {
    return arg.fsPath;
  }
  const document = vscode.window.activeTextEditor?.document;
  if (document?.languageId !== 'python' || document.uri.scheme !== 'file') {
    return undefined;
  }
  if (document.isDirty) {
    await document.save(); // Run what the person sees.
  }
  return document.uri.fsPath;
}

async function runWithDump(arg: unknown, deps: Deps): Promise<void> {
  const script = await pythonFileFrom(arg);
  if (!script) {
    void vscode.window.showWarningMessage('NaN Lens: open a Python file to run it with a dump.');
    return;
  }
  const interpreter = deps.server.interpreter ?? (await resolveInterpreter());
  if (!(await ensurePyadapter(interpreter)).ok) {
    return;
  }
  const folder = workspaceFolderFor(script);
  const base = folder?.uri.fsPath ?? path.dirname(script);
  const dumpDir = newDumpDir(base, getSettings(folder?.uri).dumpDirs, new Date());
  const args = runWithDumpArgs(script, dumpDir);
  const task = new vscode.Task(
    { type: 'nanlens', verb: 'run-with-dump', script },
    folder ?? vscode.TaskScope.Workspace,
    `run ${path.basename(script)} with a dump`,
    'NaN Lens',
    new vscode.ProcessExecution(interpreter.path, args, { cwd: base }),
  );
  task.presentationOptions = {
    reveal: vscode.TaskRevealKind.Always,
    panel: vscode.TaskPanelKind.Dedicated,
    clear: true,
    echo: true,
  };
  getLog().info(`Run with a dump: ${interpreter.path} ${args.join(' ')}`);
  await vscode.tasks.executeTask(task);
}

async function debugEagerly(arg: unknown): Promise<void> {
  const target = readEagerRunTarget(arg);
  const script = target?.script ?? (await pythonFileFrom(arg));
  if (!script) {
    void vscode.window.showWarningMessage('NaN Lens: open a Python file to run it eagerly under the debugger.');
    return;
  }
  if (target?.file !== undefined && target.line !== undefined) {
    await ensureBreakpoint(target.file, target.line);
  }
  const folder = workspaceFolderFor(script);
  await vscode.debug.startDebugging(folder, eagerRunLaunchConfig(script, folder?.uri.fsPath));
}

function defaultCaptureFolder(): vscode.Uri | undefined {
  const folder = vscode.workspace.workspaceFolders?.[0];
  if (!folder) {
    return undefined;
  }
  for (const dir of getSettings(folder.uri).captureDirs) {
    const candidate = path.resolve(folder.uri.fsPath, dir);
    if (fs.existsSync(candidate)) {
      return vscode.Uri.file(candidate);
    }
  }
  return folder.uri;
}

async function pickBundleFolder(): Promise<string | undefined> {
  const picked = await vscode.window.showOpenDialog({
    canSelectFolders: true,
    canSelectFiles: false,
    canSelectMany: false,
    defaultUri: defaultCaptureFolder(),
    openLabel: 'Locate NaN',
    title: 'NaN Lens: choose a capture bundle folder',
  });
  return picked?.[0]?.fsPath;
}

/** The bundle folder a Locate acts on: a path (the Locate lens), a Uri (explorer), a Captures row, else a picked one. */
async function bundleArg(arg: unknown): Promise<string | undefined> {
  if (arg instanceof vscode.Uri) {
    return arg.fsPath;
  }
  if (typeof arg === 'string') {
    return arg;
  }
  if (arg && typeof arg === 'object' && typeof (arg as { path?: unknown }).path === 'string') {
    return (arg as { path: string }).path;
  }
  return pickBundleFolder();
}

function labelOf(bundle: string, deps: Deps): string {
  return deps.model.sources.find((s) => s.path === bundle)?.label ?? path.basename(bundle);
}

/**
 * The user's Locate: the server shows the bundle's findings or locates it (replaying its step runs its program).
 * When the replay refuses the program (outside the workspace, changed since the capture) the user is asked once,
 * naming the file, and on yes it runs with `--trust-entry`.
 */
async function locateBundle(arg: unknown, deps: Deps): Promise<unknown> {
  const bundle = await bundleArg(arg);
  if (!bundle) {
    return undefined;
  }
  getLog().info(`Locating ${bundle}`);
  const outcome = await withConsent(
    bundle,
    deps.trust,
    askTrust,
    (trust) => deps.server.executeCommand<unknown>('nanlens.server.locateBundle', [bundle, { trustEntry: trust }]),
    (answer) => readSource(answer)?.untrusted ?? undefined,
    labelOf(bundle, deps),
  );
  const answer = outcome.answer;
  const source = readSource(answer);
  if (!source) {
    if (answer !== undefined) {
      getLog().warn(`nanlens.server.locateBundle answered something unexpected: ${JSON.stringify(answer)}`);
    }
    return answer;
  }
  if (outcome.declined) {
    getLog().info(`Not locating ${bundle}: the user did not run ${outcome.declined.file}`);
    return answer;
  }
  showLocateOutcome(source, deps);
  return answer;
}

/** Tell the user what a Locate found: where NaN/Inf starts, that it stayed finite, or why it failed. */
function showLocateOutcome(source: Source, deps: Deps): void {
  if (source.status === 'error') {
    void vscode.window
      .showErrorMessage(`NaN Lens: could not locate ${source.label}: ${source.error ?? 'see the logs'}`, 'Show Logs')
      .then((choice) => {
        if (choice) {
          showLog();
        }
      });
  } else if (source.origin) {
    const origin = source.origin;
    const target = replayTargetOf(source);
    const actions = target ? ['Open', 'Replay eagerly'] : ['Open'];
    void vscode.window
      .showInformationMessage(
        `NaN Lens: NaN/Inf starts at ${locationText(origin.file, origin.line, origin.cell)} (${origin.op.type}).`,
        ...actions,
      )
      .then(async (choice) => {
        if (choice === 'Open') {
          await showLocation(origin.file, origin.line, origin.cell);
        } else if (choice === 'Replay eagerly' && target) {
          await replayEagerly(target, deps);
        }
      });
  } else if (source.status === 'ok') {
    void vscode.window.showInformationMessage(`NaN Lens: ${source.label} stayed finite when replayed; no origin found.`);
  }
}

interface TargetPick extends vscode.QuickPickItem {
  target: ReplayTarget;
}

async function pickReplayTarget(model: FindingsModel): Promise<ReplayTarget | undefined> {
  const items: TargetPick[] = [];
  for (const source of model.sources) {
    const target = replayTargetOf(source);
    if (target && source.origin) {
      items.push({
        label: source.label,
        description: `${source.origin.op.type} at ${locationText(target.file, target.line, target.cell)}`,
        detail: source.path,
        target,
      });
    }
  }
  if (items.length === 0) {
    void vscode.window.showInformationMessage(
      'NaN Lens: no capture bundle with a located origin yet. Run "NaN Lens: Locate NaN in a capture bundle" first.',
    );
    return undefined;
  }
  if (items.length === 1) {
    return items[0]?.target;
  }
  return (await vscode.window.showQuickPick(items, { title: 'NaN Lens: replay which capture eagerly?' }))?.target;
}

/** The answer of `nanlens.server.checkEntry`: would the replay run the bundle's program? */
interface EntryCheck {
  untrusted?: ReturnType<typeof readUntrusted>;
  error?: string;
}

function readEntryCheck(answer: unknown): EntryCheck {
  if (!answer || typeof answer !== 'object') {
    return {};
  }
  const { untrusted, error } = answer as { untrusted?: unknown; error?: unknown };
  return { untrusted: readUntrusted(untrusted), error: typeof error === 'string' && error ? error : undefined };
}

async function replayEagerly(arg: unknown, deps: Deps): Promise<boolean> {
  const target = readReplayTarget(arg) ?? (await pickReplayTarget(deps.model));
  if (!target) {
    return false;
  }
  const folder = workspaceFolderFor(target.file);
  // The replay runs the bundle's program: ask the server first whether it would refuse it (then the user decides).
  const consent = await withConsent(
    target.bundle,
    deps.trust,
    askTrust,
    (trust) =>
      deps.server.executeCommand<unknown>(
        'nanlens.server.checkEntry',
        [target.bundle, { trustEntry: trust, ...(folder ? { root: folder.uri.fsPath } : {}) }],
        true,
      ),
    (answer) => readEntryCheck(answer).untrusted,
    labelOf(target.bundle, deps),
  );
  if (consent.declined) {
    return false;
  }
  const problem = readEntryCheck(consent.answer).error;
  if (problem) {
    void vscode.window.showErrorMessage(`NaN Lens: cannot replay ${labelOf(target.bundle, deps)}: ${problem}`);
    return false;
  }
  if (target.cell !== undefined && target.cellFile === undefined) {
    // A notebook origin picked in the Captures view or the palette: the server knows the cell's file.
    const full = readReplayTarget(
      await deps.server.executeCommand<unknown>('nanlens.server.replayTarget', [target.bundle], true),
    );
    if (full?.cellFile !== undefined && full.cell === target.cell) {
      target.cellFile = full.cellFile;
    }
  }
  if (target.cellFile !== undefined) {
    // The replay runs the notebook's code cells as a script, each from its cell file: the breakpoint goes there
    // (and on the cell itself, where the person looks).
    await ensureBreakpoint(target.cellFile, target.line);
  }
  await ensureBreakpoint(target.file, target.line, target.cell);
  const config = replayLaunchConfig(
    target,
    folder?.uri.fsPath,
    getSettings(folder?.uri).replayJustMyCode,
    deps.trust.files(target.bundle),
  );
  const where = target.cell === undefined ? `${target.file}:${target.line}` : `${target.file} cell ${target.cell + 1}:${target.line}`;
  getLog().info(`Replaying ${target.bundle} eagerly, breakpoint at ${where}`);
  return vscode.debug.startDebugging(folder, config);
}

/** The bundle a "Verify fix" acts on: the lens's `{sourceId, bundle}`, a path, else the only located bundle. */
async function verifyTargetOf(arg: unknown, deps: Deps): Promise<string | undefined> {
  if (typeof arg === 'string') {
    return arg;
  }
  if (arg && typeof arg === 'object') {
    const { sourceId, bundle } = arg as { sourceId?: unknown; bundle?: unknown };
    if (typeof sourceId === 'string') {
      return sourceId;
    }
    if (typeof bundle === 'string') {
      return bundle;
    }
  }
  const bundles = deps.model.sources.filter((s) => s.kind === 'bundle' && s.origin);
  if (bundles.length <= 1) {
    return bundles[0]?.id;
  }
  const choice = await vscode.window.showQuickPick(
    bundles.map((s) => ({ label: s.label, description: s.path, id: s.id })),
    { title: 'NaN Lens: verify the fix on which captured step?' },
  );
  return choice?.id;
}

/** Replay the captured step with the current code (saved first); the server reports and re-locates. */
async function verifyFix(arg: unknown, deps: Deps): Promise<unknown> {
  const target = await verifyTargetOf(arg, deps);
  if (!target) {
    void vscode.window.showInformationMessage('NaN Lens: no capture bundle with a located origin to verify.');
    return undefined;
  }
  await vscode.workspace.saveAll(false); // The replay imports the files from disk.
  getLog().info(`Verifying the fix on ${target}`);
  const bundle = bundlePathOf(target);
  // After the user's own edit the program differs from the capture: the replay refuses it until the user says so.
  const outcome = await withConsent(
    bundle,
    deps.trust,
    askTrust,
    async (trust) =>
      vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: 'NaN Lens: verifying the fix on the captured step…' },
        () => deps.server.executeCommand<unknown>('nanlens.server.verifyFix', [target, { trustEntry: trust }]),
      ),
    (answer) =>
      answer && typeof answer === 'object' ? readUntrusted((answer as { untrusted?: unknown }).untrusted) : undefined,
    labelOf(bundle, deps),
  );
  if (outcome.declined) {
    void vscode.window.showInformationMessage(
      `NaN Lens: the fix was not verified: replaying the step runs ${path.basename(outcome.declined.file)}, and you chose not to run it.`,
    );
  }
  return outcome.answer;
}
interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a `nanlens` verb to the end (or until cancelled); never rejects. */
function runCli(python: string, args: string[], cwd: string, token: vscode.CancellationToken): Promise<CliResult> {
  return new Promise((resolve) => {
    const child = execFile(python, args, { cwd, maxBuffer: 16 << 20 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : 1) : 0;
      resolve({ code, stdout, stderr });
    });
    token.onCancellationRequested(() => child.kill());
  });
}

/** The one-line error a verb printed (`nanlens: error: ...`), else its last stderr line. */
function cliError(stderr: string): string {
  const lines = stderr.trim().split(/\r?\n/);
  const error = lines.find((line) => line.startsWith('nanlens: error: '));
  return (error ?? lines[lines.length - 1] ?? 'failed').replace(/^nanlens: error: /, '');
}

/** Copy a bundle from a cluster's storage into the workspace's `.nanlens/captures`, then locate it. */
async function pullBundle(arg: unknown, deps: Deps): Promise<unknown> {
  const url =
    typeof arg === 'string'
      ? arg
      : await vscode.window.showInputBox({
          title: 'NaN Lens: pull a capture bundle',
          prompt: 'The bundle folder NanGuard wrote on the cluster (its files are checked against their sha256)',
          placeHolder: 'gs://my-bucket/run-42/captures/train-20261122-101500-step4711',
          ignoreFocusOut: true,
          validateInput: bundleUrlProblem,
        });
  if (!url || bundleUrlProblem(url)) {
    return undefined;
  }
  const folder = vscode.workspace.workspaceFolders?.[0];
  if (!folder) {
    void vscode.window.showWarningMessage('NaN Lens: open a folder first; the bundle goes to its .nanlens/captures.');
    return undefined;
  }
  const interpreter = deps.server.interpreter ?? (await resolveInterpreter());
  if (!(await ensurePyadapter(interpreter)).ok) {
    return undefined;
  }
  const cwd = folder.uri.fsPath;
  const args = pullArgs(url.trim(), path.join('.nanlens', 'captures'));
  getLog().info(`Pull: ${interpreter.path} ${args.join(' ')}`);
  const result = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `NaN Lens: pulling ${url.trim()}`, cancellable: true },
    (_progress, token) => runCli(interpreter.path, args, cwd, token),
  );
  const local = result.code === 0 ? pulledBundlePath(result.stdout, cwd) : undefined;
  if (!local) {
    getLog().warn(`Pull failed (${result.code}): ${result.stderr.trim()}`);
    const choice = await vscode.window.showErrorMessage(
      `NaN Lens: could not pull ${url.trim()}: ${cliError(result.stderr)}`,
      'Show Logs',
    );
    if (choice) {
      showLog();
    }
    return undefined;
  }
  // A pulled bundle is someone else's data: shown at once (findings located at the scene), never replayed unasked.
  const answer = await deps.server.executeCommand<unknown>('nanlens.server.locateBundle', [local, { pulled: true }]);
  const source = readSource(answer);
  if (source === undefined) {
    return answer;
  }
  deps.notifier.quiet(source.id);
  if (source.status !== 'unlocated') {
    showLocateOutcome(source, deps);
    return answer;
  }
  void vscode.window
    .showInformationMessage(
      `NaN Lens: pulled ${source.label}. It holds no findings from the scene; locating it replays the captured step, ` +
        `which ${runsText(source)}.`,
      'Locate',
    )
    .then(async (choice) => {
      if (choice === 'Locate') {
        await locateBundle(local, deps);
      }
    });
  return answer;
}

/** For `${command:nanlens.pickBundle}` in launch.json: a located bundle, or a folder picked by hand. */
async function pickBundle(deps: Deps): Promise<string | undefined> {
  const bundles = deps.model.sources.filter((s) => s.kind === 'bundle' && s.status !== 'error');
  if (bundles.length === 0) {
    return pickBundleFolder();
  }
  const browse = { label: '$(folder-opened) Choose a folder…', path: undefined as string | undefined };
  const items = [...bundles.map((s) => ({ label: s.label, description: s.path, path: s.path })), browse];
  const choice = await vscode.window.showQuickPick(items, { title: 'NaN Lens: replay which capture bundle?' });
  if (!choice) {
    return undefined;
  }
  return choice.path ?? pickBundleFolder();
}

export function registerCommands(context: vscode.ExtensionContext, deps: Deps): void {
  const register = (id: string, run: (...args: unknown[]) => unknown) =>
    context.subscriptions.push(vscode.commands.registerCommand(id, run));

  register('nanlens.runWithDump', (arg) => runWithDump(arg, deps));
  register('nanlens.debugEagerly', (arg) => debugEagerly(arg));
  register('nanlens.locateBundle', (arg) => locateBundle(arg, deps));
  register('nanlens.pullBundle', (arg) => pullBundle(arg, deps));
  register('nanlens.replayEagerly', (arg) => replayEagerly(arg, deps));
  register('nanlens.pickBundle', () => pickBundle(deps));
  register('nanlens.verifyFix', (arg) => verifyFix(arg, deps));
  register(SHOW_LOCATION_COMMAND, (file, line, cell) =>
    typeof file === 'string' && typeof line === 'number'
      ? showLocation(file, line, typeof cell === 'number' ? cell : undefined)
      : undefined,
  );
  register('nanlens.clearMarkers', async () => {
    deps.model.clear();
    await deps.server.executeCommand('nanlens.server.clear', []);
  });
  register('nanlens.rescan', () => deps.server.executeCommand('nanlens.server.rescan', []));
  register('nanlens.showLogs', () => {
    showLog();
  });
  register('nanlens.restartServer', () => {
    resetPyadapterReports();
    return deps.server.restart('restart requested');
  });
}
