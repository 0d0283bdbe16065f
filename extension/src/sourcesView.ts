// The "Captures and dumps" tree: each capture bundle or dump, with its origin and carried findings.

import * as vscode from 'vscode';
import type { FindingsModel } from './core/findingsModel';
import { sourceRows, type FindingRow, type IconColor, type SourceRow } from './core/sourceTree';
import { plural } from './core/markerText';
import { SHOW_LOCATION_COMMAND } from './locations';
import { SOURCES_VIEW_ID } from './statusBar';

type Row = SourceRow | FindingRow;

const ICON_COLORS: Record<Exclude<IconColor, undefined>, string> = {
  error: 'problemsErrorIcon.foreground',
  warning: 'problemsWarningIcon.foreground',
  disabled: 'disabledForeground',
  passed: 'testing.iconPassed',
};

class SourcesProvider implements vscode.TreeDataProvider<Row> {
  private readonly changed = new vscode.EventEmitter<void>();
  readonly onDidChangeTreeData = this.changed.event;
  private rows: SourceRow[] = [];

  constructor(private readonly model: FindingsModel) {
    this.refresh();
  }

  refresh(): void {
    this.rows = sourceRows(this.model.sources);
    this.changed.fire();
  }

  getChildren(row?: Row): Row[] {
    if (row === undefined) {
      return this.rows;
    }
    return row.type === 'source' ? row.children : [];
  }

  getTreeItem(row: Row): vscode.TreeItem {
    const collapsible =
      row.type === 'source' && row.children.length > 0
        ? vscode.TreeItemCollapsibleState.Expanded
        : vscode.TreeItemCollapsibleState.None;
    const item = new vscode.TreeItem(row.label, collapsible);
    item.id = row.id;
    item.description = row.description;
    item.tooltip = row.tooltip;
    item.contextValue = row.contextValue;
    item.iconPath = new vscode.ThemeIcon(row.icon, row.iconColor ? new vscode.ThemeColor(ICON_COLORS[row.iconColor]) : undefined);
    if (row.type === 'finding' && row.cell !== undefined) {
      item.command = { command: SHOW_LOCATION_COMMAND, title: 'Open', arguments: [row.file, row.line, row.cell] };
    } else if (row.type === 'finding') {
      const position = new vscode.Position(row.line - 1, 0);
      item.command = {
        command: 'vscode.open',
        title: 'Open',
        arguments: [vscode.Uri.file(row.file), { selection: new vscode.Range(position, position), preserveFocus: false }],
      };
    }
    return item;
  }

  dispose(): void {
    this.changed.dispose();
  }
}

export class SourcesView implements vscode.Disposable {
  private readonly provider: SourcesProvider;
  private readonly view: vscode.TreeView<Row>;
  private readonly subscription: { dispose(): void };

  constructor(private readonly model: FindingsModel) {
    this.provider = new SourcesProvider(model);
    this.view = vscode.window.createTreeView(SOURCES_VIEW_ID, { treeDataProvider: this.provider, showCollapseAll: true });
    this.subscription = model.onDidChange(() => {
      this.refresh();
    });
    this.refresh();
  }

  private refresh(): void {
    this.provider.refresh();
    const origins = this.model.originCount();
    this.view.badge = origins > 0 ? { value: origins, tooltip: `NaN Lens: ${plural(origins, 'origin')}` } : undefined;
  }

  dispose(): void {
    this.subscription.dispose();
    this.view.dispose();
    this.provider.dispose();
  }
}
