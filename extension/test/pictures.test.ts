import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  makeNonce,
  pictureSourceId,
  readPictureAnswer,
  readWebviewMessage,
  webviewHtml,
} from '../src/core/pictures';
import { sourceRows } from '../src/core/sourceTree';
import { TRAIN, at, bundleSource, dumpSource, finding } from './fixtures';

describe('pictureSourceId', () => {
  const sources = [bundleSource(), dumpSource({ origin: finding({ line: 3, role: 'origin' }) })];

  it('takes a source id, a lens argument, a tree row or a finding row of the view', () => {
    const bundle = at(sources, 0).id;
    assert.equal(pictureSourceId(bundle, sources), bundle);
    assert.equal(pictureSourceId({ sourceId: bundle }, sources), bundle);
    const row = at(sourceRows(sources), 0);
    assert.equal(pictureSourceId(row, sources), bundle);
    assert.equal(pictureSourceId(at(row.children, 1), sources), bundle);
    assert.equal(pictureSourceId(at(sources, 1).path, sources), at(sources, 1).id);
  });

  it('means "ask" when there is no argument', () => {
    assert.equal(pictureSourceId(undefined, sources), undefined);
    assert.equal(pictureSourceId({}, sources), undefined);
    assert.equal(pictureSourceId('', sources), undefined);
  });
});

describe('the webview page and its messages', () => {
  it('lets only the nonce script run and loads styles from the extension', () => {
    const page = webviewHtml({
      view: 'graph',
      scriptUri: 'https://file+.vscode-resource/dist/pictures.js',
      styleUri: 'https://file+.vscode-resource/dist/pictures.css',
      cspSource: 'https://*.vscode-cdn.net',
      nonce: 'abc123',
      title: 'NaN Lens Op Graph: <run>',
    });
    assert.match(page, /script-src 'nonce-abc123'/);
    assert.match(page, /default-src 'none'/);
    assert.match(page, /<script nonce="abc123" src="https:\/\/file\+\.vscode-resource\/dist\/pictures\.js"><\/script>/);
    assert.match(page, /data-nanlens-view="graph"/);
    assert.match(page, /<title>NaN Lens Op Graph: &#60;run&#62;<\/title>/);
    assert.doesNotMatch(page, /unsafe-eval/);
  });

  it('makes 32-character nonces from random bytes', () => {
    const nonce = makeNonce((n) => Uint8Array.from({ length: n }, (_, i) => i * 7));
    assert.equal(nonce.length, 32);
    assert.match(nonce, /^[A-Za-z0-9]+$/);
  });

  it('reads open requests and ignores anything else', () => {
    assert.deepEqual(readWebviewMessage({ type: 'open', file: TRAIN, line: 35 }), { type: 'open', file: TRAIN, line: 35 });
    assert.deepEqual(readWebviewMessage({ type: 'open', file: TRAIN, line: -2 }), { type: 'open', file: TRAIN, line: 1 });
    assert.deepEqual(readWebviewMessage({ type: 'ready' }), { type: 'ready' });
    assert.equal(readWebviewMessage({ type: 'open' }), undefined);
    assert.equal(readWebviewMessage('open'), undefined);
  });

  it('turns the server answer into a model or one line of error', () => {
    assert.deepEqual(readPictureAnswer({ error: 'no such source' }), { error: 'no such source' });
    assert.ok('error' in readPictureAnswer(undefined));
    assert.ok('error' in readPictureAnswer({ schema: 'other' }));
    const model = { schema: 'nanlens.pictures/1', nodes: [] };
    assert.deepEqual(readPictureAnswer(model), { model });
  });
});
