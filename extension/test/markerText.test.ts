import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AFTER_LINE_MAX_LENGTH, afterLineText, describeHealth, truncate } from '../src/core/markerText';
import { finding } from './fixtures';

describe('describeHealth', () => {
  it('reads like the Python side: counts of NaN / -inf / +inf of the size', () => {
    assert.equal(describeHealth({ size: 640, neg_inf: 561 }), '561 -inf of 640');
    assert.equal(describeHealth({ nan: 3, pos_inf: 2 }), '3 NaN, 2 +inf');
    assert.equal(describeHealth({ size: 640, zero: 561 }), 'finite (640 values, 561 zeros)');
    assert.equal(describeHealth({ size: 16, zero: 1 }), 'finite (16 values, 1 zero)');
    assert.equal(describeHealth({ size: 1 }), 'finite (1 value)');
    assert.equal(describeHealth(undefined), 'non-finite values');
  });
});

describe('truncate', () => {
  it('keeps short text and cuts long text at a word with an ellipsis', () => {
    assert.equal(truncate('Log produced 561 -inf', 40), 'Log produced 561 -inf');
    const cut = truncate('Log produced 561 -inf from input probs:0 which holds 561 zeros', 30);
    assert.ok(cut.length <= 30, cut);
    assert.equal(cut, 'Log produced 561 -inf from…');
  });

  it('cuts inside a long word rather than leaving almost nothing', () => {
    assert.equal(truncate('a ' + 'x'.repeat(50), 12), 'a xxxxxxxxx…');
  });

  it('flattens newlines so the text stays on its line', () => {
    assert.equal(truncate('one\n  two', 20), 'one two');
  });
});

describe('afterLineText', () => {
  it('falls back to op type and health when the server sent no message', () => {
    const text = afterLineText(finding({ line: 1, role: 'origin', message: '' }));
    assert.equal(text, '⟵ NaN origin: Log produced 561 -inf of 640');
  });

  it('never exceeds the maximum length, even with the "+N more" suffix', () => {
    const long = finding({ line: 1, role: 'propagated', message: 'word '.repeat(60) });
    const text = afterLineText(long, 3);
    assert.ok(text.length <= AFTER_LINE_MAX_LENGTH, `${text.length}: ${text}`);
    assert.match(text, /^⟵ NaN carried: word word .*… \(\+3 more\)$/);
  });
});
