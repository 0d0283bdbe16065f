// The language server's lifecycle: find the interpreter, check it, start `python -m pyadapter serve`,
// restart on interpreter changes, route `nanlens/findings` into the model.

import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LanguageClient,
  RevealOutputChannelOn,
  State,
  type LanguageClientOptions,
  type ServerOptions,
} from 'vscode-languageclient/node';
import type { FindingsModel } from './core/findingsModel';
import type { Interpreter } from './core/interpreter';
import { NOTEBOOK_CELL_SCHEME } from './core/notebookCells';
import { SHOW_OP_GRAPH, SHOW_TIMELINE } from './core/pictures';
import { FINDINGS_NOTIFICATION, readFindingsNotification } from './core/protocol';
import type { ServerState } from './core/status';
import { getLog } from './log';
import { ensurePyadapter, resolveInterpreter } from './python';
import { firstWorkspaceFolder, getSettings, serverSettings } from './settings';

export class NanLensServer implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private queue: Promise<void> = Promise.resolve();
  private currentState: ServerState = 'stopped';
  private failureText: string | undefined;
  private readonly stateEmitter = new vscode.EventEmitter<ServerState>();
  readonly onDidChangeState = this.stateEmitter.event;
  interpreter: Interpreter | undefined;

  constructor(private readonly model: FindingsModel) {}

  get state(): ServerState {
    return this.currentState;
  }

  /** Why the server is not running, when state is 'failed'. */
  get failure(): string | undefined {
    return this.failureText;
  }

  /** Stop (if running) and start again. Calls are serialized: the last one wins, none overlap. */
  restart(reason: string): Promise<void> {
    this.queue = this.queue.then(() => this.doRestart(reason)).catch((error: unknown) => {
      getLog().error(`Restarting the NaN Lens server failed: ${String(error)}`);
    });
    return this.queue;
  }

  stop(): Promise<void> {
    this.queue = this.queue.then(() => this.doStop());
    return this.queue;
  }

  /** Send the server's settings after a `nanlens.*` change (docs/protocol.md: same keys as initializationOptions). */
  async sendSettings(): Promise<void> {
    const client = this.client;
    if (client?.state !== State.Running) {
      return;
    }
    await client.sendNotification(DidChangeConfigurationNotification.type, { settings: { nanlens: serverSettings() } });
  }

  /**
   * Run a server command (`nanlens.server.*`); undefined and a message when the server is not running (no message
   * with `quiet`: the caller goes on without the answer).
   */
  async executeCommand<T>(command: string, args: unknown[] = [], quiet = false): Promise<T | undefined> {
    const client = this.client;
    if (client?.state !== State.Running) {
      if (quiet) {
        return undefined;
      }
      const why = this.failureText ? ` ${this.failureText}` : '';
      void vscode.window.showWarningMessage(`NaN Lens: the language server is not running.${why}`, 'Show Logs').then(
        (choice) => {
          if (choice) {
            getLog().show(true);
          }
        },
      );
      return undefined;
    }
    return (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args })) as T;
  }

  dispose(): void {
    void this.stop();
    this.stateEmitter.dispose();
  }

  private setState(state: ServerState, failure?: string): void {
    this.currentState = state;
    this.failureText = failure;
    this.stateEmitter.fire(state);
  }

  private async doStop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (client) {
      try {
        await client.stop(3000);
      } catch (error) {
        getLog().warn(`The NaN Lens server did not stop cleanly: ${String(error)}`);
      }
    }
    this.model.clear();
    this.setState('stopped');
  }

  private async doRestart(reason: string): Promise<void> {
    const log = getLog();
    log.info(`Starting the NaN Lens server (${reason})`);
    await this.doStop();
    this.setState('starting');
    const interpreter = await resolveInterpreter();
    this.interpreter = interpreter;
    const check = await ensurePyadapter(interpreter);
    if (!check.ok) {
      this.setState('failed', check.problem);
      return;
    }
    const settings = getSettings();
    const serverOptions: ServerOptions = {
      command: interpreter.path,
      args: ['-m', 'pyadapter', 'serve', '--log-level', settings.serverLogLevel],
      options: { cwd: firstWorkspaceFolder(), env: { ...process.env, PYTHONUNBUFFERED: '1' } },
    };
    const clientOptions: LanguageClientOptions = {
      // Notebook cells too: the server learns them through LSP notebook sync (it asks for every cell of open
      // .ipynb notebooks) and sends their diagnostics, hovers and CodeLenses to the cells' documents.
      documentSelector: [
        { scheme: 'file', language: 'python' },
        { scheme: NOTEBOOK_CELL_SCHEME, language: 'python' },
      ],
      initializationOptions: serverSettings(settings),
      // The server's hovers link an origin line to its pictures; only those two commands may run from them.
      markdown: { isTrusted: { enabledCommands: [SHOW_OP_GRAPH, SHOW_TIMELINE] } },
      outputChannel: getLog(),
      revealOutputChannelOn: RevealOutputChannelOn.Never,
    };
    const client = new LanguageClient('nanlens', 'NaN Lens', serverOptions, clientOptions);
    client.onNotification(FINDINGS_NOTIFICATION, (params: unknown) => {
      if (this.client !== client) {
        return; // A late message from a server being replaced.
      }
      this.model.replace(readFindingsNotification(params));
    });
    client.onDidChangeState((event) => {
      if (this.client !== client) {
        return; // A client being replaced.
      }
      if (event.newState === State.Running) {
        this.setState('running');
      } else if (event.newState === State.Stopped) {
        this.setState('failed', 'the language server stopped; see the logs');
      }
    });
    this.client = client;
    try {
      await client.start();
      log.info(`NaN Lens server running (${interpreter.path} -m pyadapter serve)`);
    } catch (error) {
      this.client = undefined;
      this.setState('failed', `the language server did not start: ${String(error)}`);
      log.error(`The NaN Lens server did not start: ${String(error)}`);
    }
  }
}
