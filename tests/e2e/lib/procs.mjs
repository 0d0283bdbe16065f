// procs.mjs — child processes that never outlive the test run, and small waiting helpers.
//   spawnGroup(cmd, args, opts) -> ChildProcess   started in its own process group and remembered;
//   killGroup(child, graceMs)                     SIGTERM to the whole group, SIGKILL after graceMs;
//   descendants(pid) -> [{pid, ppid, cmdline}]    the process tree below pid, read from /proc;
//   waitFor(probe, {timeoutMs, intervalMs, what}) poll until probe() returns a truthy value, or throw;
//   fatal(message)                                an error that makes waitFor give up at once.
//   removeOnExit(dir) -> forget()                 delete a temp dir at exit if nobody did before
// Every group spawned here is killed with SIGKILL when the node process exits, even after a failure, a
// node:test timeout (run.mjs passes --test-force-exit) or a SIGINT/SIGTERM, so a code-server (and the
// language server under it) is never left running.

import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, rmSync } from 'node:fs';

const liveGroups = new Set();
const tempDirs = new Set();

function killAllSync() {
  for (const pid of liveGroups) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  liveGroups.clear();
  for (const dir of tempDirs) rmSync(dir, { recursive: true, force: true });
  tempDirs.clear();
}

/** Remove dir when the process exits (unless NANLENS_E2E_KEEP=1); returns a function that forgets it. */
export function removeOnExit(dir) {
  if (process.env.NANLENS_E2E_KEEP) return () => {};
  tempDirs.add(dir);
  return () => tempDirs.delete(dir);
}

process.on('exit', killAllSync);
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.once(signal, () => {
    killAllSync();
    process.exit(128 + ({ SIGINT: 2, SIGTERM: 15, SIGHUP: 1 })[signal]);
  });
}

/** Spawn a command as the leader of a new process group, so the group (and its grandchildren) can be killed. */
export function spawnGroup(command, args, options = {}) {
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], ...options, detached: true });
  // Remembered until killGroup: the leader may exit before its children do.
  if (child.pid) liveGroups.add(child.pid);
  return child;
}

function groupAlive(pid) {
  try {
    process.kill(-pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Stop a group started by spawnGroup: SIGTERM, then SIGKILL after graceMs. Resolves once the group is gone. */
export async function killGroup(child, graceMs = 5000) {
  const pid = child.pid;
  if (!pid) return;
  try {
    process.kill(-pid, 'SIGTERM');
  } catch {
    liveGroups.delete(pid);
    return;
  }
  const deadline = Date.now() + graceMs;
  while (groupAlive(pid) && Date.now() < deadline) await sleep(100);
  if (groupAlive(pid)) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
    const hardDeadline = Date.now() + 5000;
    while (groupAlive(pid) && Date.now() < hardDeadline) await sleep(100);
  }
  liveGroups.delete(pid);
}

/** All processes below rootPid (children, grandchildren, ...), from /proc. */
export function descendants(rootPid) {
  const table = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // The command name in (...) may hold spaces: ppid is the 2nd field after the closing paren.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const cmdline = readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').filter(Boolean).join(' ');
      table.push({ pid: Number(name), ppid, cmdline });
    } catch {
      // the process ended while we read
    }
  }
  const below = [];
  const frontier = [rootPid];
  while (frontier.length) {
    const parent = frontier.pop();
    for (const proc of table) {
      if (proc.ppid === parent) {
        below.push(proc);
        frontier.push(proc.pid);
      }
    }
  }
  return below;
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** An error that stops waitFor at once (e.g. the process being waited on has exited). */
export function fatal(message) {
  return Object.assign(new Error(message), { fatal: true });
}

/**
 * Poll probe() until it returns a truthy value (returned) or timeoutMs passes (throws, naming `what`
 * and the last value or error seen, so a failure says what was being waited for). An error the probe
 * throws is retried, unless it was made by fatal().
 */
export async function waitFor(probe, { timeoutMs = 30000, intervalMs = 250, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
      last = value;
    } catch (error) {
      if (error?.fatal) throw error;
      last = error;
    }
    if (Date.now() >= deadline) {
      const detail = last instanceof Error ? last.message : JSON.stringify(last);
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last: ${detail})`);
    }
    await sleep(intervalMs);
  }
}
