// Issue 2: opening a Python file in a real VS Code activates NaN Lens, which starts its language server
// (`<nanlens.python> -m pyadapter serve`) and says so in the status bar and in its "NaN Lens" output channel.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { VENV_PYTHON } from './lib/paths.mjs';
import { waitFor } from './lib/procs.mjs';
import { withSession } from './lib/session.mjs';
import {
  cursorPosition,
  openFile,
  outputPanelChannel,
  outputPanelText,
  runCommand,
  waitForStatusBarItem,
} from './lib/workbench.mjs';

/** The version the server must announce: the one installed in the interpreter the extension is told to use. */
function pyadapterVersion() {
  return execFileSync(VENV_PYTHON, ['-c', 'import pyadapter; print(pyadapter.__version__)'], {
    encoding: 'utf8',
    timeout: 30000,
  }).trim();
}

test('opening a .py file activates NaN Lens and starts its language server', { timeout: 240000 }, async () => {
  const version = pyadapterVersion();
  const readyLine = `NaN Lens server ${version} ready`;
  let serverPid;

  await withSession({ name: 'activation' }, async (s) => {
    await s.shot('workbench');
    // Opening a Python file is what activates NaN Lens (activation event onLanguage:python).
    await openFile(s.page, s.file, { line: 1 });
    assert.deepEqual(await cursorPosition(s.page), { line: 1, column: 1 });

    const item = await waitForStatusBarItem(s.page, 'NaN Lens', { timeoutMs: 60000 });
    assert.match(item.text, /NaN Lens/);

    // The server process runs under this code-server, with the configured interpreter.
    const server = await waitFor(
      () => s.codeServer.processes().find((proc) => /-m pyadapter serve\b/.test(proc.cmdline)),
      { timeoutMs: 60000, what: 'a `python -m pyadapter serve` process under code-server' },
    );
    assert.ok(server.cmdline.startsWith(`${VENV_PYTHON} `), `server started with ${server.cmdline}`);
    serverPid = server.pid;

    // It completed the LSP handshake: its "ready" log line reached the extension's output channel.
    await waitFor(() => s.codeServer.readLog(/NaN Lens\.log$/).includes(readyLine), {
      timeoutMs: 60000,
      what: `"${readyLine}" in the NaN Lens output channel`,
    });

    // The status item now reports a running server, not a failure.
    const running = await waitForStatusBarItem(s.page, 'NaN Lens', {
      timeoutMs: 30000,
      where: (candidate) => !/not running|stopped|starting/i.test(candidate.ariaLabel),
    });
    assert.doesNotMatch(running.ariaLabel, /not running/i);
    await s.shot('server-running');

    // A person sees the same in the UI: "NaN Lens: Show Logs" opens the channel, the filter finds the line.
    await runCommand(s.page, 'NaN Lens: Show Logs');
    await waitFor(async () => (await outputPanelChannel(s.page)) === 'NaN Lens', {
      timeoutMs: 15000,
      what: 'the Output panel to show the "NaN Lens" channel',
    });
    const shown = await waitFor(
      async () => {
        const text = await outputPanelText(s.page, { filter: 'ready' });
        return text.includes(readyLine) && text;
      },
      { timeoutMs: 15000, what: `the Output panel to show "${readyLine}"` },
    );
    assert.ok(shown.includes(readyLine));
    await s.shot('logs');
  });

  // Teardown killed code-server's whole process group, the language server included.
  assert.ok(serverPid, 'the server process was seen');
  await waitFor(() => !existsSync(`/proc/${serverPid}`), {
    timeoutMs: 10000,
    what: `the language server (pid ${serverPid}) to end with code-server`,
  });
});
