// The loss chart of a diverging run in a real browser (Debian's Chromium via playwright-core): a report page made
// by pyadapter's own render_report from a hand-built bundle history and divergence cause (no TensorFlow, no replay)
// must shade the growth window over the right steps, state the growth in numbers, draw the gradient norm as a
// second line, and mark the non-finite step. Screenshot: artifacts/report/divergence-loss.png.
//   npm run test:report

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { chromium } from 'playwright-core';

const run = promisify(execFile);
const REPO = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const PYTHON = process.env.NANLENS_E2E_PYTHON || join(REPO, '.venv', 'bin', 'python');
const CHROMIUM = process.env.NANLENS_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = join(REPO, 'artifacts', 'report');
const CHROMIUM_ARGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--headless'];

const work = mkdtempSync(join(tmpdir(), 'nanlens-divergence-report-'));
after(() => rmSync(work, { recursive: true, force: true }));

// Steps 0-2 healthy; from step 3 the loss grows x10 per step (the gradient norm x9) until step 8 is non-finite.
// The cause's trend is what pyadapter.cause makes of that history (Trend.to_json), not numbers typed here.
const MAKE_PAGE = String.raw`
import sys
from pyadapter.cause import trend
from pyadapter.findings import Findings
from pyadapter.pictures.html import render_report
from pyadapter.pictures.model import PictureModel, history_rows, picture_cause

rows = [{"step": s, "loss": 2.0 - 0.1 * s, "logged_loss": 2.1, "grad_norm": 1.5, "weight_norm": 30.0} for s in range(3)]
rows += [{"step": s, "loss": 1.7 * 10.0 ** (s - 3), "logged_loss": 2.0, "grad_norm": 1.5 * 9.0 ** (s - 3),
          "weight_norm": 30.0} for s in range(3, 8)]
rows.append({"step": 8, "loss": None, "loss_nonfinite": "inf", "logged_loss": None, "grad_norm": None,
             "grad_norm_nonfinite": "inf"})
growth = trend.growth(rows)
cause = {"kind": "divergence", "summary": "the run diverged", "evidence": {"trend": growth.to_json()}}
findings = Findings(source_kind="bundle", source_path="/captures/run-step8", origin=None)
findings.extra["cause"] = cause
pictures = PictureModel("bundle", "/captures/run-step8", "run-step8 (step 8)", loss_history=history_rows(rows),
                        failing_step=8, cause=picture_cause(cause)).to_json()
with open(sys.argv[1], "w", encoding="utf-8") as fh:
    fh.write(render_report(findings, pictures))
print(growth.to_json())
`;

test('a divergence: the growth window is shaded over its steps, with the growth in numbers and the gradient norm', {
  skip: existsSync(CHROMIUM) ? false : `no browser at ${CHROMIUM} (scripts/setup-e2e.sh installs Debian's chromium)`,
  timeout: 120000,
}, async () => {
  const html = join(work, 'divergence.html');
  // PYTHONPATH: this checkout's pyadapter, even when the venv's editable install points at another one.
  const made = await run(PYTHON, ['-c', MAKE_PAGE, html], {
    cwd: REPO,
    env: { ...process.env, PYTHONPATH: REPO },
    timeout: 60000,
  });
  assert.match(made.stdout, /'start_step': 3, 'end_step': 7/, 'the trend of the history begins at step 3');

  const browser = await chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 60000 });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const errors = [];
    page.on('pageerror', (error) => errors.push(error.message));
    await page.goto(`file://${html}`);
    await page.locator('body[data-nanlens-rendered="true"]').waitFor({ timeout: 15000 });

    const chart = page.locator('.nl-loss-chart');
    const data = await chart.evaluate((el) => ({ ...el.dataset }));
    assert.equal(data.cause, 'divergence');
    assert.equal(data.failingStep, '8');
    assert.deepEqual([data.trendStart, data.trendEnd, data.trendSeries], ['3', '7', 'loss']);
    assert.equal(data.nonfiniteSteps, '8', 'the step whose loss and gradient norm were inf is marked');
    assert.equal(data.gradNormSteps, '0-7', 'the gradient norm is drawn from the first step to the last finite one');
    assert.equal(data.gradNormPoints, '8');
    assert.match(await page.locator('.nl-trend-caption').innerText(),
      /^divergence: the loss grew x10 per step for 4 steps \(steps 3–7, x10000 in all\)$/);
    const legend = await chart.locator('.u-legend .u-series').allInnerTexts();
    assert.ok(legend.some((t) => /gradient norm/.test(t)), `the legend names the gradient norm line: ${legend}`);

    // The band is drawn where the data says: steps 3..7 on the x axis, and really painted on the canvas.
    const band = await chart.evaluate((el) => {
      const plot = el.querySelector('.u-over');
      const canvas = el.querySelector('canvas');
      const scale = canvas.width / canvas.getBoundingClientRect().width;
      const offset = plot.getBoundingClientRect().left - canvas.getBoundingClientRect().left;
      const top = (plot.getBoundingClientRect().top - canvas.getBoundingClientRect().top) * scale;
      const ctx = canvas.getContext('2d');
      // Orange-tinted (timelineView's TREND_FILL, 16% orange over the page): red well above blue.
      const tinted = (x) => {
        const px = ctx.getImageData(Math.round((offset + x) * scale), Math.round(top + 40 * scale), 1, 1).data;
        return px[0] - px[2] > 20 && px[3] > 0 ? 1 : 0;
      };
      const left = Number(el.dataset.trendLeftPx);
      const right = Number(el.dataset.trendRightPx);
      const width = plot.getBoundingClientRect().width;
      return { left, right, width, inside: tinted((left + right) / 2), before: tinted(left - 12), after: tinted(right + 12) };
    });
    assert.ok(band.left > 0 && band.right > band.left, JSON.stringify(band));
    // Steps 0..8 span the plot's width: step 3 sits 3/8 of the way, step 7 at 7/8 (within a few pixels).
    assert.ok(Math.abs(band.left - (band.width * 3) / 8) <= 3, `the band starts at step 3: ${JSON.stringify(band)}`);
    assert.ok(Math.abs(band.right - (band.width * 7) / 8) <= 3, `the band ends at step 7: ${JSON.stringify(band)}`);
    assert.deepEqual([band.before, band.inside, band.after], [0, 1, 0], 'the band is painted between its edges only');

    mkdirSync(ARTIFACTS, { recursive: true });
    await chart.screenshot({ path: join(ARTIFACTS, 'divergence-loss.png') });
    assert.deepEqual(errors, [], 'no script errors');
  } finally {
    await browser.close();
  }
});
