// Gutter icons as SVG data URIs: no image files to ship or resolve, one color per marker style.

import type { MarkerStyle } from './findingsModel';

export interface MarkerColors {
  /** Icon fill and overview-ruler mark. */
  solid: string;
  /** Whole-line background: the same hue, nearly transparent. */
  lineBackground: string;
  /** After-line text. */
  text: string;
}

export const MARKER_COLORS: Record<MarkerStyle, MarkerColors> = {
  origin: { solid: '#e45454', lineBackground: '#e4545418', text: '#e45454c0' },
  propagated: { solid: '#ff942f', lineBackground: '#ff942f14', text: '#ff942fb0' },
  stale: { solid: '#8c8c8c', lineBackground: '#8c8c8c10', text: '#8c8c8ca0' },
  change: { solid: '#3794ff', lineBackground: '#3794ff14', text: '#3794ffc0' },
};

/** Origin: a filled circle with a white '!'; carried: a ring; stale: a small hollow ring; change: a blue diamond
 * with a white arrow (the line to edit). */
export function gutterIconSvg(style: MarkerStyle): string {
  const color = MARKER_COLORS[style].solid;
  switch (style) {
    case 'origin':
      return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
        `<circle cx="8" cy="8" r="6" fill="${color}"/>` +
        '<rect x="7.1" y="4" width="1.8" height="5" rx="0.9" fill="#ffffff"/>' +
        '<circle cx="8" cy="11.2" r="1" fill="#ffffff"/></svg>'
      );
    case 'propagated':
      return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
        `<circle cx="8" cy="8" r="4.5" fill="none" stroke="${color}" stroke-width="2.2"/></svg>`
      );
    case 'change':
      return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
        `<rect x="3" y="3" width="10" height="10" rx="1.5" transform="rotate(45 8 8)" fill="${color}"/>` +
        '<path d="M5.5 8h5M8.5 6l2 2-2 2" stroke="#ffffff" stroke-width="1.4" fill="none" stroke-linecap="round"/></svg>'
      );
    case 'stale':
      return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 16 16">' +
        `<circle cx="8" cy="8" r="3.5" fill="none" stroke="${color}" stroke-width="1.5"/></svg>`
      );
  }
}

/** base64 avoids the escaping pitfalls of '#' and quotes in utf8 data URIs. */
export function svgDataUri(svg: string): string {
  return `data:image/svg+xml;base64,${Buffer.from(svg, 'utf8').toString('base64')}`;
}
