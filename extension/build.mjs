// Bundle the extension (and vscode-languageclient) into dist/extension.js, so the .vsix needs no node_modules,
// and the pictures web bundle (extension/webview: op graph + health timeline, dagre + uPlot) into
// dist/pictures.js + dist/pictures.css, copied to pyadapter/report_assets/ for `nanlens report` (committed, so
// the Python package needs no Node at run time).
//   node extension/build.mjs [--production] [--watch]
//   node extension/build.mjs --webview-only --outdir DIR   (the pictures bundle alone, into DIR; no copy)
// Under CI (CI=true) the copy is not refreshed: tests/report then compares a fresh build with the committed copy,
// so a change to extension/webview committed without its rebuilt copy fails there.
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as path from 'node:path';

const root = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const args = process.argv.slice(2);
const production = args.includes('--production');
const watch = args.includes('--watch');
const webviewOnly = args.includes('--webview-only');
const outdirAt = args.indexOf('--outdir');
const outdir = outdirAt >= 0 ? path.resolve(args[outdirAt + 1] ?? 'dist') : path.join(root, 'dist');
const REPORT_ASSETS = path.join(root, 'pyadapter', 'report_assets');
const refreshReportAssets = !process.env.CI;

const extension = {
  absWorkingDir: root,
  entryPoints: ['extension/src/extension.ts'],
  bundle: true,
  outfile: 'dist/extension.js',
  external: ['vscode'],
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  sourcemap: !production,
  minify: production,
  logLevel: 'info',
};

// Always minified and without source maps: the copy in pyadapter/report_assets must not depend on the mode.
const pictures = {
  absWorkingDir: root,
  entryPoints: ['extension/webview/pictures.ts'],
  bundle: true,
  outfile: path.join(outdir, 'pictures.js'),
  format: 'iife',
  platform: 'browser',
  target: ['es2020', 'chrome110'],
  minify: true,
  sourcemap: false,
  legalComments: 'none',
  charset: 'utf8',
  logLevel: 'info',
};

function copyToReportAssets() {
  mkdirSync(REPORT_ASSETS, { recursive: true });
  for (const name of ['pictures.js', 'pictures.css']) {
    copyFileSync(path.join(outdir, name), path.join(REPORT_ASSETS, name));
  }
}

const copyPlugin = {
  name: 'nanlens-report-assets',
  setup(build) {
    build.onEnd((result) => {
      if (result.errors.length === 0 && refreshReportAssets) copyToReportAssets();
    });
  },
};

if (webviewOnly) {
  await esbuild.build(pictures);
} else if (watch) {
  const contexts = [await esbuild.context(extension), await esbuild.context({ ...pictures, plugins: [copyPlugin] })];
  await Promise.all(contexts.map((context) => context.watch()));
} else {
  await esbuild.build(extension);
  await esbuild.build({ ...pictures, plugins: [copyPlugin] });
}
