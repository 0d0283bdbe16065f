// `nanlens report` in a real browser (Debian's Chromium via playwright-core), for the demo's capture bundle:
// demo/train.py under NanGuard captures the failing step, `nanlens report BUNDLE --html` replays it with a
// health dump and writes one page; the page, opened from disk with every network request blocked, must show the
// op graph with the origin Log in red, highlighted, fed by the softmax that holds the zeros, and a health
// timeline marking where the non-finite values begin. Screenshot: artifacts/report/.
// Also: the web bundle committed in pyadapter/report_assets is exactly what a fresh build of extension/webview
// makes (so a report never draws with stale code).
//   npm run test:report          (NANLENS_REPORT_BUNDLE=<dir> reuses a bundle instead of training the demo)

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';

const run = promisify(execFile);
const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PYTHON = process.env.NANLENS_E2E_PYTHON || join(REPO, '.venv', 'bin', 'python');
const CHROMIUM = process.env.NANLENS_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = join(REPO, 'artifacts', 'report');
const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--headless',
];
const RED = 'rgb(211, 47, 47)'; // palette: -inf
const GREEN = 'rgb(46, 125, 50)'; // palette: finite
const ORIGIN_LINE_COLOR = [0xb7, 0x1c, 0x1c]; // timelineView: the origin marker

const work = mkdtempSync(join(tmpdir(), 'nanlens-report-test-'));
after(() => rmSync(work, { recursive: true, force: true }));

function bundlesIn(dir) {
  return readdirSync(dir)
    .map((name) => join(dir, name))
    .filter((path) => {
      try {
        return JSON.parse(readFileSync(join(path, 'manifest.json'), 'utf8')).format === 'nanlens.bundle/1';
      } catch {
        return false;
      }
    });
}

test('the committed report assets are what a fresh build of extension/webview makes', async () => {
  const out = join(work, 'fresh-build');
  await run(process.execPath, [join(REPO, 'extension', 'build.mjs'), '--webview-only', '--outdir', out], { cwd: REPO });
  for (const name of ['pictures.js', 'pictures.css']) {
    const fresh = readFileSync(join(out, name), 'utf8');
    const committed = readFileSync(join(REPO, 'pyadapter', 'report_assets', name), 'utf8');
    assert.ok(fresh === committed, `pyadapter/report_assets/${name} is stale: run \`npm run build\` and commit it`);
    assert.ok(fresh.length < 1_500_000, `${name} is ${fresh.length} bytes`);
  }
});

let report; // { html, bundle, step, originLine }

before(async () => {
  let bundle = process.env.NANLENS_REPORT_BUNDLE;
  const env = { ...process.env, TF_CPP_MIN_LOG_LEVEL: '2' };
  if (!bundle) {
    const captures = join(work, 'captures');
    mkdirSync(captures);
    // The demo exits 1 once its loss is NaN (that is the point): NanGuard has captured the step by then.
    await run(PYTHON, [join(REPO, 'demo', 'train.py')], {
      cwd: work,
      env: { ...env, NANLENS_CAPTURE_DIR: captures },
      timeout: 300000,
      maxBuffer: 32 << 20,
    }).catch((error) => error);
    const found = bundlesIn(captures);
    assert.equal(found.length, 1, 'demo/train.py under NanGuard left one capture bundle');
    bundle = found[0];
  }
  const html = join(work, 'demo-report.html');
  const made = await run(PYTHON, ['-m', 'pyadapter', 'report', bundle, '--html', html], {
    cwd: work,
    env,
    timeout: 300000,
    maxBuffer: 32 << 20,
  });
  assert.match(made.stdout, /wrote .*demo-report\.html .*origin Log/);
  const step = JSON.parse(readFileSync(join(bundle, 'manifest.json'), 'utf8')).step;
  const demo = readFileSync(join(REPO, 'demo', 'train.py'), 'utf8').split('\n');
  const originLine = demo.findIndex((line) => line.includes('tf.math.log(probs)')) + 1;
  report = { html, bundle, step, originLine };
});

test('the demo report shows the origin Log red with its softmax input, and where non-finite values begin', {
  skip: existsSync(CHROMIUM) ? false : `no browser at ${CHROMIUM} (scripts/setup-e2e.sh installs Debian's chromium)`,
  timeout: 120000,
}, async () => {
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 60000 });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const fetched = [];
    await page.route('**/*', (route) => {
      const url = route.request().url();
      if (url.startsWith('file:') || url.startsWith('data:')) return route.continue();
      fetched.push(url);
      return route.abort();
    });
    const errors = [];
    page.on('pageerror', (error) => errors.push(error.message));
    await page.goto(`file://${report.html}`);
    await page.locator('body[data-nanlens-rendered="true"]').waitFor({ timeout: 15000 });

    // --- the op graph ---
    const nodes = await page.locator('svg.nl-graph .nl-node').evaluateAll((elements) =>
      elements.map((g) => ({
        id: g.dataset.id,
        type: g.dataset.type,
        name: g.dataset.name,
        health: g.dataset.health,
        role: g.dataset.role,
        label: g.getAttribute('aria-label'),
        text: g.textContent,
        fill: getComputedStyle(g.querySelector('.nl-node-box')).fill,
        ring: g.querySelector('.nl-origin-ring') ? getComputedStyle(g.querySelector('.nl-origin-ring')).stroke : null,
        box: g.getBoundingClientRect().toJSON(),
      })),
    );
    assert.ok(nodes.length >= 4, `the graph shows the origin and its neighbours: ${nodes.map((n) => n.type)}`);
    const origins = nodes.filter((n) => n.role === 'origin');
    assert.equal(origins.length, 1);
    const log = origins[0];
    assert.equal(log.type, 'Log');
    assert.equal(log.health, 'neg_inf');
    assert.equal(log.fill, RED, 'the origin is drawn red');
    assert.ok(log.ring && log.ring !== 'none', 'the origin is highlighted with a ring');
    assert.match(log.text, /ORIGIN/);
    assert.match(log.text, /-inf of 640/);

    const softmax = nodes.find((n) => n.type === 'Softmax');
    assert.ok(softmax, 'the softmax that feeds the log is shown');
    assert.equal(softmax.health, 'finite');
    assert.equal(softmax.fill, GREEN);
    assert.match(softmax.label, /finite, \d+ zeros of 640/, 'the softmax output holds the zeros');
    assert.ok(softmax.box.y < log.box.y, 'inputs are drawn above the origin');
    const edge = page.locator(`path.nl-edge[data-source="${softmax.id}"][data-target="${log.id}"]`);
    assert.equal(await edge.count(), 1, 'an arrow goes from the softmax to the log');

    const downstream = nodes.filter((n) => n.role === 'consumer');
    assert.ok(downstream.some((n) => n.health !== 'finite'), 'the consumers carry the non-finite values');
    assert.ok(nodes.some((n) => n.health === 'finite') && nodes.some((n) => n.health === 'nan'), 'colors differ by health');
    const fills = new Map(nodes.map((n) => [n.health, n.fill]));
    assert.notEqual(fills.get('nan'), fills.get('finite'));

    // Selecting an op tells where it was made (the report cannot open the editor).
    await page.locator(`.nl-node[data-id="${softmax.id}"]`).click();
    // Keras made the softmax (no line of the demo is in its stack): the layer's own line, said to be library code.
    assert.match(await page.locator('.nl-details').innerText(), /^Softmax .* — \w+\.py:\d+ \(library code\)$/);
    await page.locator(`.nl-node[data-id="${log.id}"]`).click();
    assert.match(await page.locator('.nl-details').innerText(), new RegExp(`Log .* — train\\.py:${report.originLine}$`));

    // --- the health timeline ---
    const chart = page.locator('.nl-timeline-chart');
    const data = await chart.evaluate((el) => ({ ...el.dataset }));
    assert.equal(data.unit, 'trace', 'a replayed step is one execution: drawn along its traces');
    assert.ok(data.originX !== undefined && data.originX === data.firstNonfiniteX, JSON.stringify(data));
    const caption = await page.locator('.nl-timeline-caption').innerText();
    assert.match(caption, /non-finite values begin at traced tensor \d+ \(.*Log.*\), where the origin Log/);
    // The origin's vertical line is drawn on the chart where the data says (a real canvas pixel check).
    const marker = await chart.evaluate((el, color) => {
      const canvas = el.querySelector('canvas');
      const over = el.querySelector('.u-over');
      const x = (over.getBoundingClientRect().left - canvas.getBoundingClientRect().left + Number(el.dataset.originPx)) *
        (canvas.width / canvas.getBoundingClientRect().width);
      const ctx = canvas.getContext('2d');
      let hits = 0;
      for (let dx = -2; dx <= 2; dx++) {
        const column = ctx.getImageData(Math.round(x) + dx, 0, 1, canvas.height).data;
        for (let i = 0; i < column.length; i += 4) {
          if (Math.abs(column[i] - color[0]) < 24 && Math.abs(column[i + 1] - color[1]) < 24 && Math.abs(column[i + 2] - color[2]) < 24) {
            hits++;
          }
        }
      }
      return { hits, height: canvas.height };
    }, ORIGIN_LINE_COLOR);
    assert.ok(marker.hits > marker.height / 3, `the origin line is drawn (${marker.hits} px of ${marker.height})`);

    // --- the loss history up to the failing step ---
    const loss = page.locator('.nl-loss-chart');
    assert.equal(await loss.getAttribute('data-failing-step'), String(report.step));
    assert.match(await page.locator('.nl-loss-caption').innerText(), new RegExp(`up to the failing step ${report.step}`));

    // --- the findings as text ---
    assert.match(await page.locator('#findings').innerText(), new RegExp(`train\\.py:${report.originLine}`));

    mkdirSync(ARTIFACTS, { recursive: true });
    await page.screenshot({ path: join(ARTIFACTS, 'demo-report.png'), fullPage: true });
    await page.locator('#op-graph-section').screenshot({ path: join(ARTIFACTS, 'demo-op-graph.png') });
    assert.deepEqual(fetched, [], 'the page loads nothing from the network');
    assert.deepEqual(errors, [], 'no script errors');
  } finally {
    await browser.close();
  }
});
