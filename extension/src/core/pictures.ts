// The op graph and health timeline webviews, as plain logic: which source a command means, the webview's HTML
// and the messages it exchanges. No `vscode` import here. The "Show op graph" / "Health timeline" lenses and
// hover links on origin lines come from the language server (pyadapter/server/render.py), like every other
// lens and hover there; they run the two commands below.

import type { Source } from './protocol';

export type PictureView = 'graph' | 'timeline';

export const SHOW_OP_GRAPH = 'nanlens.showOpGraph';
export const SHOW_TIMELINE = 'nanlens.showTimeline';
export const PICTURE_MODEL_COMMAND = 'nanlens.server.pictureModel';

export const VIEW_TITLES: Record<PictureView, string> = { graph: 'Op Graph', timeline: 'Health Timeline' };

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The source a command argument names: a source id string, `{sourceId}` (lenses, hover links), or a row of the
 * Captures and Dumps view (a source row's `id` is the source id; a finding row's is `<source id>#<n>`).
 */
export function pictureSourceId(arg: unknown, sources: readonly Source[]): string | undefined {
  let id: unknown = arg;
  if (isRecord(arg)) {
    id = typeof arg.sourceId === 'string' ? arg.sourceId : arg.id;
  }
  if (typeof id !== 'string' || !id) {
    return undefined;
  }
  if (sources.some((s) => s.id === id)) {
    return id;
  }
  const hash = id.lastIndexOf('#');
  const owner = hash > 0 ? id.slice(0, hash) : undefined;
  if (owner !== undefined && sources.some((s) => s.id === owner)) {
    return owner;
  }
  const byPath = sources.find((s) => s.path === id);
  return byPath?.id ?? id; // an id the view does not know yet: let the server answer
}

/** Sources whose pictures can be drawn: read without error, with or without an origin. */
export function drawableSources(sources: readonly Source[]): Source[] {
  return sources.filter((s) => s.status === 'ok');
}

export function panelTitle(view: PictureView, label: string): string {
  return `NaN Lens ${VIEW_TITLES[view]}: ${label}`;
}

export interface WebviewPage {
  view: PictureView;
  scriptUri: string;
  styleUri: string;
  cspSource: string;
  nonce: string;
  title: string;
}

/** Escaped for text and double-quoted attributes (single quotes stay: the CSP needs them as they are). */
function escapeHtml(text: string): string {
  return text.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** The webview's page: only our bundle runs (nonce), styles and images only from the extension. */
export function webviewHtml(page: WebviewPage): string {
  const csp = [
    "default-src 'none'",
    `img-src ${page.cspSource} data:`,
    `style-src ${page.cspSource} 'unsafe-inline'`,
    `script-src 'nonce-${page.nonce}'`,
    `font-src ${page.cspSource}`,
  ].join('; ');
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${escapeHtml(csp)}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(page.title)}</title>
<link rel="stylesheet" href="${escapeHtml(page.styleUri)}">
</head>
<body class="nl-webview">
<div class="nl-view" data-nanlens-view="${page.view}"><p class="nl-status">Loading the picture…</p></div>
<script nonce="${escapeHtml(page.nonce)}" src="${escapeHtml(page.scriptUri)}"></script>
</body>
</html>
`;
}

/** A nonce for the CSP: 32 characters from a random source (crypto in the caller). */
export function makeNonce(randomBytes: (n: number) => Uint8Array): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  return [...randomBytes(32)].map((b) => alphabet[b % alphabet.length]).join('');
}

export type WebviewMessage = { type: 'ready' } | { type: 'open'; file: string; line: number };

/** A message from the webview, or undefined for anything else. */
export function readWebviewMessage(message: unknown): WebviewMessage | undefined {
  if (!isRecord(message)) {
    return undefined;
  }
  if (message.type === 'ready') {
    return { type: 'ready' };
  }
  if (message.type === 'open' && typeof message.file === 'string' && message.file) {
    const line = typeof message.line === 'number' && Number.isInteger(message.line) && message.line >= 1 ? message.line : 1;
    return { type: 'open', file: message.file, line };
  }
  return undefined;
}

/** The server's answer to `nanlens.server.pictureModel`: the model, or one line saying why not. */
export function readPictureAnswer(answer: unknown): { model: Record<string, unknown> } | { error: string } {
  if (!isRecord(answer)) {
    return { error: 'the language server sent no picture (is it running?)' };
  }
  if (typeof answer.error === 'string') {
    return { error: answer.error };
  }
  if (answer.schema !== 'nanlens.pictures/1') {
    return { error: 'the language server sent a picture in an unknown format' };
  }
  return { model: answer };
}
