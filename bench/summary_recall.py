"""Summary fact recall: what survives in the context after the first context-management step.

A set of long episodes (built here from templates, deterministic) with annotated key facts: the
file paths edited, exact error strings, constraints the user gave mid-episode, a rule from the
repository's AGENTS.md (pinned as a `ProjectRules` event, as the agent does), and the last line of
a command output far bigger than the window (cut to the observation's token budget as the agent
cuts it: head and tail kept). Each episode
is cut where the next prompt would first pass `summarize_at`; then the context is rebuilt three
ways from the same events (`harness.context.ContextManager`):

- self-summary: the policy writes summary 1 (the real summary prompt), the summary replaces the
  history (Cursor Composer-style);
- truncation: the oldest turns dropped until the prompt fits under `summarize_at`;
- observation masking: observations older than `keep_recent` turns replaced by a placeholder
  (OpenHands; Lindenbauer et al. 2025).

A fact counts as recalled when its exact text appears in the resulting prompt (message contents
and tool-call arguments). Printed: recall per method, overall and per fact kind.

    python -m bench.summary_recall                                   # embedded SmolLM2-135M
    python -m bench.summary_recall --model openai:MODEL@http://host:8000/v1
(run from the repository root: `python bench/summary_recall.py` would import bench/harness.py as `harness`)
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import dataclass
from typing import Any

from harness.config import ContextConfig
from harness.context import ContextManager, prune_tool
from harness.prompts import SYSTEM_PROMPT
from harness.prompts import observation_header
from harness.session import (
    SCHEMA_VERSION,
    Observation,
    PolicyTurn,
    ProjectRules,
    SessionStart,
    SessionWriter,
    Summary,
    ToolCallRecord,
    UserMessage,
)
from harness.toolcall import render_tool_call
from harness.tools import default_registry
from harness.tools.base import ToolResult
from harness.truncate import truncate_tokens


@dataclass(frozen=True)
class Fact:
    kind: str  # one of KINDS
    text: str


KINDS = ("path", "error", "constraint", "rule", "tail")


@dataclass(frozen=True)
class Scenario:
    task: str
    edits: tuple[str, ...]
    error: str
    constraint: str
    rule: str = "Run `make lint` before you call finish."
    tail: str = "LAST-LINE-ERROR: build step 'package' failed with exit code 3"


SCENARIOS = (
    Scenario("Fix the failing config loader tests.", ("src/confload/merge.py", "src/confload/schema.py"),
             "TypeError: unsupported operand type(s) for +: 'int' and 'NoneType'", "keep Python 3.8 support"),
    Scenario("Make the CSV exporter handle empty rows.", ("exporter/csv_writer.py", "exporter/rows.py"),
             "IndexError: list index out of range (row 0 of sheet 'Totals')", "do not change the public signature of write_rows"),
    Scenario("Repair the retry decorator's backoff.", ("netutil/retry.py", "tests/test_retry.py"),
             "AssertionError: expected delays [1, 2, 4] but got [1, 1, 1]", "no new dependencies"),
    Scenario("Stop the cache from returning stale entries.", ("cachelib/lru.py", "cachelib/clock.py"),
             "KeyError: 'session:42' raised from cachelib/lru.py:88 in evict", "the cache size must stay at 128 entries"),
)


def filler(rng: random.Random, lines: int, path: str) -> str:
    words = ["value", "result", "config", "index", "buffer", "token", "state", "handler", "count", "item"]
    return "\n".join(f"{i + 1:>6}\t{rng.choice(words)}_{rng.randint(0, 999)} = {rng.choice(words)}({rng.randint(0, 99)})  # {path}"
                     for i in range(lines))


def build_episode(scenario: Scenario, *, seed: int, filler_lines: int, reads: int, manager: ContextManager) -> tuple[list[Any], list[Fact]]:
    """Events of one long episode (facts early, long reads later) and its annotated facts; each
    observation is cut to the token budget `manager` gives it, as the agent does."""
    rng = random.Random(seed)
    log = SessionWriter(None)
    log.emit(SessionStart, schema_version=SCHEMA_VERSION, session_id=f"recall-{seed}", repo="/bench", task=scenario.task,
             model="bench", system_prompt=SYSTEM_PROMPT)
    log.emit(ProjectRules, text=f"Project rules from the repository (AGENTS.md); follow them:\n\n## AGENTS.md\n{scenario.rule}",
             files=["AGENTS.md"])
    turn, obs = 0, 0

    def step(name: str, args: dict[str, Any], output: str) -> None:
        nonlocal turn, obs
        call = ToolCallRecord(id=f"call_{turn}_0", name=name, arguments=json.dumps(args))
        log.emit(PolicyTurn, turn=turn, text=render_tool_call(name, args), tool_calls=[call])
        obs += 1
        budget = manager.observation_budget(log.events, header=observation_header(obs, name, call.arguments))
        output = truncate_tokens(output, max_tokens=budget, count=manager.text_tokens)
        log.emit(Observation, turn=turn, obs_id=obs, call_id=call.id, name=name, arguments=call.arguments, output=output)
        turn += 1

    step("run_command", {"command": "python -m pytest -q"}, f"exit code 1 in 2.1s\nF.\n____ test_main ____\n    {scenario.error}\n1 failed, 1 passed")
    log.emit(UserMessage, content=f"One more thing: {scenario.constraint}.")
    step("run_command", {"command": "make package"}, "exit code 3 in 9.0s\n--- stdout ---\n" + "#" * 7000 + "\n" + scenario.tail)
    for path in scenario.edits:
        step("read_file", {"path": path}, filler(rng, filler_lines, path))
        step("edit_file", {"path": path, "old_string": "return None", "new_string": "return default"}, f"edited {path}: 1 replacement")
    for _ in range(reads):
        other = f"lib/module_{rng.randint(100, 999)}.py"
        step("read_file", {"path": other}, filler(rng, filler_lines, other))
    facts = [Fact("path", p) for p in scenario.edits] + [Fact("error", scenario.error), Fact("constraint", scenario.constraint),
                                                         Fact("rule", scenario.rule), Fact("tail", scenario.tail)]
    return log.events, facts


def context_text(messages: Any) -> str:
    parts = []
    for m in messages:
        parts.append(m.get("content") or "")
        for c in m.get("tool_calls") or ():
            parts.append(json.dumps(c["function"]["arguments"]))
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--endpoint", default=None)
    parser.add_argument("--window", type=int, default=8192)
    parser.add_argument("--summarize-at", type=int, default=6000, help="tokens")
    parser.add_argument("--summary-tokens", type=int, default=256)
    parser.add_argument("--filler-lines", type=int, default=10, help="lines of each later file read")
    parser.add_argument("--reads", type=int, default=40, help="file reads after the facts")
    parser.add_argument("--episodes", type=int, default=len(SCENARIOS))
    args = parser.parse_args()

    from harness.policies import load_policy

    policy = load_policy(args.model, endpoint=args.endpoint, context_window=args.window, temperature=0.0)
    specs = [*default_registry().specs(), prune_tool(lambda ids: ToolResult("")).spec()]

    def manager(strategy: str) -> ContextManager:
        config = ContextConfig(strategy=strategy, summarize_at=args.summarize_at, hard_limit=args.window, keep_recent=2)
        return ContextManager(policy=policy, config=config, tool_specs=specs, reserve_tokens=args.summary_tokens)

    methods = {"self-summary": manager("summary"), "truncation": manager("drop_oldest"), "masking": manager("mask")}
    hits: dict[str, dict[str, list[bool]]] = {m: {} for m in methods}
    print(f"model={policy.spec} window={args.window} summarize_at={args.summarize_at} episodes={args.episodes}")
    for index, scenario in enumerate(SCENARIOS[: args.episodes]):
        summ = methods["self-summary"]
        events, facts = build_episode(scenario, seed=index, filler_lines=args.filler_lines, reads=args.reads, manager=summ)
        cut = next((n for n in range(2, len(events) + 1) if summ.wants_summary(events[:n])), None)
        if cut is None:
            print(f"episode {index}: never passes summarize_at; lower --summarize-at or raise --filler-lines")
            continue
        prefix = events[:cut]
        started = time.perf_counter()
        prompt = summ.summary_prompt(prefix)
        done = policy.generate(list(prompt.messages), None, max_new_tokens=args.summary_tokens, kind="summary")
        log = SessionWriter(None)
        log.events = list(prefix)
        log.emit(PolicyTurn, turn=999, kind="summary", text=done.text)
        log.emit(Summary, **summ.summary_fields(log.events, done.text, finish_reason=done.finish_reason))
        views = {"self-summary": summ.view(log.events), "truncation": methods["truncation"].view(prefix),
                 "masking": methods["masking"].view(prefix)}
        line = []
        for name, view in views.items():
            text = context_text(view.messages)
            for fact in facts:
                hits[name].setdefault(fact.kind, []).append(fact.text in text)
            line.append(f"{name} {sum(f.text in text for f in facts)}/{len(facts)} ({view.tokens} tok)")
        print(f"episode {index}: cut at event {cut} ({summ.tokens(prefix)} tok), summary {time.perf_counter() - started:.1f}s: " + "; ".join(line))
        print(f"  summary 1 begins: {done.text[:160]!r}")
        tail_seen = any(f.kind == "tail" and f.text in context_text(prompt.messages) for f in facts)
        print(f"  the big output's last line was in the summary prompt: {tail_seen}")
    print(f"\n{'method':<14} {'all':>6} " + " ".join(f"{k:>11}" for k in KINDS))
    for name, kinds in hits.items():
        flat = [h for v in kinds.values() for h in v]
        if not flat:
            continue
        row = " ".join(f"{sum(kinds.get(k, [])) / max(1, len(kinds.get(k, []))):>11.2f}" for k in KINDS)
        print(f"{name:<14} {sum(flat) / len(flat):>6.2f} {row}")


if __name__ == "__main__":
    main()
