import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { gutterIconSvg, MARKER_COLORS, svgDataUri } from '../src/core/gutterIcons';

describe('gutter icons', () => {
  it('are SVG data URIs in the marker colors: red origin, amber carried, grey stale', () => {
    for (const style of ['origin', 'propagated', 'stale', 'change'] as const) {
      const uri = svgDataUri(gutterIconSvg(style));
      assert.match(uri, /^data:image\/svg\+xml;base64,[A-Za-z0-9+/]+=*$/);
      const svg = Buffer.from(uri.split(',')[1] ?? '', 'base64').toString('utf8');
      assert.match(svg, /^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"/);
      assert.ok(svg.includes(MARKER_COLORS[style].solid), style);
    }
    assert.equal(MARKER_COLORS.origin.solid, '#e45454');
    assert.equal(MARKER_COLORS.propagated.solid, '#ff942f');
    assert.equal(MARKER_COLORS.change.solid, '#3794ff'); // the line to change: its own colour
  });
});
