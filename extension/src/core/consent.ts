// The user's say before a bundle's program runs (docs/protocol.md, "Consent"), as plain logic: the question the
// editor asks when a replay refused a program, what it remembers for the session, and the notice for bundles that
// wait for a Locate. No `vscode` import: unit-tested under plain Node.

import * as path from 'node:path';
import type { Source, Untrusted } from './protocol';

/** A modal question: the message (its title line), the detail under it and the button that says yes. */
export interface TrustQuestion {
  message: string;
  detail: string;
  run: string;
}

const WHY: Record<Untrusted['reason'], string> = {
  outside: 'It is outside your workspace.',
  changed: 'It changed since the capture.',
  untrusted: 'NaN Lens cannot tell that it is your code.',
};

/** "Run train.py? It changed since the capture." with the full path and the refusal in the detail. */
export function trustQuestion(untrusted: Untrusted, bundleLabel?: string): TrustQuestion {
  const name = path.basename(untrusted.file);
  const bundle = bundleLabel ? `The capture bundle ${bundleLabel}` : 'The capture bundle';
  const yours =
    untrusted.reason === 'changed'
      ? 'If the change is yours (a fix you just made), run it.'
      : 'Run it only if it is your own code: a bundle is data, and anyone can name any file in it.';
  return {
    message: `Run ${name}? ${WHY[untrusted.reason]}`,
    detail: `${bundle} names ${untrusted.file}; replaying its step runs that program. ${yours}` +
      (untrusted.message ? `\n\n${untrusted.message}` : ''),
    run: `Run ${name}`,
  };
}

function normalize(file: string): string {
  return path.normalize(file);
}

/** The programs the user agreed to run, per bundle, for this session (never written anywhere). */
export class TrustMemory {
  private readonly byBundle = new Map<string, Set<string>>();

  /** The files trusted for this bundle, sorted (what `--trust-entry` gets). */
  files(bundle: string): string[] {
    return [...(this.byBundle.get(normalize(bundle)) ?? [])].sort();
  }

  has(bundle: string, file: string): boolean {
    return this.byBundle.get(normalize(bundle))?.has(normalize(file)) ?? false;
  }

  remember(bundle: string, file: string): void {
    const key = normalize(bundle);
    const files = this.byBundle.get(key) ?? new Set<string>();
    files.add(normalize(file));
    this.byBundle.set(key, files);
  }
}

export type Ask = (question: TrustQuestion) => Promise<boolean>;

export interface ConsentOutcome<T> {
  /** The last answer of `run` (undefined when it gave none). */
  answer: T | undefined;
  /** The user said no to running this file. */
  declined?: Untrusted;
}

/**
 * Run an action that a replay may refuse until the user trusts the bundle's program: run it with the files trusted
 * for this bundle so far; when the answer names a refused file, ask once (naming it), and on yes remember it and run
 * again with it. A file already trusted is never asked about twice: a second refusal of it ends the loop.
 */
export async function withConsent<T>(
  bundle: string,
  memory: TrustMemory,
  ask: Ask,
  run: (trust: string[]) => Promise<T | undefined>,
  refusalOf: (answer: T) => Untrusted | undefined,
  bundleLabel?: string,
): Promise<ConsentOutcome<T>> {
  let answer = await run(memory.files(bundle));
  for (let round = 0; round < 3 && answer !== undefined; round += 1) {
    const refused = refusalOf(answer);
    if (refused === undefined || memory.has(bundle, refused.file)) {
      break;
    }
    if (!(await ask(trustQuestion(refused, bundleLabel)))) {
      return { answer, declined: refused };
    }
    memory.remember(bundle, refused.file);
    answer = await run(memory.files(bundle));
  }
  return { answer };
}

/** The bundle path a verify target names: a source id (`bundle:/abs`) or a path. */
export function bundlePathOf(target: string): string {
  return target.startsWith('bundle:') ? target.slice('bundle:'.length) : target;
}

/** Bundles waiting for the user's Locate that were not announced yet (and now are). */
export function newlyUnlocated(sources: readonly Source[], announced: Set<string>): Source[] {
  const fresh = sources.filter((s) => s.kind === 'bundle' && s.status === 'unlocated' && !announced.has(s.id));
  for (const source of fresh) {
    announced.add(source.id);
  }
  return fresh;
}

/** What locating a bundle runs, in a few words: "runs train.py". */
export function runsText(source: Pick<Source, 'entry'>): string {
  return source.entry ? `runs ${path.basename(source.entry)}` : "runs the bundle's training program";
}

/** Why a bundle waits: "train.py changed since the capture" / "captured on node-7" / undefined. */
export function waitingReason(source: Pick<Source, 'untrusted' | 'foreign'>): string | undefined {
  const refused = source.untrusted;
  if (refused) {
    const name = path.basename(refused.file);
    return refused.reason === 'outside'
      ? `${name} is outside the workspace`
      : refused.reason === 'changed'
        ? `${name} changed since the capture`
        : `${name} was not run`;
  }
  return source.foreign ?? undefined;
}

export interface Notice {
  message: string;
  /** Buttons, the first the main one: "Locate" for one bundle (then the bundle), "Show Captures" for several. */
  actions: string[];
  bundle?: string;
}

/** The one notification for bundles that now wait for a Locate (one or several), or undefined for none. */
export function unlocatedNotice(sources: readonly Source[]): Notice | undefined {
  const [first] = sources;
  if (first === undefined) {
    return undefined;
  }
  if (sources.length === 1) {
    const why = waitingReason(first);
    return {
      message:
        `NaN Lens: ${first.label} has no findings yet${why ? ` (${why})` : ''}. Locating it replays the captured ` +
        `step, which ${runsText(first)}.`,
      actions: ['Locate', 'Show Captures'],
      bundle: first.path,
    };
  }
  return {
    message:
      `NaN Lens: ${sources.length} capture bundles have no findings yet. Locating one replays its step, which runs ` +
      'its training program: use Locate on the one you want.',
    actions: ['Show Captures'],
  };
}
