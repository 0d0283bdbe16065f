// The `nanlens.*` settings, read in one place.

import * as vscode from 'vscode';

export type ServerLogLevel = 'DEBUG' | 'INFO' | 'WARNING' | 'ERROR';

export interface NanLensSettings {
  python: string;
  captureDirs: string[];
  dumpDirs: string[];
  serverLogLevel: ServerLogLevel;
  decorationsEnabled: boolean;
  afterLineText: boolean;
  replayJustMyCode: boolean;
  locateAutomatic: boolean;
}

/** What the server receives as initializationOptions and in didChangeConfiguration (docs/protocol.md). */
export interface ServerSettings {
  captureDirs: string[];
  dumpDirs: string[];
  logLevel: ServerLogLevel;
  locateAutomatic: boolean;
}

const LOG_LEVELS: readonly ServerLogLevel[] = ['DEBUG', 'INFO', 'WARNING', 'ERROR'];

function stringList(value: unknown, fallback: string[]): string[] {
  return Array.isArray(value) ? value.filter((v): v is string => typeof v === 'string' && v.trim() !== '') : fallback;
}

export function getSettings(scope?: vscode.ConfigurationScope): NanLensSettings {
  const config = vscode.workspace.getConfiguration('nanlens', scope);
  const level = config.get<string>('serverLogLevel', 'INFO').toUpperCase();
  return {
    python: config.get<string>('python', ''),
    captureDirs: stringList(config.get('captureDirs'), ['.nanlens', 'captures']),
    dumpDirs: stringList(config.get('dumpDirs'), ['.nanlens/dumps']),
    serverLogLevel: LOG_LEVELS.includes(level as ServerLogLevel) ? (level as ServerLogLevel) : 'INFO',
    decorationsEnabled: config.get<boolean>('decorations.enabled', true),
    afterLineText: config.get<boolean>('decorations.afterLineText', true),
    replayJustMyCode: config.get<boolean>('replay.justMyCode', false),
    locateAutomatic: config.get<unknown>('locate.automatic', false) === true, // a hand-written "yes" is not consent
  };
}

export function serverSettings(settings: NanLensSettings = getSettings()): ServerSettings {
  return {
    captureDirs: settings.captureDirs,
    dumpDirs: settings.dumpDirs,
    logLevel: settings.serverLogLevel,
    locateAutomatic: settings.locateAutomatic,
  };
}

/** Settings that only the server uses: a change is sent to it as didChangeConfiguration. */
export function affectsServer(event: vscode.ConfigurationChangeEvent): boolean {
  return ['nanlens.captureDirs', 'nanlens.dumpDirs', 'nanlens.serverLogLevel', 'nanlens.locate.automatic'].some((s) =>
    event.affectsConfiguration(s),
  );
}

export function affectsInterpreter(event: vscode.ConfigurationChangeEvent): boolean {
  return event.affectsConfiguration('nanlens.python');
}

export function affectsDecorations(event: vscode.ConfigurationChangeEvent): boolean {
  return event.affectsConfiguration('nanlens.decorations');
}

export function firstWorkspaceFolder(): string | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
}

/** The workspace folder holding `file`, else the first one. */
export function workspaceFolderFor(file: string | undefined): vscode.WorkspaceFolder | undefined {
  const folder = file !== undefined ? vscode.workspace.getWorkspaceFolder(vscode.Uri.file(file)) : undefined;
  return folder ?? vscode.workspace.workspaceFolders?.[0];
}
