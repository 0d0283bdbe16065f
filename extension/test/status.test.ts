import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { statusView } from '../src/core/status';

describe('statusView', () => {
  it('shows a pulse while the server runs and nothing is found', () => {
    assert.equal(statusView('running', 0, false).text, '$(pulse) NaN Lens');
  });

  it('counts origins with correct plurals and raises the alarm', () => {
    assert.deepEqual(
      [statusView('running', 1, false).text, statusView('running', 3, true).text],
      ['$(error) NaN Lens: 1 origin', '$(error) NaN Lens: 3 origins'],
    );
    assert.equal(statusView('running', 1, false).alarm, true);
    assert.match(statusView('running', 2, false).tooltip, /2 captures or dumps/);
  });

  it('says why the server is not running', () => {
    const view = statusView('failed', 0, false, 'NaN Lens: python3 cannot import pyadapter. Set nanlens.python to …');
    assert.equal(view.text, '$(warning) NaN Lens');
    assert.equal(
      view.tooltip,
      'NaN Lens is not running: python3 cannot import pyadapter. Set nanlens.python to …. Click to show the logs.',
    );
    assert.equal(
      statusView('failed', 0, false, 'the language server stopped; see the logs').tooltip,
      'NaN Lens is not running: the language server stopped; see the logs. Click to show the logs.',
    );
  });

  it('spins while starting or scanning', () => {
    assert.equal(statusView('starting', 0, false).text, '$(sync~spin) NaN Lens');
    assert.equal(statusView('running', 0, true).text, '$(sync~spin) NaN Lens');
  });
});
