// The status bar item's text and tooltip, from the server state and the findings.

import { plural } from './markerText';

export type ServerState = 'starting' | 'running' | 'stopped' | 'failed';

export interface StatusView {
  text: string;
  tooltip: string;
  /** True when the item should use the error background. */
  alarm: boolean;
}

export function statusView(server: ServerState, origins: number, scanning: boolean, failure?: string): StatusView {
  if (server === 'failed') {
    // `failure` may be a whole message ("NaN Lens: python3 cannot import pyadapter. Set ..."): keep its sentences.
    const why = (failure ?? 'the language server could not start').replace(/^NaN Lens:\s*/, '').replace(/\.?\s*$/, '.');
    return {
      text: '$(warning) NaN Lens',
      tooltip: `NaN Lens is not running: ${why} Click to show the logs.`,
      alarm: false,
    };
  }
  if (origins > 0) {
    return {
      text: `$(error) NaN Lens: ${plural(origins, 'origin')}`,
      tooltip: `NaN Lens found where NaN/Inf starts in ${origins === 1 ? 'one capture or dump' : `${origins} captures or dumps`}. Click to show them.`,
      alarm: true,
    };
  }
  if (scanning) {
    return { text: '$(sync~spin) NaN Lens', tooltip: 'NaN Lens is scanning captures and dumps.', alarm: false };
  }
  switch (server) {
    case 'running':
      return { text: '$(pulse) NaN Lens', tooltip: 'NaN Lens is watching for captures and dumps. Click to show them.', alarm: false };
    case 'starting':
      return { text: '$(sync~spin) NaN Lens', tooltip: 'NaN Lens is starting.', alarm: false };
    case 'stopped':
      return { text: '$(circle-slash) NaN Lens', tooltip: 'The NaN Lens server is stopped.', alarm: false };
  }
}
