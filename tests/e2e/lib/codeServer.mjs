// codeServer.mjs — a real VS Code (code-server) on 127.0.0.1, fresh for each test.
//   const cs = await startCodeServer({ folder, vsix, settings });
//   cs.url / cs.port / cs.pid        where it listens (a free port chosen by code-server: --bind-addr :0)
//   cs.workbenchUrl()                the URL that opens cs.folder in the browser
//   cs.userDataDir / cs.extensionsDir  a new empty pair per start (VS Code caches extension manifests there)
//   cs.output()                      what code-server printed so far
//   cs.processes()                   its process tree ([{pid, ppid, cmdline}]), e.g. to find `pyadapter serve`
//   cs.logFiles(re) / cs.readLog(re) the VS Code log files under the user-data-dir (output channels included:
//                                     a LogOutputChannel "NaN Lens" is written to ".../NaN Lens.log")
//   await cs.stop()                  kill the whole process group; removes the temp dir unless NANLENS_E2E_KEEP=1
// installExtension(vsix, {extensionsDir, userDataDir}) runs `code-server --install-extension`.
// Nothing is written outside the temp dir: --config, --user-data-dir, --extensions-dir and the XDG
// variables (code-server writes logs under XDG_DATA_HOME) all point into it.

import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CODE_SERVER_BIN } from './paths.mjs';
import { descendants, fatal, killGroup, removeOnExit, spawnGroup, waitFor } from './procs.mjs';

const execFileAsync = promisify(execFile);

/** Settings every run gets: no welcome page, no trust prompt, no network chatter, no restored windows. */
export const BASE_SETTINGS = {
  'workbench.startupEditor': 'none',
  'workbench.tips.enabled': false,
  'workbench.enableExperiments': false,
  'security.workspace.trust.enabled': false,
  'telemetry.telemetryLevel': 'off',
  'update.mode': 'none',
  'extensions.autoCheckUpdates': false,
  'extensions.autoUpdate': false,
  'extensions.ignoreRecommendations': true,
  'window.restoreWindows': 'none',
  'files.hotExit': 'off',
  'git.openRepositoryInParentFolders': 'never',
  'chat.commandCenter.enabled': false,
  'workbench.secondarySideBar.defaultVisibility': 'hidden',
  'editor.hover.delay': 150,
  'editor.minimap.enabled': false,
};

function isolatedEnv(root, extraEnv) {
  const env = { ...process.env, ...extraEnv };
  env.XDG_CONFIG_HOME = join(root, 'xdg-config');
  env.XDG_DATA_HOME = join(root, 'xdg-data');
  env.XDG_CACHE_HOME = join(root, 'xdg-cache');
  delete env.VSCODE_IPC_HOOK_CLI; // never talk to a VS Code this node may run inside
  return env;
}

/** Install a .vsix into extensionsDir with code-server's own CLI (as a user would). */
export async function installExtension(vsix, { extensionsDir, userDataDir, root, timeoutMs = 120000 }) {
  const { stdout, stderr } = await execFileAsync(
    CODE_SERVER_BIN,
    ['--config', join(root, 'config.yaml'), '--user-data-dir', userDataDir, '--extensions-dir', extensionsDir,
      '--install-extension', vsix, '--force'],
    { env: isolatedEnv(root), timeout: timeoutMs, killSignal: 'SIGKILL' },
  );
  const out = stdout + stderr;
  if (!/successfully installed/i.test(out)) {
    throw new Error(`code-server --install-extension ${vsix} did not report success:\n${out}`);
  }
  return out;
}

/**
 * Start code-server with a fresh user-data-dir and extensions-dir, the given extensions installed and
 * user settings written, and wait until it listens.
 * @param {object} opts
 * @param {string} opts.folder            the workspace folder to open
 * @param {string[]} [opts.vsix]          .vsix files to install first
 * @param {object} [opts.settings]        user settings (merged over BASE_SETTINGS)
 * @param {object} [opts.env]             extra environment for code-server (and so for the extension host)
 * @param {number} [opts.timeoutMs]       how long to wait for "HTTP server listening"
 */
export async function startCodeServer({ folder, vsix = [], settings = {}, env = {}, timeoutMs = 60000 }) {
  const root = mkdtempSync(join(tmpdir(), 'nanlens-e2e-'));
  const forgetRoot = removeOnExit(root);
  const userDataDir = join(root, 'user-data');
  const extensionsDir = join(root, 'extensions');
  const configPath = join(root, 'config.yaml');
  mkdirSync(join(userDataDir, 'User'), { recursive: true });
  mkdirSync(extensionsDir, { recursive: true });
  writeFileSync(configPath, 'bind-addr: 127.0.0.1:0\nauth: none\ncert: false\n');
  writeFileSync(join(userDataDir, 'User', 'settings.json'), JSON.stringify({ ...BASE_SETTINGS, ...settings }, null, 2));

  const removeRoot = () => {
    forgetRoot();
    if (!process.env.NANLENS_E2E_KEEP) rmSync(root, { recursive: true, force: true });
  };
  try {
    for (const file of vsix) await installExtension(file, { extensionsDir, userDataDir, root });
  } catch (error) {
    removeRoot();
    throw error;
  }

  const args = [
    '--config', configPath,
    '--auth', 'none',
    '--bind-addr', '127.0.0.1:0',
    '--disable-telemetry',
    '--disable-update-check',
    '--disable-workspace-trust',
    '--disable-getting-started-override',
    '--user-data-dir', userDataDir,
    '--extensions-dir', extensionsDir,
    folder,
  ];
  const child = spawnGroup(CODE_SERVER_BIN, args, { env: isolatedEnv(root, env), cwd: root });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  let exited = null;
  child.once('exit', (code, signal) => (exited = { code, signal }));

  let port;
  try {
    port = await waitFor(
      () => {
        if (exited) throw fatal(`code-server exited (${JSON.stringify(exited)}):\n${output}`);
        const match = /HTTP server listening on https?:\/\/127\.0\.0\.1:(\d+)/.exec(output);
        return match && Number(match[1]);
      },
      { timeoutMs, intervalMs: 100, what: 'code-server to listen' },
    );
  } catch (error) {
    await killGroup(child);
    removeRoot();
    throw error;
  }

  const url = `http://127.0.0.1:${port}`;
  const logsDir = join(userDataDir, 'logs');
  const server = {
    url,
    port,
    pid: child.pid,
    root,
    folder,
    userDataDir,
    extensionsDir,
    workbenchUrl: (openFolder = folder) => `${url}/?folder=${encodeURIComponent(openFolder)}`,
    output: () => output,
    exited: () => exited,
    processes: () => descendants(child.pid),
    logFiles: (pattern = /\.log$/) => listFiles(logsDir).filter((file) => pattern.test(file)),
    readLog: (pattern) => server.logFiles(pattern).map((file) => readFileSync(file, 'utf8')).join('\n'),
    async stop() {
      await killGroup(child);
      removeRoot();
    },
  };
  return server;
}

function listFiles(dir) {
  const found = [];
  let entries;
  try {
    entries = readdirSync(dir);
  } catch {
    return found;
  }
  for (const name of entries) {
    const path = join(dir, name);
    try {
      if (statSync(path).isDirectory()) found.push(...listFiles(path));
      else found.push(path);
    } catch {
      // removed while listing
    }
  }
  return found.sort();
}
