// The picture model (`nanlens.pictures/1`, made by pyadapter/pictures): what the op graph and the health
// timeline draw. Shared by the VS Code webviews and the `nanlens report` page. No DOM in src core modules:
// they are unit-tested under plain Node.

export type HealthClass = 'finite' | 'nan' | 'neg_inf' | 'pos_inf' | 'mixed' | 'unknown';
export type NodeRole = 'origin' | 'input' | 'consumer' | 'forward';

export interface Health {
  dtype?: string;
  size?: number;
  nan?: number;
  neg_inf?: number;
  pos_inf?: number;
  neg?: number;
  zero?: number;
  pos?: number;
}

export interface PictureNode {
  id: string;
  name: string;
  type: string;
  role: NodeRole;
  distance: number;
  health_class: HealthClass;
  partial: boolean;
  summary: string;
  health?: Health;
  traced: boolean;
  gradient: boolean;
  /** file/line is the user's own code (else a library's: the op's stack had no user frame). */
  user_code: boolean;
  graph?: string;
  file?: string;
  line?: number;
  function?: string;
}

export interface PictureEdge {
  source: string;
  target: string;
  tensor: string;
  kind: 'data' | 'gradient';
  health_class: HealthClass;
}

export interface TimelinePoint {
  x: number;
  end: number;
  tensors: number;
  non_finite: number;
  cumulative: number;
  label: string;
}

export interface Timeline {
  unit: 'execution' | 'trace';
  points: TimelinePoint[];
  origin_x: number | null;
  first_nonfinite_x: number | null;
  executions: number;
  traces: number;
  binned: boolean;
  note: string | null;
}

export type NonFiniteKind = 'nan' | 'inf' | '-inf';

/** One step of a bundle's history. The numbers past `logged_loss` are in newer bundles only; a non-finite value
 * is null, and `nonfinite` says which kind it was ({"loss": "inf"}). */
export interface LossRow {
  step: number;
  loss: number | null;
  logged_loss: number | null;
  grad_norm?: number | null;
  weight_norm?: number | null;
  update_ratio?: number | null;
  max_abs_output?: number | null;
  nonfinite?: Partial<Record<HistoryNumber, NonFiniteKind>>;
}

export const HISTORY_NUMBERS = ['loss', 'logged_loss', 'grad_norm', 'weight_norm', 'update_ratio', 'max_abs_output'] as const;
export type HistoryNumber = (typeof HISTORY_NUMBERS)[number];

/** A divergence's growth window (pyadapter/cause/trend.py Trend.to_json). */
export interface TrendWindow {
  series: string;
  start_step: number;
  end_step: number;
  steps: number;
  factor: number | null;
  rate_per_step: number | null;
  start_value: number | null;
  end_value: number | null;
}

/** The findings' cause as the timeline shows it (pyadapter/pictures/model.py picture_cause). */
export interface PictureCause {
  kind: string;
  summary: string;
  trend: TrendWindow | null;
}

export interface OriginCaption {
  file: string;
  line: number;
  role: string;
  message?: string;
  op: { name: string; type: string; forward_op?: string };
}

export interface PictureModel {
  source: { kind: string; path: string; label: string };
  origin: OriginCaption | null;
  graph_name: string | null;
  truncated: boolean;
  nodes: PictureNode[];
  edges: PictureEdge[];
  timeline: Timeline | null;
  loss_history: LossRow[] | null;
  failing_step: number | null;
  cause: PictureCause | null;
  notes: string[];
}

const HEALTH_CLASSES: readonly HealthClass[] = ['finite', 'nan', 'neg_inf', 'pos_inf', 'mixed', 'unknown'];
const ROLES: readonly NodeRole[] = ['origin', 'input', 'consumer', 'forward'];

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function str(value: unknown, fallback = ''): string {
  return typeof value === 'string' ? value : fallback;
}

function int(value: unknown): number | undefined {
  return typeof value === 'number' && Number.isInteger(value) ? value : undefined;
}

function num(value: unknown): number | null {
  return typeof value === 'number' && Number.isFinite(value) ? value : null;
}

function healthClass(value: unknown): HealthClass {
  return HEALTH_CLASSES.includes(value as HealthClass) ? (value as HealthClass) : 'unknown';
}

const HEALTH_COUNTS = ['size', 'nan', 'neg_inf', 'pos_inf', 'neg', 'zero', 'pos'] as const;

function readHealth(value: Record<string, unknown>): Health {
  const health: Health = {};
  for (const key of HEALTH_COUNTS) {
    const n = int(value[key]);
    if (n !== undefined) {
      health[key] = n;
    }
  }
  if (typeof value.dtype === 'string') {
    health.dtype = value.dtype;
  }
  return health;
}

function readNode(value: unknown): PictureNode | undefined {
  if (!isRecord(value) || typeof value.id !== 'string' || typeof value.name !== 'string') {
    return undefined;
  }
  const node: PictureNode = {
    id: value.id,
    name: value.name,
    type: str(value.type, 'unknown'),
    role: ROLES.includes(value.role as NodeRole) ? (value.role as NodeRole) : 'input',
    distance: int(value.distance) ?? 0,
    health_class: healthClass(value.health_class),
    partial: value.partial === true,
    summary: str(value.summary),
    traced: value.traced === true,
    gradient: value.gradient === true,
    user_code: value.user_code === true,
  };
  if (isRecord(value.health)) {
    node.health = readHealth(value.health);
  }
  if (typeof value.graph === 'string') {
    node.graph = value.graph;
  }
  const line = int(value.line);
  if (typeof value.file === 'string' && value.file && line !== undefined && line >= 1) {
    node.file = value.file;
    node.line = line;
  }
  if (typeof value.function === 'string') {
    node.function = value.function;
  }
  return node;
}

function readEdge(value: unknown, ids: Set<string>): PictureEdge | undefined {
  if (!isRecord(value) || typeof value.source !== 'string' || typeof value.target !== 'string') {
    return undefined;
  }
  if (!ids.has(value.source) || !ids.has(value.target)) {
    return undefined;
  }
  return {
    source: value.source,
    target: value.target,
    tensor: str(value.tensor),
    kind: value.kind === 'gradient' ? 'gradient' : 'data',
    health_class: healthClass(value.health_class),
  };
}

function readTimeline(value: unknown): Timeline | null {
  if (!isRecord(value) || !Array.isArray(value.points)) {
    return null;
  }
  const points: TimelinePoint[] = [];
  for (const p of value.points) {
    if (!isRecord(p)) {
      continue;
    }
    const x = int(p.x);
    if (x === undefined) {
      continue;
    }
    points.push({
      x,
      end: int(p.end) ?? x,
      tensors: int(p.tensors) ?? 0,
      non_finite: int(p.non_finite) ?? 0,
      cumulative: int(p.cumulative) ?? 0,
      label: str(p.label),
    });
  }
  return {
    unit: value.unit === 'trace' ? 'trace' : 'execution',
    points,
    origin_x: int(value.origin_x) ?? null,
    first_nonfinite_x: int(value.first_nonfinite_x) ?? null,
    executions: int(value.executions) ?? 0,
    traces: int(value.traces) ?? 0,
    binned: value.binned === true,
    note: typeof value.note === 'string' ? value.note : null,
  };
}

function readLossHistory(value: unknown): LossRow[] | null {
  if (!Array.isArray(value)) {
    return null;
  }
  const rows: LossRow[] = [];
  for (const row of value) {
    const step = isRecord(row) ? int(row.step) : undefined;
    if (!isRecord(row) || step === undefined) {
      continue;
    }
    const read: LossRow = { step, loss: num(row.loss), logged_loss: num(row.logged_loss) };
    const nonfinite: Partial<Record<HistoryNumber, NonFiniteKind>> = {};
    for (const name of HISTORY_NUMBERS) {
      if (name !== 'loss' && name !== 'logged_loss' && name in row) {
        read[name] = num(row[name]);
      }
      const kind = row[`${name}_nonfinite`];
      if (kind === 'nan' || kind === 'inf' || kind === '-inf') {
        nonfinite[name] = kind;
      }
    }
    if (Object.keys(nonfinite).length > 0) {
      read.nonfinite = nonfinite;
    }
    rows.push(read);
  }
  return rows.sort((a, b) => a.step - b.step);
}

function readCause(value: unknown): PictureCause | null {
  if (!isRecord(value) || typeof value.kind !== 'string') {
    return null;
  }
  const t = value.trend;
  const start = isRecord(t) ? int(t.start_step) : undefined;
  const end = isRecord(t) ? int(t.end_step) : undefined;
  const trend: TrendWindow | null =
    isRecord(t) && start !== undefined && end !== undefined && end >= start
      ? {
          series: str(t.series, 'loss'),
          start_step: start,
          end_step: end,
          steps: int(t.steps) ?? end - start,
          factor: num(t.factor),
          rate_per_step: num(t.rate_per_step),
          start_value: num(t.start_value),
          end_value: num(t.end_value),
        }
      : null;
  return { kind: value.kind, summary: str(value.summary), trend };
}

function readOrigin(value: unknown): OriginCaption | null {
  if (!isRecord(value) || !isRecord(value.op) || typeof value.file !== 'string') {
    return null;
  }
  const op = value.op;
  const caption: OriginCaption = {
    file: value.file,
    line: int(value.line) ?? 1,
    role: str(value.role, 'origin'),
    op: { name: str(op.name), type: str(op.type) },
  };
  if (typeof op.forward_op === 'string') {
    caption.op.forward_op = op.forward_op;
  }
  if (typeof value.message === 'string') {
    caption.message = value.message;
  }
  return caption;
}

/** A picture model from JSON, or undefined when it is not one; malformed parts are dropped, never thrown on. */
export function readPictureModel(value: unknown): PictureModel | undefined {
  if (!isRecord(value) || value.schema !== 'nanlens.pictures/1') {
    return undefined;
  }
  const nodes = Array.isArray(value.nodes) ? value.nodes.map(readNode).filter((n): n is PictureNode => !!n) : [];
  const ids = new Set(nodes.map((n) => n.id));
  const edges = Array.isArray(value.edges)
    ? value.edges.map((e) => readEdge(e, ids)).filter((e): e is PictureEdge => !!e)
    : [];
  const source = isRecord(value.source) ? value.source : {};
  const step = int(value.failing_step);
  return {
    source: { kind: str(source.kind, 'dump'), path: str(source.path), label: str(source.label, str(source.path)) },
    origin: readOrigin(value.origin),
    graph_name: typeof value.graph_name === 'string' ? value.graph_name : null,
    truncated: value.truncated === true,
    nodes,
    edges,
    timeline: readTimeline(value.timeline),
    loss_history: readLossHistory(value.loss_history),
    failing_step: step ?? null,
    cause: readCause(value.cause),
    notes: Array.isArray(value.notes) ? value.notes.filter((n): n is string => typeof n === 'string') : [],
  };
}
