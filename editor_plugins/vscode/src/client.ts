/**
 * Typed calls of the recap server's commands over any JSON-RPC connection: the extension
 * passes its `LanguageClient`, the end-to-end test a bare `vscode-jsonrpc` connection, so both
 * send exactly the same messages. No `vscode` import.
 */
import { ProgressType } from "vscode-languageserver-protocol";
import type { WorkDoneProgressBegin, WorkDoneProgressEnd, WorkDoneProgressReport } from "vscode-languageserver-protocol";

import {
  AcceptResult,
  EVENT_NOTIFICATION,
  Proposal,
  RecapEvent,
  RunArgs,
  SERVER_COMMANDS,
  SessionStatus,
  StateResult,
} from "./protocol";

export type WorkDoneProgress = WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd;

interface Disposable {
  dispose(): void;
}

/** The part of `LanguageClient` / `MessageConnection` this module uses. */
export interface Rpc {
  sendRequest<R>(method: string, params: unknown): Promise<R>;
  onNotification(method: string, handler: (params: any) => void): Disposable;
  onProgress<P>(type: ProgressType<P>, token: string | number, handler: (params: P) => void): Disposable;
}

const workDone = new ProgressType<WorkDoneProgress>();
let tokenCounter = 0;

export class RecapClient {
  constructor(private readonly rpc: Rpc) {}

  /** `workspace/executeCommand` with the single object argument every recap command takes. */
  execute<R>(command: string, argument: object, workDoneToken?: string): Promise<R> {
    const params: Record<string, unknown> = { command, arguments: [argument] };
    if (workDoneToken !== undefined) params.workDoneToken = workDoneToken;
    return this.rpc.sendRequest<R>("workspace/executeCommand", params);
  }

  /**
   * Start a session. The run reports work-done progress on a token made here, so `onProgress`
   * sees begin / one report per step / end. Resolves with the session id as soon as the server
   * accepted the task (the work goes on in the background).
   */
  async run(args: RunArgs, onProgress?: (value: WorkDoneProgress) => void): Promise<{ session: string; token: string }> {
    const token = `recap-run-${process.pid}-${++tokenCounter}`;
    const subscription = onProgress ? this.rpc.onProgress(workDone, token, onProgress) : undefined;
    try {
      const { session } = await this.execute<{ session: string }>(SERVER_COMMANDS.run, args, token);
      return { session, token };
    } catch (error) {
      subscription?.dispose();
      throw error;
    }
  }

  cancel(session: string): Promise<StateResult> {
    return this.execute(SERVER_COMMANDS.cancel, { session });
  }

  /** Ask the server to apply the change: it answers with a `workspace/applyEdit` request first. */
  accept(session: string, files?: string[]): Promise<AcceptResult> {
    return this.execute(SERVER_COMMANDS.accept, files ? { session, files } : { session });
  }

  reject(session: string, reason?: string): Promise<StateResult> {
    return this.execute(SERVER_COMMANDS.reject, reason ? { session, reason } : { session });
  }

  status(session: string): Promise<SessionStatus> {
    return this.execute(SERVER_COMMANDS.status, { session });
  }

  async sessions(): Promise<SessionStatus[]> {
    const result = await this.execute<{ sessions: SessionStatus[] }>(SERVER_COMMANDS.status, {});
    return result.sessions;
  }

  proposal(session: string): Promise<Proposal> {
    return this.execute(SERVER_COMMANDS.proposal, { session });
  }

  onEvent(handler: (event: RecapEvent) => void): Disposable {
    return this.rpc.onNotification(EVENT_NOTIFICATION, handler);
  }
}
