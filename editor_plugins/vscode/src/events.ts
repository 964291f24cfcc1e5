/**
 * Text for the `recap/event` output channel and the status bar. Pure functions, no `vscode`.
 */
import type { WorkDoneProgress } from "./client";
import type { RecapEvent } from "./protocol";

const MAX_LINE_CHARS = 200;
const OBSERVATION_HEAD_LINES = 5;

/** `1234` -> `"1.2k"`, `980` -> `"980"`. */
export function formatTokens(tokens: number): string {
  return tokens >= 1000 ? `${(tokens / 1000).toFixed(1)}k` : String(tokens);
}

function clip(text: string, maxChars = MAX_LINE_CHARS): string {
  return text.length > maxChars ? `${text.slice(0, maxChars - 1)}…` : text;
}

function str(value: unknown): string {
  return typeof value === "string" ? value : value === undefined || value === null ? "" : JSON.stringify(value);
}

function num(value: unknown): number {
  return typeof value === "number" ? value : 0;
}

function indent(text: string, prefix = "    "): string[] {
  return text.split("\n").map((line) => prefix + line);
}

/** The part of a session id that tells sessions apart: ids are `YYYYMMDD-HHMMSS-<8 hex>`, so the
 * random suffix; an id of another shape is shown whole. */
export function shortSession(session: string): string {
  const match = /^\d{8}-\d{6}-([0-9a-f]+)$/.exec(session);
  return match ? match[1]! : session;
}

/**
 * Lines for one `recap/event`, each prefixed with the short session id. Unknown event types are
 * shown as their JSON so that nothing the server sends is hidden.
 */
export function formatEvent(event: RecapEvent): string[] {
  const head = `[${shortSession(event.session)}]`;
  switch (event.type) {
    case "state": {
      const message = str(event.message);
      return [`${head} state: ${str(event.state)}${message ? ` (${message})` : ""}`];
    }
    case "policy_turn": {
      const kind = event.kind === "summary" ? "summary turn" : "turn";
      const lines = [`${head} ${kind} ${num(event.turn)}: ${clip(str(event.text).trim().split("\n")[0] ?? "")}`];
      const calls = Array.isArray(event.tool_calls) ? (event.tool_calls as { name?: unknown; arguments?: unknown }[]) : [];
      for (const call of calls) lines.push(`    -> ${str(call.name)} ${clip(str(call.arguments))}`);
      const errors = Array.isArray(event.parse_errors) ? event.parse_errors : [];
      for (const error of errors) lines.push(`    !! ${clip(str(error))}`);
      return lines;
    }
    case "observation": {
      const mark = event.is_error ? " (error)" : "";
      const output = str(event.output).split("\n");
      const lines = [`${head} <- ${str(event.name)} #${num(event.obs_id)}${mark}`];
      lines.push(...output.slice(0, OBSERVATION_HEAD_LINES).map((line) => `    ${clip(line)}`));
      if (output.length > OBSERVATION_HEAD_LINES) lines.push(`    … ${output.length - OBSERVATION_HEAD_LINES} more lines`);
      return lines;
    }
    case "summary":
      return [`${head} summary ${num(event.index)}: ${formatTokens(num(event.tokens_before))} -> ${formatTokens(num(event.tokens_after))} tokens`];
    case "prune": {
      const ids = Array.isArray(event.obs_ids) ? event.obs_ids.join(", ") : "";
      return [`${head} pruned #${ids}: ${formatTokens(num(event.tokens_before))} -> ${formatTokens(num(event.tokens_after))} tokens`];
    }
    case "final": {
      const message = str(event.message);
      const lines = [`${head} final: ${str(event.stop_reason)} after ${num(event.steps)} steps${message ? ` (${message})` : ""}`];
      const diff = str(event.diff);
      if (diff) lines.push(...indent(diff.replace(/\n$/, "")));
      return lines;
    }
    case "verdict": {
      const files = Array.isArray(event.files) ? ` ${event.files.join(", ")}` : "";
      const reason = str(event.reason);
      return [`${head} verdict: ${str(event.verdict)}${files}${reason ? ` (${reason})` : ""}`];
    }
    default: {
      const { session: _session, type, ...rest } = event;
      return [`${head} ${type}: ${clip(JSON.stringify(rest))}`];
    }
  }
}

/** Status bar text for a work-done progress value, e.g. `recap: editing x.py`. */
export function progressText(value: WorkDoneProgress): string {
  switch (value.kind) {
    case "begin":
      return value.message ? `recap: ${value.message}` : value.title;
    case "report":
      return `recap: ${value.message ?? (value.percentage !== undefined ? `${value.percentage}%` : "working")}`;
    default:
      return `recap: ${value.message ?? "done"}`;
  }
}
