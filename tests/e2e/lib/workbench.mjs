// workbench.mjs — what a person does in VS Code, as functions of a playwright Page on code-server.
// Everything acts through the UI (command palette, quick open, mouse) and reads what is drawn.
//   runCommand(page, title)                 F1, type the title, click the matching entry ("NaN Lens: Show Logs")
//   openFile(page, relPath, {line})         Quick Open the file (by its path relative to the workspace), then
//                                           go to `line`; waits until the tab is active and the cursor is there
//   goToLine(page, line)                    the "Go to Line" palette; returns the status bar's "Ln N, Col M"
//   cursorPosition(page) -> {line, column}  from the status bar
//   statusBarItem(page, text) -> {id, text, ariaLabel, codicons} | null   the first item containing `text`
//   waitForStatusBarItem(page, text, opts)  the same, waiting until it is shown
//   hoverLine(page, line, {timeoutMs}) -> string   move the mouse over the line's first word, return the hover text
//   editorLineLayout(page) -> [{line, top, bottom}] the visible lines of the active editor, in page pixels
//   gutterDecorations(page, {line}) -> [{line, className}]  glyph-margin decorations (`.cgmr`) by line
//   lineDecorations(page, selector) -> [{line, className}]  any element (e.g. '.debug-top-stack-frame-line') by line
//   codeLenses(page) -> [{title, line}]     CodeLens links (`.codelens-decoration a`) in the active editor
//   clickCodeLens(page, title)              click the first CodeLens whose title contains `title`
//   toggleBreakpoint(page, line)            Go to Line + "Debug: Toggle Breakpoint"
//   debugState(page) -> {toolbar, paused, stackFrameLines, callStackTop}   what the debug UI shows
//   waitForPausedAt(page, line)             until a session is paused with its top frame on `line`
//   debugVariables(page) -> [{name, value}] the Variables view's rows ("Locals", "x" = "-1.0", ...)
//   debugAction(page, label)                click a debug toolbar button ("Continue", "Step Over", "Stop")
//   showOutputChannel(page, name)           pick a channel in the Output panel's dropdown
//   outputPanelChannel(page) -> name|null   which channel the Output panel shows
//   outputPanelText(page, {filter}) -> string  the visible text of the Output panel (after typing `filter`
//                                           into its Filter box, when given)
//   notifications(page) -> string[]         toasts currently shown
//   openNotebook(page, relPath)             Quick Open an .ipynb; returns once its notebook editor shows code cells
//   notebookCells(page) -> [{index, kind, text, lines, gutter, lenses, afterText}]   the visible notebook's
//                                           cells as drawn: `index` counts all cells (markdown too), `gutter`
//                                           [{line, className, src}] glyph-margin icons, `lenses` [{title, line}],
//                                           `afterText` [{line, text}] decoration text drawn after lines
//   hoverNotebookLine(page, cell, line) -> string   hover the first word of a line of a cell, return the hover text
//   screenshot(page, dir, stage) -> path    one PNG per stage, numbered in call order
// Line numbers are 1-based, as the editor shows them.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { waitFor } from './procs.mjs';

const QUICK_INPUT = '.quick-input-widget';
const QUICK_INPUT_BOX = `${QUICK_INPUT} .quick-input-box input`;
const QUICK_ROWS = `${QUICK_INPUT} .quick-input-list .monaco-list-row`;
/** The editor a person is looking at: the active group's code editor (not the Output panel's). */
export const ACTIVE_EDITOR = '.part.editor .editor-group-container.active .editor-container .monaco-editor';

async function openQuickInput(page, text) {
  const box = page.locator(QUICK_INPUT_BOX);
  if (!(await box.isVisible())) {
    // F1 opens the command palette with ">" typed; replacing the text switches modes (files, ":line").
    await page.locator('.monaco-workbench').focus().catch(() => {});
    await page.keyboard.press('F1');
  }
  await box.waitFor({ state: 'visible' });
  await box.fill(text);
  return box;
}

async function closeQuickInput(page) {
  if (await page.locator(QUICK_INPUT_BOX).isVisible()) await page.keyboard.press('Escape');
}

/** Run a command by its palette title, e.g. "NaN Lens: Show Logs" (clicking the entry, as a person would). */
export async function runCommand(page, title, { timeoutMs = 15000 } = {}) {
  await openQuickInput(page, `>${title}`);
  const row = page.locator(QUICK_ROWS).filter({ hasText: title }).first();
  try {
    await row.waitFor({ state: 'visible', timeout: timeoutMs });
  } catch (error) {
    const offered = await page.locator(QUICK_ROWS).allInnerTexts();
    await closeQuickInput(page);
    throw new Error(`command "${title}" is not in the palette (offered: ${JSON.stringify(offered)}): ${error.message}`);
  }
  await row.click();
  await page.locator(QUICK_INPUT_BOX).waitFor({ state: 'hidden', timeout: timeoutMs }).catch(() => {});
}

/** The cursor position shown in the status bar ("Ln 12, Col 5"), or null when no editor is active. */
export async function cursorPosition(page) {
  const item = page.locator('.statusbar-item#status\\.editor\\.selection');
  if (!(await item.isVisible())) return null;
  const match = /Ln (\d+), Col (\d+)/.exec(await item.innerText());
  return match ? { line: Number(match[1]), column: Number(match[2]) } : null;
}

/** Move the cursor to `line` with the "Go to Line" palette (":N"); the line is revealed in the editor. */
export async function goToLine(page, line, { timeoutMs = 10000 } = {}) {
  await openQuickInput(page, `:${line}`);
  await page.keyboard.press('Enter');
  return waitFor(async () => {
    const position = await cursorPosition(page);
    return position && position.line === line && position;
  }, { timeoutMs, what: `the cursor on line ${line}` });
}

/** Open a workspace file through Quick Open, optionally at a line; returns once its tab is active. */
export async function openFile(page, relPath, { line, timeoutMs = 20000 } = {}) {
  const base = relPath.split('/').pop();
  await openQuickInput(page, relPath);
  // File search runs in the server (ripgrep); the row's description holds the folder.
  const row = page.locator(QUICK_ROWS).filter({ has: page.locator('.label-name', { hasText: base }) }).first();
  await row.waitFor({ state: 'visible', timeout: timeoutMs });
  await row.click();
  await page
    .locator('.part.editor .editor-group-container.active .tab.active', { hasText: base })
    .waitFor({ state: 'visible', timeout: timeoutMs });
  await page.locator(`${ACTIVE_EDITOR} .view-lines`).waitFor({ state: 'visible', timeout: timeoutMs });
  if (line !== undefined) await goToLine(page, line, { timeoutMs });
}

/** The first status bar item whose text or aria-label contains `text`, or null. */
export async function statusBarItem(page, text) {
  const items = await page.locator('.part.statusbar .statusbar-item').evaluateAll((elements) =>
    elements.map((element) => ({
      id: element.id,
      text: element.innerText.trim(),
      ariaLabel: element.getAttribute('aria-label') ?? '',
      codicons: [...element.querySelectorAll('.codicon')].flatMap((icon) =>
        [...icon.classList].filter((name) => name.startsWith('codicon-')).map((name) => name.slice(8)),
      ),
    })),
  );
  return items.find((item) => item.text.includes(text) || item.ariaLabel.includes(text)) ?? null;
}

export async function waitForStatusBarItem(page, text, { timeoutMs = 30000, where = () => true } = {}) {
  return waitFor(
    async () => {
      const item = await statusBarItem(page, text);
      return item && where(item) && item;
    },
    { timeoutMs, what: `a status bar item with "${text}"` },
  );
}

/** The visible lines of the active editor: their number and vertical extent in page pixels. */
export async function editorLineLayout(page) {
  return page.locator(`${ACTIVE_EDITOR} .margin-view-overlays .line-numbers`).evaluateAll((elements) =>
    elements
      .map((element) => {
        const box = element.getBoundingClientRect();
        return { line: Number(element.textContent.trim()), top: box.top, bottom: box.bottom };
      })
      .filter((entry) => Number.isInteger(entry.line) && entry.bottom > entry.top)
      .sort((a, b) => a.top - b.top),
  );
}

/**
 * The line layout and the boxes of `selector` in the active editor, read in ONE page evaluation: read
 * separately, a view zone (a CodeLens) appearing in between shifts every box by a line.
 */
async function layoutAndBoxes(page, selector) {
  return page.locator(ACTIVE_EDITOR).evaluateAll((editors, sel) => {
    const layout = [];
    const boxes = [];
    for (const editor of editors) {
      for (const element of editor.querySelectorAll('.margin-view-overlays .line-numbers')) {
        const box = element.getBoundingClientRect();
        const line = Number(element.textContent.trim());
        if (Number.isInteger(line) && box.bottom > box.top) layout.push({ line, top: box.top, bottom: box.bottom });
      }
      for (const element of editor.querySelectorAll(sel)) {
        const box = element.getBoundingClientRect();
        boxes.push({ className: element.className, title: element.innerText?.trim() ?? '', top: box.top, bottom: box.bottom });
      }
    }
    layout.sort((a, b) => a.top - b.top);
    return { layout, boxes };
  }, selector);
}

function lineAt(layout, top, bottom) {
  const middle = (top + bottom) / 2;
  const hit = layout.find((entry) => middle >= entry.top && middle < entry.bottom);
  return hit ? hit.line : null;
}

/** Elements matching `selector` inside the active editor, mapped to the line they are drawn on. */
export async function lineDecorations(page, selector, { line } = {}) {
  const { layout, boxes } = await layoutAndBoxes(page, selector);
  return boxes
    .filter((box) => box.bottom > box.top)
    .map((box) => ({ line: lineAt(layout, box.top, box.bottom), className: box.className }))
    .filter((entry) => entry.line !== null && (line === undefined || entry.line === line));
}

/** Glyph-margin decorations (`.cgmr`, with the decoration's class) of the active editor, by line. */
export async function gutterDecorations(page, { line } = {}) {
  return lineDecorations(page, '.cgmr', { line });
}

/**
 * Hover the first word of `line` in the active editor with the mouse and return the hover's text.
 * The line must be visible (openFile/goToLine reveal it).
 */
export async function hoverLine(page, line, { timeoutMs = 10000 } = {}) {
  const layout = await editorLineLayout(page);
  const entry = layout.find((candidate) => candidate.line === line);
  if (!entry) throw new Error(`line ${line} is not visible in the editor (visible: ${layout.map((l) => l.line).join(',')})`);
  // The first non-blank token of the line drawn at that height.
  const target = await page.locator(`${ACTIVE_EDITOR} .view-lines .view-line`).evaluateAll(
    (elements, { top, bottom }) => {
      const middle = (top + bottom) / 2;
      for (const element of elements) {
        const box = element.getBoundingClientRect();
        if (middle < box.top || middle >= box.bottom) continue;
        for (const span of element.querySelectorAll('span > span')) {
          if (!span.textContent.trim()) continue;
          const spanBox = span.getBoundingClientRect();
          const leading = span.textContent.length - span.textContent.trimStart().length;
          const charWidth = spanBox.width / Math.max(1, span.textContent.length);
          return { x: spanBox.left + charWidth * (leading + 0.5), y: (spanBox.top + spanBox.bottom) / 2 };
        }
      }
      return null;
    },
    entry,
  );
  if (!target) throw new Error(`line ${line} has no text to hover`);
  // Move away first so a hover already shown for another line is closed and a new one is computed.
  await page.mouse.move(5, 5);
  await page.mouse.move(target.x, target.y, { steps: 3 });
  const hover = page.locator('.monaco-hover:not(.hidden) .monaco-hover-content').first();
  await hover.waitFor({ state: 'visible', timeout: timeoutMs });
  // Hovers fill in as providers answer: wait until the text stops changing.
  let previous = '';
  return waitFor(
    async () => {
      const text = (await hover.innerText()).trim();
      const stable = text && text === previous;
      previous = text;
      return stable && text;
    },
    { timeoutMs, intervalMs: 300, what: `the hover on line ${line}` },
  );
}

/** CodeLens links in the active editor with the line they stand above. */
export async function codeLenses(page) {
  const { layout, boxes: lenses } = await layoutAndBoxes(page, '.codelens-decoration a');
  // A lens is drawn in a view zone just above its line: the line is the first one below the lens.
  return lenses.map((lens) => {
    const below = layout.find((entry) => entry.top >= lens.bottom - 1);
    return { title: lens.title, line: below ? below.line : null };
  });
}

export async function clickCodeLens(page, title, { timeoutMs = 15000 } = {}) {
  const link = page.locator(`${ACTIVE_EDITOR} .codelens-decoration a`, { hasText: title }).first();
  await link.waitFor({ state: 'visible', timeout: timeoutMs });
  await link.click();
}

/** What the debug UI shows: the toolbar, whether a session is paused, and on which lines of the active editor. */
export async function debugState(page) {
  const toolbar = await page.locator('.debug-toolbar').isVisible().catch(() => false);
  const stackFrameLines = (await lineDecorations(page, '.debug-top-stack-frame-line, .debug-top-stack-frame')).map(
    (entry) => entry.line,
  );
  const pausedItem = page.locator('.debug-call-stack .monaco-list-row .state.label, .debug-call-stack .paused');
  const callStackTop = await page
    .locator('.debug-call-stack .monaco-list-row .stack-frame')
    .first()
    .innerText({ timeout: 500 })
    .catch(() => null);
  const paused = stackFrameLines.length > 0 || (await pausedItem.count()) > 0;
  return { toolbar, paused, stackFrameLines: [...new Set(stackFrameLines)], callStackTop };
}

/** Toggle a breakpoint on `line` of the active editor (Go to Line, then "Debug: Toggle Breakpoint"). */
export async function toggleBreakpoint(page, line) {
  await goToLine(page, line);
  await runCommand(page, 'Debug: Toggle Breakpoint');
}

/** Click a debug toolbar button by its label: "Continue", "Step Over", "Step Into", "Restart", "Stop", ... */
export async function debugAction(page, label, { timeoutMs = 10000 } = {}) {
  const button = page.locator(`.debug-toolbar .action-label[aria-label^="${label}"]`).first();
  await button.waitFor({ state: 'visible', timeout: timeoutMs });
  await button.click();
}

/** Wait until a debug session is paused on `line` of the active editor (any line when omitted). */
export async function waitForPausedAt(page, line, { timeoutMs = 60000 } = {}) {
  return waitFor(
    async () => {
      const state = await debugState(page);
      return state.paused && (line === undefined || state.stackFrameLines.includes(line)) && state;
    },
    { timeoutMs, intervalMs: 500, what: `the debugger paused${line === undefined ? '' : ` on line ${line}`}` },
  );
}

/** The rows of the Run and Debug view's Variables section as shown: [{name, value}] (scopes have value ''). */
export async function debugVariables(page) {
  return page.locator('.debug-variables .monaco-list-row').evaluateAll((rows) =>
    rows.map((row) => ({
      name: (row.querySelector('.name')?.textContent ?? row.innerText).trim().replace(/\s*[=:]$/, ''),
      value: row.querySelector('.value')?.textContent.trim() ?? '',
    })),
  );
}

/** Select an output channel by name in the Output panel (opening the panel first). */
export async function showOutputChannel(page, name, { timeoutMs = 10000 } = {}) {
  await runCommand(page, 'Output: Focus on Output View');
  const select = page.locator('.part.panel select.monaco-select-box >> visible=true').first();
  await select.waitFor({ state: 'visible', timeout: timeoutMs });
  await select.selectOption({ label: name });
}

/** The name of the channel the Output panel shows (its editor is labelled "<name> - Output"), or null. */
export async function outputPanelChannel(page) {
  const label = await page
    .locator('.part.panel .monaco-editor textarea')
    .first()
    .getAttribute('aria-label', { timeout: 1000 })
    .catch(() => null);
  return label ? label.replace(/ - Output$/, '') : null;
}

/**
 * The visible text of the Output panel, lines in screen order. With `filter`, the panel's Filter box is
 * set first (as a person would to find a line in a long log); '' clears it.
 */
export async function outputPanelText(page, { filter } = {}) {
  if (filter !== undefined) {
    const box = page.locator('.part.panel input[placeholder="Filter"] >> visible=true').first();
    await box.fill(filter);
    await page.waitForTimeout(300); // the panel re-renders after the filter's debounce
  }
  return page.locator('.part.panel .monaco-editor .view-lines .view-line').evaluateAll((elements) =>
    elements
      .map((element) => ({ top: element.getBoundingClientRect().top, text: element.innerText }))
      .sort((a, b) => a.top - b.top)
      .map((entry) => entry.text.replace(/\u00a0/g, ' '))
      .join('\n'),
  );
}

// --- notebooks: VS Code draws a notebook as an overlay of cells, each code cell with a small editor of its own.
const NOTEBOOK = '.notebook-editor';

/** Open a notebook through Quick Open; returns once its editor shows a code cell's lines. */
export async function openNotebook(page, relPath, { timeoutMs = 30000 } = {}) {
  const base = relPath.split('/').pop();
  await openQuickInput(page, relPath);
  const row = page.locator(QUICK_ROWS).filter({ has: page.locator('.label-name', { hasText: base }) }).first();
  await row.waitFor({ state: 'visible', timeout: timeoutMs });
  await row.click();
  await page
    .locator('.part.editor .editor-group-container.active .tab.active', { hasText: base })
    .waitFor({ state: 'visible', timeout: timeoutMs });
  await page.locator(`${NOTEBOOK} .code-cell-row .monaco-editor .view-lines >> visible=true`).first()
    .waitFor({ state: 'visible', timeout: timeoutMs });
}

/**
 * The cells of the visible notebook editor as drawn, read in one page evaluation (a CodeLens appearing
 * meanwhile cannot shift lines against icons). `index` is the row's position among all cells (markdown cells
 * count; nothing is folded here). Lines come from the cells' line numbers (setting `notebook.lineNumbers`).
 */
export async function notebookCells(page) {
  return page.locator(`${NOTEBOOK} .cell-list-container .monaco-list-row`).evaluateAll((rows) => {
    const lineAt = (layout, top, bottom) => {
      const middle = (top + bottom) / 2;
      return layout.find((entry) => middle >= entry.top && middle < entry.bottom)?.line ?? null;
    };
    // Rows of the notebook on screen (a notebook in a background tab keeps its overlay, hidden).
    const shown = (row) => (row.closest('.notebook-editor')?.getBoundingClientRect().height ?? 0) > 0;
    return rows
      .filter(shown)
      .map((row) => {
        const lines = [...row.querySelectorAll('.margin-view-overlays .line-numbers')]
          .map((element) => {
            const box = element.getBoundingClientRect();
            return { line: Number(element.textContent.trim()), top: box.top, bottom: box.bottom };
          })
          .filter((entry) => Number.isInteger(entry.line) && entry.bottom > entry.top)
          .sort((a, b) => a.top - b.top);
        const gutter = [...row.querySelectorAll('.cgmr')].map((element) => {
          const box = element.getBoundingClientRect();
          const match = /url\("?(data:[^")]+)"?\)/.exec(getComputedStyle(element).backgroundImage);
          return { line: lineAt(lines, box.top, box.bottom), className: element.className, src: match ? match[1] : null };
        });
        const lenses = [...row.querySelectorAll('.codelens-decoration a')].map((element) => {
          const box = element.getBoundingClientRect();
          const below = lines.find((entry) => entry.top >= box.bottom - 1);
          return { title: element.innerText.trim(), line: below ? below.line : null };
        });
        // Decoration texts after a line (`after.contentText`) are drawn as CSS ::after content of a span.
        const afterText = [];
        for (const element of row.querySelectorAll('.view-line')) {
          const box = element.getBoundingClientRect();
          for (const span of element.querySelectorAll('span')) {
            const content = getComputedStyle(span, '::after').content;
            if (content && content !== 'none' && content !== 'normal') {
              afterText.push({ line: lineAt(lines, box.top, box.bottom), text: content.replace(/^"|"$/g, '').replace(/\\"/g, '"') });
            }
          }
        }
        return {
          index: Number(row.getAttribute('data-index')),
          kind: row.classList.contains('markdown-cell-row') ? 'markdown' : 'code',
          text: [...row.querySelectorAll('.view-line')].map((element) => element.innerText.replace(/\u00a0/g, ' ')).join('\n'),
          lines,
          gutter,
          lenses,
          afterText,
        };
      })
      .sort((a, b) => a.index - b.index);
  });
}

/** Hover the first word of `line` of the notebook cell at `cell` (its index among all cells); the hover's text. */
export async function hoverNotebookLine(page, cell, line, { timeoutMs = 10000 } = {}) {
  const target = await page.locator(`${NOTEBOOK} .cell-list-container .monaco-list-row[data-index="${cell}"]`).evaluateAll(
    (rows, wanted) => {
      for (const row of rows) {
        if ((row.closest('.notebook-editor')?.getBoundingClientRect().height ?? 0) === 0) continue;
        const number = [...row.querySelectorAll('.margin-view-overlays .line-numbers')].find(
          (element) => Number(element.textContent.trim()) === wanted,
        );
        if (!number) return null;
        const { top, bottom } = number.getBoundingClientRect();
        const middle = (top + bottom) / 2;
        for (const element of row.querySelectorAll('.view-lines .view-line')) {
          const box = element.getBoundingClientRect();
          if (middle < box.top || middle >= box.bottom) continue;
          for (const span of element.querySelectorAll('span > span')) {
            if (!span.textContent.trim()) continue;
            const spanBox = span.getBoundingClientRect();
            const leading = span.textContent.length - span.textContent.trimStart().length;
            const charWidth = spanBox.width / Math.max(1, span.textContent.length);
            return { x: spanBox.left + charWidth * (leading + 0.5), y: (spanBox.top + spanBox.bottom) / 2 };
          }
        }
      }
      return null;
    },
    line,
  );
  if (!target) throw new Error(`line ${line} of notebook cell ${cell} is not visible or has no text`);
  await page.mouse.move(5, 5);
  await page.mouse.move(target.x, target.y, { steps: 3 });
  const hover = page.locator('.monaco-hover:not(.hidden) .monaco-hover-content').first();
  await hover.waitFor({ state: 'visible', timeout: timeoutMs });
  let previous = '';
  return waitFor(
    async () => {
      const text = (await hover.innerText()).trim();
      const stable = text && text === previous;
      previous = text;
      return stable && text;
    },
    { timeoutMs, intervalMs: 300, what: `the hover on line ${line} of notebook cell ${cell}` },
  );
}

/** The modal dialog shown now (VS Code draws its own in the window): message, detail and buttons; null if none. */
export async function modalDialog(page) {
  const box = page.locator('.monaco-dialog-box').first();
  if (!(await box.isVisible().catch(() => false))) return null;
  const text = async (selector) => (await box.locator(selector).allInnerTexts()).join('\n').trim();
  return {
    message: await text('.dialog-message-text'),
    detail: await text('.dialog-message-detail'),
    buttons: await box.locator('.dialog-buttons .monaco-button').allInnerTexts(),
  };
}

/** Wait for a modal dialog whose message matches `message` (a RegExp), and return it. */
export async function waitForModalDialog(page, message, { timeoutMs = 60000 } = {}) {
  return waitFor(async () => {
    const dialog = await modalDialog(page);
    return dialog && message.test(dialog.message) && dialog;
  }, { timeoutMs, intervalMs: 300, what: `a dialog saying ${message}` });
}

/** Click a button of the modal dialog by its label. */
export async function clickDialogButton(page, label, { timeoutMs = 10000 } = {}) {
  await page.locator('.monaco-dialog-box .dialog-buttons .monaco-button', { hasText: label }).first().click({ timeout: timeoutMs });
}

/** The texts of the notification toasts currently shown. */
export async function notifications(page) {
  return page.locator('.notifications-toasts .notification-list-item-message').allInnerTexts();
}

const shotCounters = new Map();

/** Save a PNG of the whole window as <dir>/<NN>-<stage>.png (NN counts per dir) and return its path. */
/** Share of a data-URI icon's opaque pixels that are red (the origin icon is red, a carried line's amber). */
export async function redShare(page, src) {
  return page.evaluate(async (uri) => {
    const image = new Image();
    image.src = uri;
    await image.decode();
    const canvas = document.createElement('canvas');
    canvas.width = 32;
    canvas.height = 32;
    const context = canvas.getContext('2d');
    context.drawImage(image, 0, 0, 32, 32);
    const { data } = context.getImageData(0, 0, 32, 32);
    let opaque = 0;
    let red = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (data[i + 3] < 128) continue;
      opaque += 1;
      if (data[i] > 170 && data[i + 1] < 120 && data[i + 2] < 120) red += 1;
    }
    return opaque ? red / opaque : 0;
  }, src);
}

/** The rows of the Problems view as shown: text (message, source, code, "[Ln N, Col M]"), severity, resource. */
export async function problemsRows(page) {
  return page.locator('.markers-panel .monaco-list-row').evaluateAll((rows) =>
    rows.map((row) => ({
      text: row.innerText.trim(),
      error: Boolean(row.querySelector('.codicon-error')),
      resource: Boolean(row.querySelector('.file-icon, .monaco-icon-label.file-icon')),
    })),
  );
}

export async function screenshot(page, dir, stage) {
  mkdirSync(dir, { recursive: true });
  const count = (shotCounters.get(dir) ?? 0) + 1;
  shotCounters.set(dir, count);
  const file = join(dir, `${String(count).padStart(2, '0')}-${stage.replace(/[^\w.-]+/g, '-')}.png`);
  await page.screenshot({ path: file });
  return file;
}
