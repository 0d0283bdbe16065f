// The editor half of "a bundle is data": the modal question before a refused program runs, and one notification
// for capture bundles that wait for the user's Locate (the server locates none of them unasked).

import * as vscode from 'vscode';
import { newlyUnlocated, unlocatedNotice, type TrustQuestion } from './core/consent';
import type { FindingsModel } from './core/findingsModel';
import { SOURCES_VIEW_ID } from './statusBar';

/** Ask before a bundle's program runs: a modal naming the file; true only on its "Run <file>" button. */
export async function askTrust(question: TrustQuestion): Promise<boolean> {
  const choice = await vscode.window.showWarningMessage(question.message, { modal: true, detail: question.detail }, question.run);
  return choice === question.run;
}

/** Says once per bundle (per session) that a capture waits for a Locate, offering it. */
export class UnlocatedNotifier implements vscode.Disposable {
  private readonly announced = new Set<string>();
  private readonly subscription: { dispose(): void };

  constructor(private readonly model: FindingsModel) {
    this.subscription = model.onDidChange(() => {
      this.check();
    });
  }

  /** Do not announce this source (the user is acting on it already, e.g. a pull that shows its own message). */
  quiet(sourceId: string): void {
    this.announced.add(sourceId);
  }

  private check(): void {
    const notice = unlocatedNotice(newlyUnlocated(this.model.sources, this.announced));
    if (notice === undefined) {
      return;
    }
    void vscode.window.showInformationMessage(notice.message, ...notice.actions).then(async (choice) => {
      if (choice === 'Locate' && notice.bundle !== undefined) {
        await vscode.commands.executeCommand('nanlens.locateBundle', notice.bundle);
      } else if (choice === 'Show Captures') {
        await vscode.commands.executeCommand(`${SOURCES_VIEW_ID}.focus`);
      }
    });
  }

  dispose(): void {
    this.subscription.dispose();
  }
}
