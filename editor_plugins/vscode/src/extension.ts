/**
 * The VS Code glue: starts `recap serve` through vscode-languageclient and maps its commands,
 * progress and events onto VS Code UI. All agent logic lives in the server; the protocol calls
 * are in `client.ts`, text and diff assembly in `events.ts` / `diff.ts`, settings in `settings.ts`.
 */
import * as vscode from "vscode";
import { DidChangeConfigurationNotification, LanguageClient, TransportKind } from "vscode-languageclient/node";

import { RecapClient } from "./client";
import { describeProposal, diffEntries, parseProposalUri, PROPOSAL_SCHEME, sideText } from "./diff";
import { formatEvent, progressText, shortSession } from "./events";
import { DONE_STATES, Proposal, RecapEvent, SessionState, SessionStatus } from "./protocol";
import { ExtensionSettings, needsRestart, readSettings, serverCommand, serverOptions } from "./settings";

/** The extension's own commands (package.json `contributes.commands`). They must differ from the
 * server's `recap.*` commands, which vscode-languageclient registers under their own names. */
const COMMANDS = {
  runTask: "recap.runTask",
  acceptProposal: "recap.acceptProposal",
  rejectProposal: "recap.rejectProposal",
  cancelRun: "recap.cancelRun",
  showSession: "recap.showSession",
} as const;

const HAS_PROPOSAL = "recapHasProposal";

let extension: RecapExtension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  extension = new RecapExtension(context);
  await extension.start();
}

export async function deactivate(): Promise<void> {
  await extension?.stop();
  extension = undefined;
}

/** A command needed the server and it is not running. */
class NotRunning extends Error {}

/** Serves both sides of every proposal the extension fetched, for the diff editors. */
class ProposalProvider implements vscode.TextDocumentContentProvider {
  readonly proposals = new Map<string, Proposal>();

  provideTextDocumentContent(uri: vscode.Uri): string {
    const { session, path, side } = parseProposalUri(uri);
    const proposal = this.proposals.get(session);
    if (!proposal) throw new Error(`no proposal of session ${session} is loaded`);
    return sideText(proposal, path, side);
  }
}

class RecapExtension {
  private readonly events = vscode.window.createOutputChannel("recap");
  private readonly serverLog = vscode.window.createOutputChannel("recap server", { log: true });
  private readonly statusBar = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 0);
  private readonly provider = new ProposalProvider();
  private readonly states = new Map<string, SessionState>();
  private readonly waiters = new Map<string, () => void>();
  private settings: ExtensionSettings;
  private client: LanguageClient | undefined;
  private recap: RecapClient | undefined;
  /** The session whose proposal was shown last: the default target of Accept / Reject. */
  private current: string | undefined;
  /** Why the server did not start (its last start), for the message of every later command. */
  private startError: string | undefined;

  constructor(context: vscode.ExtensionContext) {
    this.settings = readSettings((key) => vscode.workspace.getConfiguration("recap").get(key));
    this.statusBar.command = COMMANDS.showSession;
    this.statusBar.text = "recap";
    this.statusBar.tooltip = "recap: show a session";
    this.statusBar.show();
    context.subscriptions.push(
      this.events,
      this.serverLog,
      this.statusBar,
      vscode.workspace.registerTextDocumentContentProvider(PROPOSAL_SCHEME, this.provider),
      vscode.commands.registerCommand(COMMANDS.runTask, () => this.runTask()),
      vscode.commands.registerCommand(COMMANDS.acceptProposal, (uri?: vscode.Uri) => this.accept(uri)),
      vscode.commands.registerCommand(COMMANDS.rejectProposal, (uri?: vscode.Uri) => this.reject(uri)),
      vscode.commands.registerCommand(COMMANDS.cancelRun, () => this.cancel()),
      vscode.commands.registerCommand(COMMANDS.showSession, () => this.showSession()),
      vscode.workspace.onDidChangeConfiguration((e) => e.affectsConfiguration("recap") && this.configurationChanged()),
    );
  }

  async start(): Promise<void> {
    const { command, args } = serverCommand(this.settings);
    const client = new LanguageClient(
      "recap",
      "recap",
      { command, args, transport: TransportKind.stdio },
      {
        documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
        outputChannel: this.serverLog,
        initializationOptions: () => serverOptions(this.settings),
        middleware: {
          workspace: {
            // The server reads section `recap` in the protocol's shape, not the raw settings.
            configuration: async (params, token, next) => {
              const answers = await next(params, token);
              if (!Array.isArray(answers)) return answers;
              return params.items.map((item, i) => (item.section === "recap" ? serverOptions(this.settings) : answers[i]));
            },
          },
        },
      },
    );
    this.client = client;
    this.recap = new RecapClient(client);
    this.recap.onEvent((event) => this.onEvent(event));
    this.startError = undefined;
    try {
      await client.start();
    } catch (error) {
      this.startError = error instanceof Error ? error.message : String(error);
      this.serverLog.error(`recap serve did not start: ${this.startError}`);
      void this.showNotRunning();
    }
  }

  /** What to check when the server is not running: the command line it was started with. */
  private notRunningMessage(): string {
    const { command, args } = serverCommand(this.settings);
    const line = [command, ...args].map((part) => (/\s/.test(part) ? JSON.stringify(part) : part)).join(" ");
    return (
      `the recap server is not running${this.startError ? ` (${this.startError})` : ""}. ` +
      `It is started as \`${line}\`: check recap.pythonPath (a Python with recap installed) or recap.serverCommand, ` +
      `and the "recap server" output channel for its error.`
    );
  }

  private async showNotRunning(): Promise<void> {
    const choice = await vscode.window.showErrorMessage(`recap: ${this.notRunningMessage()}`, "Show log", "Open settings");
    if (choice === "Show log") this.serverLog.show(true);
    if (choice === "Open settings") await vscode.commands.executeCommand("workbench.action.openSettings", "recap.");
  }

  async stop(): Promise<void> {
    await this.client?.stop();
  }

  private server(): RecapClient {
    if (!this.recap || !this.client?.isRunning()) throw new NotRunning(this.notRunningMessage());
    return this.recap;
  }

  private async configurationChanged(): Promise<void> {
    let next: ExtensionSettings;
    try {
      next = readSettings((key) => vscode.workspace.getConfiguration("recap").get(key));
    } catch (error) {
      void vscode.window.showErrorMessage(`recap: ${(error as Error).message}`);
      return;
    }
    const restart = needsRestart(this.settings, next);
    this.settings = next;
    if (restart) {
      // a new command line needs a new client: LanguageClient.restart() would rerun the old one
      await this.client?.stop().catch(() => undefined);
      await this.client?.dispose().catch(() => undefined);
      await this.start();
    } else {
      await this.client?.sendNotification(DidChangeConfigurationNotification.type, { settings: { recap: serverOptions(next) } });
    }
  }

  private onEvent(event: RecapEvent): void {
    this.events.appendLine(formatEvent(event).join("\n"));
    if (event.type !== "state") return;
    const state = event.state as SessionState;
    this.states.set(event.session, state);
    if (!DONE_STATES.has(state)) return;
    this.waiters.get(event.session)?.();
    this.statusBar.text = `recap: ${state}`;
    if (state === "finished") {
      void this.showProposal(event.session).catch((error) => this.fail(error));
    } else if (state === "failed") {
      void vscode.window.showErrorMessage(`recap failed: ${String(event.message ?? "see the recap output")}`, "Show log").then(
        (choice) => choice && this.events.show(true),
      );
    }
  }

  private fail(error: unknown): void {
    if (error instanceof NotRunning) {
      void this.showNotRunning();
      return;
    }
    void vscode.window.showErrorMessage(`recap: ${error instanceof Error ? error.message : String(error)}`);
  }

  private async runTask(): Promise<void> {
    try {
      this.server(); // before asking for a task the server could not run
    } catch (error) {
      this.fail(error);
      return;
    }
    const editor = vscode.window.activeTextEditor;
    const selection = editor && !editor.selection.isEmpty ? editor.selection : undefined;
    const task = await vscode.window.showInputBox({
      title: "recap: run a task",
      prompt: selection ? "What should recap do? The selection is sent as context." : "What should recap do?",
      ignoreFocusOut: true,
    });
    if (!task?.trim()) return;
    const args = {
      task: task.trim(),
      ...(editor ? { uri: editor.document.uri.toString() } : {}),
      ...(selection
        ? {
            range: {
              start: { line: selection.start.line, character: selection.start.character },
              end: { line: selection.end.line, character: selection.end.character },
            },
          }
        : {}),
    };
    await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `recap: ${args.task}`, cancellable: true },
      async (progress, cancellation) => {
        let finish = () => {};
        const done = new Promise<void>((resolve) => (finish = resolve));
        try {
          const { session } = await this.server().run(args, (value) => {
            this.statusBar.text = `$(sync~spin) ${progressText(value)}`;
            if (value.kind === "report" && value.message) progress.report({ message: value.message });
            if (value.kind === "end") finish();
          });
          if (DONE_STATES.has(this.states.get(session) ?? "running")) finish();
          this.waiters.set(session, finish);
          cancellation.onCancellationRequested(() => void this.server().cancel(session).catch((e) => this.fail(e)));
          await done;
          this.waiters.delete(session);
        } catch (error) {
          this.fail(error);
        }
      },
    );
  }

  /** Fetch a proposal and open one diff editor per changed file (original | proposal). */
  private async showProposal(session: string): Promise<void> {
    const proposal = await this.server().proposal(session);
    this.provider.proposals.set(session, proposal);
    this.current = session;
    if (proposal.files.length === 0) {
      void vscode.window.showInformationMessage("recap finished without changing any file.");
      return;
    }
    await vscode.commands.executeCommand("setContext", HAS_PROPOSAL, true);
    for (const entry of diffEntries(proposal)) {
      await vscode.commands.executeCommand("vscode.diff", vscode.Uri.from(entry.left), vscode.Uri.from(entry.right), entry.title, {
        preview: false,
      });
    }
    this.statusBar.text = `recap: proposal ready (${describeProposal(proposal)})`;
  }

  /** The session a title-bar button was pressed for (its diff editor's URI), else the last one shown. */
  private target(uri?: vscode.Uri): string | undefined {
    if (uri?.scheme === PROPOSAL_SCHEME) return parseProposalUri(uri).session;
    if (!this.current) void vscode.window.showWarningMessage("recap: no proposal to act on.");
    return this.current;
  }

  private async closeProposal(session: string): Promise<void> {
    const tabs = vscode.window.tabGroups.all.flatMap((group) => group.tabs);
    const ours = tabs.filter(
      (tab) => tab.input instanceof vscode.TabInputTextDiff && tab.input.modified.scheme === PROPOSAL_SCHEME && parseProposalUri(tab.input.modified).session === session,
    );
    await vscode.window.tabGroups.close(ours);
    this.provider.proposals.delete(session);
    if (this.current === session) {
      this.current = undefined;
      await vscode.commands.executeCommand("setContext", HAS_PROPOSAL, false);
    }
  }

  private async accept(uri?: vscode.Uri): Promise<void> {
    const session = this.target(uri);
    if (!session) return;
    try {
      // The server answers with workspace/applyEdit; vscode-languageclient applies it.
      const result = await this.server().accept(session);
      if (result.applied) {
        await this.closeProposal(session);
        void vscode.window.showInformationMessage(`recap: applied ${result.files.join(", ")}`);
      } else {
        void vscode.window.showWarningMessage(`recap: the change was not applied${result.message ? `: ${result.message}` : "."}`);
      }
    } catch (error) {
      this.fail(error);
    }
  }

  private async reject(uri?: vscode.Uri): Promise<void> {
    const session = this.target(uri);
    if (!session) return;
    try {
      await this.server().reject(session);
      await this.closeProposal(session);
    } catch (error) {
      this.fail(error);
    }
  }

  private async pickSession(sessions: SessionStatus[], placeHolder: string): Promise<SessionStatus | undefined> {
    if (sessions.length <= 1) return sessions[0];
    const picked = await vscode.window.showQuickPick(
      sessions.map((s) => ({ label: s.task, description: s.state, detail: `${s.session} · step ${s.step} · ${s.tokens} tokens`, status: s })),
      { placeHolder },
    );
    return picked?.status;
  }

  private async cancel(): Promise<void> {
    try {
      const running = (await this.server().sessions()).filter((s) => s.state === "running");
      if (running.length === 0) {
        void vscode.window.showInformationMessage("recap: nothing is running.");
        return;
      }
      const status = await this.pickSession(running, "Cancel which run?");
      if (status) await this.server().cancel(status.session);
    } catch (error) {
      this.fail(error);
    }
  }

  private async showSession(): Promise<void> {
    try {
      const status = await this.pickSession(await this.server().sessions(), "Show which session?");
      this.events.show(true);
      if (!status) return;
      const { session, task, state, step, tokens, summaries, message, adapter } = status;
      this.events.appendLine(
        `[${shortSession(session)}] ${task}: ${state}, step ${step}, ${tokens} tokens, ${summaries} summaries` +
          `${adapter ? `, adapter ${adapter}` : ""}${message ? ` (${message})` : ""}`,
      );
      if (state === "finished") await this.showProposal(session);
    } catch (error) {
      this.fail(error);
    }
  }
}
