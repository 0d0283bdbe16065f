// The messages the NaN Lens language server sends (docs/protocol.md) and a tolerant reader for them.
// No `vscode` import in src/core: these modules are unit-tested under plain Node.

export type Role = 'origin' | 'propagated' | 'backward-origin';

export interface TensorHealth {
  dtype?: string;
  rank?: number;
  shape?: number[];
  size?: number;
  nan?: number;
  neg_inf?: number;
  pos_inf?: number;
  neg?: number;
  zero?: number;
  pos?: number;
}

export interface OpRef {
  name: string;
  type: string;
  graph?: string;
  host?: string;
  device?: string;
  execution_index?: number;
  trace_index?: number;
  step?: number;
  forward_op?: string;
}

export interface Frame {
  file: string;
  line: number;
  function?: string;
  /** Notebook code: `file` is the .ipynb, `cell` the 0-based index among all its cells, `line` 1-based in it. */
  cell?: number;
}

/** `finding` of shared/findings.schema.json, plus `stale` as the server sends it. */
export interface Finding {
  file: string;
  line: number;
  /** Notebook code: `file` is the .ipynb, `cell` the 0-based index among all its cells, `line` 1-based in it. */
  cell?: number;
  role: Role;
  op: OpRef;
  health?: TensorHealth;
  inputs?: { name: string; health?: TensorHealth }[];
  stack?: Frame[];
  message?: string;
  stale?: boolean;
}

export type SourceKind = 'bundle' | 'dump';
/** `unlocated`: a bundle without findings that waits for the user's Locate (locating runs its program). */
export type SourceStatus = 'ok' | 'scanning' | 'error' | 'unlocated';

/** A replay refused to run a bundle's program until the user says so (docs/protocol.md, "Consent"). */
export interface Untrusted {
  file: string;
  reason: 'outside' | 'changed' | 'untrusted';
  /** The refusal, one line. */
  message: string;
}

export interface Source {
  id: string;
  kind: SourceKind;
  path: string;
  label: string;
  step: number | null;
  status: SourceStatus;
  error: string | null;
  origin: Finding | null;
  findings: Finding[];
  /** The program a bundle names: what locating or replaying it runs. */
  entry: string | null;
  /** Why a bundle is not the user's own capture on this machine ("pulled", "captured on node-7"). */
  foreign: string | null;
  /** The last locate refused to run the bundle's program without the user's say. */
  untrusted: Untrusted | null;
  /** Why, with the line to change; absent from servers older than the cause. */
  cause?: Cause | null;
}

export type CauseKind = 'op' | 'divergence' | 'data' | 'precision' | 'unknown';

/** The line a cause says to change (the optimizer's, the reading line, the layer) and what to change there. */
export interface CauseChange {
  file: string;
  line: number;
  /** Notebook code: `file` is the .ipynb, `cell` the 0-based index among all its cells, `line` 1-based in it. */
  cell?: number;
  what: string;
}

/** Why the run went non-finite (findings' top-level `cause`, docs/protocol.md "Cause"). */
export interface Cause {
  kind: CauseKind;
  summary: string;
  change: CauseChange | null;
}

export const FINDINGS_NOTIFICATION = 'nanlens/findings';

/** Argument of `nanlens.replayEagerly` (sent by the server's CodeLens, built by the extension otherwise). */
export interface ReplayTarget {
  bundle: string;
  file: string;
  line: number;
  step: number | null;
  /** The origin is in this cell (0-based, among all cells) of the notebook `file`. */
  cell?: number;
  /**
   * Notebook origins: the file a replay runs that cell from (it runs the notebook's code cells as a script), where
   * the debugger's breakpoint must go.
   */
  cellFile?: string;
}

/** Argument of `nanlens.debugEagerly` from the server's CodeLens on dump findings. */
export interface EagerRunTarget {
  script: string;
  file?: string;
  line?: number;
}

const ROLES: readonly Role[] = ['origin', 'propagated', 'backward-origin'];

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function positiveInt(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 1 ? value : undefined;
}

function cellIndex(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 ? value : undefined;
}

/** A finding, or undefined when the object lacks what a marker needs (file, line, role, op). */
export function readFinding(value: unknown): Finding | undefined {
  if (!isRecord(value)) {
    return undefined;
  }
  const line = positiveInt(value.line);
  const op = value.op;
  if (typeof value.file !== 'string' || line === undefined || !ROLES.includes(value.role as Role)) {
    return undefined;
  }
  if (!isRecord(op) || typeof op.name !== 'string' || typeof op.type !== 'string') {
    return undefined;
  }
  const cell = cellIndex(value.cell);
  if (value.cell !== undefined && value.cell !== null && cell === undefined) {
    return undefined; // a notebook finding whose cell is unusable: marking the .ipynb's own lines would be wrong
  }
  // Keep every other field as sent: the schema allows additive fields.
  const out: Finding = { ...(value as unknown as Finding), line, stale: value.stale === true };
  if (cell === undefined) {
    delete out.cell;
  }
  return out;
}

/** An Untrusted from the server (a source's `untrusted`, a verify or check answer's), else undefined. */
export function readUntrusted(value: unknown): Untrusted | undefined {
  if (!isRecord(value) || typeof value.file !== 'string' || !value.file) {
    return undefined;
  }
  const reason = value.reason === 'outside' || value.reason === 'changed' ? value.reason : 'untrusted';
  return { file: value.file, reason, message: typeof value.message === 'string' ? value.message : '' };
}

function optionalText(value: unknown): string | null {
  return typeof value === 'string' && value ? value : null;
}

const CAUSE_KINDS: readonly CauseKind[] = ['op', 'divergence', 'data', 'precision', 'unknown'];

/** A source's `cause`; malformed or absent: undefined (a malformed `change` is dropped, the cause kept). */
export function readCause(value: unknown): Cause | undefined {
  if (!isRecord(value) || !CAUSE_KINDS.includes(value.kind as CauseKind)) {
    return undefined;
  }
  const summary = typeof value.summary === 'string' ? value.summary : '';
  const raw = value.change;
  let change: CauseChange | null = null;
  if (isRecord(raw) && typeof raw.file === 'string' && raw.file) {
    const line = positiveInt(raw.line);
    if (line !== undefined) {
      change = { file: raw.file, line, what: typeof raw.what === 'string' ? raw.what : '' };
      const cell = cellIndex(raw.cell);
      if (cell !== undefined) {
        change.cell = cell;
      }
    }
  }
  return { kind: value.kind as CauseKind, summary, change };
}

const STATUSES: readonly SourceStatus[] = ['scanning', 'error', 'unlocated'];

/** One source object (of the notification, or the answer of `nanlens.server.locateBundle`); malformed: undefined. */
export function readSource(value: unknown): Source | undefined {
  if (!isRecord(value) || typeof value.id !== 'string' || typeof value.path !== 'string') {
    return undefined;
  }
  const kind: SourceKind = value.kind === 'dump' ? 'dump' : 'bundle';
  const status: SourceStatus = STATUSES.includes(value.status as SourceStatus) ? (value.status as SourceStatus) : 'ok';
  const findings = Array.isArray(value.findings)
    ? value.findings.map(readFinding).filter((f): f is Finding => f !== undefined)
    : [];
  return {
    id: value.id,
    kind,
    path: value.path,
    label: typeof value.label === 'string' && value.label ? value.label : value.path,
    step: typeof value.step === 'number' && Number.isInteger(value.step) ? value.step : null,
    status,
    error: typeof value.error === 'string' && value.error ? value.error : null,
    origin: readFinding(value.origin) ?? null,
    findings,
    entry: optionalText(value.entry),
    foreign: optionalText(value.foreign),
    untrusted: readUntrusted(value.untrusted) ?? null,
    cause: readCause(value.cause) ?? null,
  };
}

/** The sources of a `nanlens/findings` notification; malformed entries are dropped, never thrown on. */
export function readFindingsNotification(params: unknown): Source[] {
  if (!isRecord(params) || !Array.isArray(params.sources)) {
    return [];
  }
  return params.sources.map(readSource).filter((s): s is Source => s !== undefined);
}

/** A ReplayTarget from a command argument (CodeLens JSON, or a tree node carrying `replayTarget`). */
export function readReplayTarget(arg: unknown): ReplayTarget | undefined {
  if (!isRecord(arg)) {
    return undefined;
  }
  if (isRecord(arg.replayTarget)) {
    return readReplayTarget(arg.replayTarget);
  }
  const line = positiveInt(arg.line);
  if (typeof arg.bundle !== 'string' || !arg.bundle || typeof arg.file !== 'string' || line === undefined) {
    return undefined;
  }
  const step = typeof arg.step === 'number' && Number.isInteger(arg.step) ? arg.step : null;
  const cell = cellIndex(arg.cell);
  if (cell === undefined) {
    return { bundle: arg.bundle, file: arg.file, line, step };
  }
  const target: ReplayTarget = { bundle: arg.bundle, file: arg.file, line, step, cell };
  if (typeof arg.cellFile === 'string' && arg.cellFile) {
    target.cellFile = arg.cellFile;
  }
  return target;
}

/** An EagerRunTarget from a command argument; `undefined` means "use the active editor's file". */
export function readEagerRunTarget(arg: unknown): EagerRunTarget | undefined {
  if (!isRecord(arg) || typeof arg.script !== 'string' || !arg.script) {
    return undefined;
  }
  const line = positiveInt(arg.line);
  const file = typeof arg.file === 'string' && arg.file ? arg.file : undefined;
  return file !== undefined && line !== undefined ? { script: arg.script, file, line } : { script: arg.script };
}
