/**
 * End to end against the real `recap serve` over stdio: this test plays VS Code's part with a bare
 * JSON-RPC connection and sends exactly what the extension sends (same `RecapClient`, same
 * settings mapping, same diff assembly), and answers the server's requests as
 * vscode-languageclient does (progress tokens, configuration, applyEdit).
 *
 * The server starts as the extension starts it: through `recap.pythonPath` = `$RECAP_PYTHON` when
 * that is set, else `recap serve` from the PATH.
 */
import assert from "node:assert/strict";
import { ChildProcess, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";

import { TextDocument } from "vscode-languageserver-textdocument";
import {
  ApplyWorkspaceEditParams,
  ConfigurationParams,
  CreateFile,
  createProtocolConnection,
  InitializeResult,
  ProtocolConnection,
  StreamMessageReader,
  StreamMessageWriter,
  TextDocumentEdit,
} from "vscode-languageserver-protocol/node";

import { RecapClient, WorkDoneProgress } from "../src/client";
import { diffEntries, parseProposalUri, sideText } from "../src/diff";
import { formatEvent } from "../src/events";
import { DONE_STATES, RecapEvent, SERVER_COMMANDS } from "../src/protocol";
import { readSettings, serverCommand, serverOptions } from "../src/settings";

const TIMEOUT_MS = 90_000;


function toolCall(name: string, args: object): string {
  return `<tool_call>\n${JSON.stringify({ name, arguments: args })}\n</tool_call>`;
}

function writeScript(dir: string, name: string, turns: string[]): string {
  const path = join(dir, name);
  writeFileSync(path, JSON.stringify(turns));
  return path;
}

/** A git workspace with one file, `calc.py`, committed. */
function makeWorkspace(root: string): string {
  const dir = join(root, "ws");
  execFileSync("mkdir", ["-p", dir]);
  writeFileSync(join(dir, "calc.py"), "def add(a, b):\n    return a - b\n");
  const git = (...args: string[]) =>
    execFileSync("git", args, {
      cwd: dir,
      env: { ...process.env, GIT_AUTHOR_NAME: "t", GIT_AUTHOR_EMAIL: "t@e", GIT_COMMITTER_NAME: "t", GIT_COMMITTER_EMAIL: "t@e" },
    });
  git("init", "-q");
  git("add", ".");
  git("commit", "-qm", "init");
  return dir;
}

/** The client half VS Code provides: open documents, applyEdit, progress, configuration. */
class FakeEditor {
  readonly documents = new Map<string, TextDocument>();
  readonly events: RecapEvent[] = [];
  readonly applied: ApplyWorkspaceEditParams[] = [];
  readonly stderr: string[] = [];
  readonly recap: RecapClient;
  private listeners: (() => void)[] = [];

  constructor(
    readonly connection: ProtocolConnection,
    readonly process: ChildProcess,
    public settings: Record<string, unknown>,
  ) {
    this.recap = new RecapClient(connection);
    this.recap.onEvent((event) => {
      this.events.push(event);
      this.listeners.forEach((wake) => wake());
    });
    connection.onRequest("window/workDoneProgress/create", () => null);
    connection.onRequest("client/registerCapability", () => null);
    connection.onRequest("workspace/configuration", (params: ConfigurationParams) => {
      return params.items.map((item) => (item.section === "recap" ? serverOptions(readSettings((k) => this.settings[k])) : null));
    });
    connection.onRequest("workspace/applyEdit", (params: ApplyWorkspaceEditParams) => this.applyEdit(params));
    connection.onNotification("window/logMessage", () => {});
    connection.onNotification("window/showMessage", () => {});
  }

  /** Apply a WorkspaceEdit as VS Code does: versioned edits must match the open document, closed
   * files (`version: null`) are read from disk, created files start empty. Documents stay in memory. */
  applyEdit(params: ApplyWorkspaceEditParams): { applied: boolean; failureReason?: string } {
    this.applied.push(params);
    // VS Code applies nothing of an edit whose annotation needs confirmation until the user ticks
    // it in the refactor preview; the user's Accept must be enough
    const confirm = Object.entries(params.edit.changeAnnotations ?? {}).filter(([, a]) => a.needsConfirmation);
    if (confirm.length > 0) return { applied: false, failureReason: `needs confirmation: ${confirm.map(([id]) => id).join(", ")}` };
    for (const change of params.edit.documentChanges ?? []) {
      if (CreateFile.is(change)) {
        if (this.documents.has(change.uri) || existsSync(fileURLToPath(change.uri))) {
          return { applied: false, failureReason: `exists: ${change.uri}` };
        }
        this.documents.set(change.uri, TextDocument.create(change.uri, "plaintext", 0, ""));
        continue;
      }
      if (!TextDocumentEdit.is(change)) return { applied: false, failureReason: `unexpected ${JSON.stringify(change)}` };
      const uri = change.textDocument.uri;
      const doc = this.documents.get(uri) ?? (change.textDocument.version === null ? this.fromDisk(uri) : undefined);
      if (!doc) return { applied: false, failureReason: `not open: ${uri}` };
      if (change.textDocument.version !== null && change.textDocument.version !== doc.version) {
        return { applied: false, failureReason: `version ${change.textDocument.version} != ${doc.version}` };
      }
      const edits = change.edits.map((e) => {
        if (!("newText" in e)) throw new Error(`snippet edits are not expected: ${JSON.stringify(e)}`);
        return e;
      });
      const text = TextDocument.applyEdits(doc, edits);
      this.documents.set(doc.uri, TextDocument.create(doc.uri, doc.languageId, doc.version + 1, text));
    }
    return { applied: true };
  }

  private fromDisk(uri: string): TextDocument | undefined {
    const path = fileURLToPath(uri);
    return existsSync(path) ? TextDocument.create(uri, "plaintext", 0, readFileSync(path, "utf8")) : undefined;
  }

  async open(uri: string, text: string): Promise<void> {
    const doc = TextDocument.create(uri, "python", 1, text);
    this.documents.set(uri, doc);
    await this.connection.sendNotification("textDocument/didOpen", {
      textDocument: { uri, languageId: "python", version: 1, text },
    });
  }

  /** What the extension does on a settings change: push the mapped section to the server. A
   * status round trip after it makes sure the server has handled the notification. */
  async changeSettings(change: Record<string, unknown>): Promise<void> {
    this.settings = { ...this.settings, ...change };
    await this.connection.sendNotification("workspace/didChangeConfiguration", {
      settings: { recap: serverOptions(readSettings((k) => this.settings[k])) },
    });
    await this.recap.sessions();
  }

  text(uri: string): string {
    return this.documents.get(uri)!.getText();
  }

  /** Resolve once `session` reaches a state in `states` (seen through `recap/event`). */
  waitForState(session: string, states: ReadonlySet<string>): Promise<string> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`session ${session} never reached ${[...states]}; events:\n${this.log()}\nserver stderr:\n${this.stderr.join("")}`)),
        TIMEOUT_MS / 2,
      );
      const check = () => {
        const reached = this.events.find((e) => e.session === session && e.type === "state" && states.has(e.state as string));
        if (reached) {
          clearTimeout(timer);
          this.listeners = this.listeners.filter((l) => l !== check);
          resolve(reached.state as string);
        }
      };
      this.listeners.push(check);
      check();
    });
  }

  log(): string {
    return this.events.flatMap(formatEvent).join("\n");
  }
}

async function startEditor(workspace: string, settings: Record<string, unknown>): Promise<{ editor: FakeEditor; init: InitializeResult }> {
  const { command, args } = serverCommand(readSettings((k) => settings[k]));
  // vscode-languageclient's stdio transport appends these flags to the command line
  const child = spawn(command, [...args, "--stdio", `--clientProcessId=${process.pid}`], { cwd: workspace, stdio: ["pipe", "pipe", "pipe"] });
  const connection = createProtocolConnection(new StreamMessageReader(child.stdout!), new StreamMessageWriter(child.stdin!));
  const editor = new FakeEditor(connection, child, settings);
  child.stderr!.on("data", (chunk) => editor.stderr.push(String(chunk)));
  connection.listen();
  const rootUri = pathToFileURL(workspace).toString();
  const init = await connection.sendRequest("initialize", {
    processId: process.pid,
    rootUri,
    workspaceFolders: [{ uri: rootUri, name: "ws" }],
    initializationOptions: serverOptions(readSettings((k) => settings[k])),
    capabilities: {
      workspace: {
        applyEdit: true,
        workspaceEdit: { documentChanges: true, resourceOperations: ["create", "rename", "delete"], changeAnnotationSupport: {} },
        configuration: true,
        didChangeConfiguration: { dynamicRegistration: true },
        workspaceFolders: true,
        executeCommand: { dynamicRegistration: true },
      },
      window: { workDoneProgress: true },
      textDocument: { synchronization: { dynamicRegistration: true, didSave: true } },
    },
  });
  await connection.sendNotification("initialized", {});
  return { editor, init: init as InitializeResult };
}

async function stopEditor(editor: FakeEditor): Promise<void> {
  const exited = new Promise((resolve) => editor.process.once("exit", resolve));
  await editor.connection.sendRequest("shutdown");
  await editor.connection.sendNotification("exit");
  await exited;
  editor.connection.dispose();
}

describe("the extension's protocol against the real recap serve", { timeout: TIMEOUT_MS * 2 }, () => {
  let root: string;
  let workspace: string;
  let uri: string;
  let editor: FakeEditor;
  let init: InitializeResult;
  const fix = "def add(a, b):\n    return a + b\n";

  before(async () => {
    root = mkdtempSync(join(tmpdir(), "recap-vscode-e2e-"));
    workspace = makeWorkspace(root);
    uri = pathToFileURL(join(workspace, "calc.py")).toString();
    const script = writeScript(root, "fix.json", [
      toolCall("edit_file", { path: "calc.py", old_string: "return a - b", new_string: "return a + b" }),
      toolCall("finish", { message: "add adds now" }),
    ]);
    ({ editor, init } = await startEditor(workspace, {
      pythonPath: process.env.RECAP_PYTHON,
      model: `scripted:${script}`,
      sessionsDir: join(root, "sessions"),
    }));
  });

  after(async () => {
    if (editor) await stopEditor(editor);
    rmSync(root, { recursive: true, force: true });
  });

  test("the server offers every command the extension calls", () => {
    const offered = init.capabilities.executeCommandProvider?.commands ?? [];
    for (const command of Object.values(SERVER_COMMANDS)) assert.ok(offered.includes(command), `${command} not in ${offered}`);
  });

  test("run -> progress -> events -> proposal diff -> accept applies the edit to the open document", async () => {
    await editor.open(uri, "def add(a, b):\n    return a - b\n");
    const progress: WorkDoneProgress[] = [];
    const { session } = await editor.recap.run(
      { task: "make add add", uri, range: { start: { line: 0, character: 0 }, end: { line: 1, character: 16 } } },
      (value) => progress.push(value),
    );
    assert.equal(await editor.waitForState(session, DONE_STATES), "finished", editor.log());

    assert.equal(progress[0]?.kind, "begin", JSON.stringify(progress));
    assert.ok(progress.some((p) => p.kind === "report" && p.message), JSON.stringify(progress));
    await waitFor(() => progress.at(-1)?.kind === "end", "progress end");
    const types = new Set(editor.events.filter((e) => e.session === session).map((e) => e.type));
    for (const type of ["policy_turn", "observation", "final"]) assert.ok(types.has(type), `no ${type} event in ${[...types]}`);

    const proposal = await editor.recap.proposal(session);
    assert.deepEqual(
      proposal.files.map((f) => [f.path, f.status]),
      [["calc.py", "modified"]],
    );
    const [entry] = diffEntries(proposal);
    const left = parseProposalUri(entry!.left);
    const right = parseProposalUri(entry!.right);
    assert.equal(sideText(proposal, left.path, left.side), "def add(a, b):\n    return a - b\n");
    assert.equal(sideText(proposal, right.path, right.side), fix);
    assert.match(proposal.diff, /-    return a - b\n\+    return a \+ b/);

    const result = await editor.recap.accept(session);
    assert.equal(result.applied, true, JSON.stringify(result));
    assert.deepEqual(result.files, ["calc.py"]);
    assert.equal(editor.applied.length, 1);
    assert.equal(editor.applied[0]!.label, "recap: make add add");
    assert.equal(editor.text(uri), fix);
    assert.equal((await editor.recap.status(session)).state, "accepted");
    await editor.waitForState(session, new Set(["accepted"]));
  });

  test("reject leaves the document and the file untouched", async () => {
    const before = editor.text(uri);
    const { session } = await editor.recap.run({ task: "make add add again", uri });
    await editor.waitForState(session, DONE_STATES);
    const rejected = await editor.recap.reject(session, "not now");
    assert.equal(rejected.state, "rejected");
    assert.equal(editor.text(uri), before);
    const sessions = await editor.recap.sessions();
    assert.ok(sessions.some((s) => s.session === session && s.state === "rejected"), JSON.stringify(sessions));
  });

  test("a settings change reaches the server (didChangeConfiguration); accepting creates the new file", async () => {
    const script = writeScript(root, "note.json", [
      toolCall("write_file", { path: "NOTES.md", content: "configured\n" }),
      toolCall("finish", { message: "wrote notes" }),
    ]);
    await editor.changeSettings({ model: `scripted:${script}` });
    const { session } = await editor.recap.run({ task: "write notes" });
    assert.equal(await editor.waitForState(session, DONE_STATES), "finished", editor.log());
    const proposal = await editor.recap.proposal(session);
    assert.deepEqual(
      proposal.files.map((f) => [f.path, f.status, f.proposed]),
      [["NOTES.md", "added", "configured\n"]],
    );
    const result = await editor.recap.accept(session);
    assert.equal(result.applied, true, JSON.stringify(result));
    assert.equal(editor.text(pathToFileURL(join(workspace, "NOTES.md")).toString()), "configured\n");
  });

  test("cancel stops a running session", async () => {
    // ten 2-second steps (distinct, so the loop guard stays out of it); the agent sees the
    // cancel between steps
    const naps = Array.from({ length: 10 }, (_, i) => toolCall("run_command", { command: `sleep 2 # nap ${i}` }));
    const script = writeScript(root, "slow.json", [...naps, toolCall("finish", { message: "slept" })]);
    await editor.changeSettings({ model: `scripted:${script}` });
    const { session } = await editor.recap.run({ task: "sleep" });
    await waitFor(() => editor.events.some((e) => e.session === session && e.type === "policy_turn"), "the first turn");
    const cancelled = await editor.recap.cancel(session);
    assert.ok(["cancelled", "running"].includes(cancelled.state), JSON.stringify(cancelled));
    assert.equal(await editor.waitForState(session, DONE_STATES), "cancelled", editor.log());
  });

  test("bad arguments get a clear error and the server keeps serving", async () => {
    await assert.rejects(editor.recap.execute(SERVER_COMMANDS.accept, { session: "no-such-session" }), /no-such-session/);
    assert.ok(Array.isArray(await editor.recap.sessions()));
  });
});

async function waitFor(condition: () => boolean, what: string, timeoutMs = TIMEOUT_MS / 2): Promise<void> {
  const start = Date.now();
  while (!condition()) {
    if (Date.now() - start > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
