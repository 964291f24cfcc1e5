/**
 * The recap language server's protocol as the extension speaks it (docs/lsp-protocol.md):
 * command names, their single object argument and their results, the `recap/event`
 * notification. Types only plus the command table; no `vscode` import.
 */

/** Every server command the extension calls. A test checks these against the server's
 * `executeCommandProvider.commands`. */
export const SERVER_COMMANDS = {
  run: "recap.run",
  cancel: "recap.cancel",
  accept: "recap.accept",
  reject: "recap.reject",
  status: "recap.status",
  proposal: "recap.proposal",
} as const;

export const EVENT_NOTIFICATION = "recap/event";

export type SessionState = "running" | "finished" | "failed" | "cancelled" | "accepted" | "rejected";

/** States after which the session does no more work. */
export const DONE_STATES: ReadonlySet<SessionState> = new Set(["finished", "failed", "cancelled", "accepted", "rejected"]);

export interface Position {
  line: number;
  character: number;
}

export interface Range {
  start: Position;
  end: Position;
}

export interface RunArgs {
  task: string;
  uri?: string;
  range?: Range;
}

export interface SessionStatus {
  session: string;
  task: string;
  state: SessionState;
  step: number;
  tokens: number;
  summaries: number;
  message?: string;
  adapter?: string;
}

export interface ProposedFile {
  path: string;
  uri: string;
  status: "added" | "modified" | "deleted";
  /** What the user's editor had when the run started (unsaved buffers included). */
  original: string | null;
  proposed: string | null;
}

export interface Proposal {
  session: string;
  diff: string;
  files: ProposedFile[];
}

export interface AcceptResult {
  session: string;
  state: SessionState;
  applied: boolean;
  files: string[];
  message?: string;
}

export interface StateResult {
  session: string;
  state: SessionState;
}

/** One `recap/event` notification: a session event (`harness.session` types) or a state change. */
export interface RecapEvent {
  session: string;
  seq?: number;
  type: string;
  [field: string]: unknown;
}
