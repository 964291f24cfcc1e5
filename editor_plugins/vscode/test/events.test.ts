import assert from "node:assert/strict";
import { test } from "node:test";

import { formatEvent, formatTokens, progressText, shortSession } from "../src/events";

const session = "20261130-101500-0123abcd";

test("two sessions started the same second get different prefixes", () => {
  assert.equal(shortSession("20261130-101500-0123abcd"), "0123abcd");
  assert.notEqual(shortSession("20261130-101500-0123abcd"), shortSession("20261130-101500-89abcdef"));
  assert.equal(shortSession("my-session"), "my-session");
});

test("tokens are shown in thousands past 999", () => {
  assert.equal(formatTokens(980), "980");
  assert.equal(formatTokens(12345), "12.3k");
});

test("a policy turn shows its first line and each tool call", () => {
  const lines = formatEvent({
    session,
    seq: 3,
    type: "policy_turn",
    turn: 1,
    text: "I will fix it.\nMore reasoning",
    tool_calls: [{ id: "t1-0", name: "edit_file", arguments: '{"path":"a.py"}' }],
    parse_errors: ["tool call is not valid JSON"],
  });
  assert.deepEqual(lines, [
    "[0123abcd] turn 1: I will fix it.",
    '    -> edit_file {"path":"a.py"}',
    "    !! tool call is not valid JSON",
  ]);
});

test("an observation shows the head of its output and how much is left out", () => {
  const output = Array.from({ length: 8 }, (_, i) => `line ${i}`).join("\n");
  const lines = formatEvent({ session, type: "observation", name: "run_command", obs_id: 2, output, is_error: true });
  assert.equal(lines[0], "[0123abcd] <- run_command #2 (error)");
  assert.deepEqual(lines.slice(1), ["    line 0", "    line 1", "    line 2", "    line 3", "    line 4", "    … 3 more lines"]);
});

test("long lines are clipped", () => {
  const [line] = formatEvent({ session, type: "policy_turn", turn: 0, text: "x".repeat(500) });
  assert.ok(line!.length < 230, line);
  assert.ok(line!.endsWith("…"));
});

test("summary, prune, final, verdict and state events", () => {
  assert.deepEqual(formatEvent({ session, type: "summary", index: 1, tokens_before: 12000, tokens_after: 900 }), [
    "[0123abcd] summary 1: 12.0k -> 900 tokens",
  ]);
  assert.deepEqual(formatEvent({ session, type: "prune", obs_ids: [3, 4], tokens_before: 2000, tokens_after: 1500 }), [
    "[0123abcd] pruned #3, 4: 2.0k -> 1.5k tokens",
  ]);
  assert.deepEqual(formatEvent({ session, type: "final", stop_reason: "finish", steps: 2, diff: "--- a/a.py\n+++ b/a.py\n" }), [
    "[0123abcd] final: finish after 2 steps",
    "    --- a/a.py",
    "    +++ b/a.py",
  ]);
  assert.deepEqual(formatEvent({ session, type: "verdict", verdict: "rejected", reason: "wrong file" }), [
    "[0123abcd] verdict: rejected (wrong file)",
  ]);
  assert.deepEqual(formatEvent({ session, type: "state", state: "failed", message: "model unreachable" }), [
    "[0123abcd] state: failed (model unreachable)",
  ]);
});

test("unknown event types are shown as JSON, not dropped", () => {
  assert.deepEqual(formatEvent({ session, seq: 9, type: "score", verify_passed: true }), ['[0123abcd] score: {"seq":9,"verify_passed":true}']);
});

test("progress values become status bar text", () => {
  assert.equal(progressText({ kind: "begin", title: "recap: fix it" }), "recap: fix it");
  assert.equal(progressText({ kind: "report", message: "editing x.py" }), "recap: editing x.py");
  assert.equal(progressText({ kind: "report", percentage: 40 }), "recap: 40%");
  assert.equal(progressText({ kind: "end", message: "finished" }), "recap: finished");
});
