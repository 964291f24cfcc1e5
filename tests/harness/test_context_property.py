"""The context guarantees over random episodes (hypothesis), on a real local workspace holding a
rules file: random observation sizes (some far over the window), random summary texts (some
empty or only tool-call markup), random cycles of calls.

- no prompt is over the window;
- every observation since the last summary is in every prompt, in part at least, until a
  summary replaces it (while summaries are left);
- the project rules are in every prompt;
- every cycle is stopped by the loop guard within `period * SPAN` steps of its start.
"""

from __future__ import annotations

from typing import Any, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.agent import Agent
from harness.config import AgentConfig, ContextConfig, RecapConfig
from harness.policies.scripted import ScriptedPolicy
from harness.prompts import observation_header
from harness.session import Observation, PolicyTurn, Summary
from test_agent_support import TOOLS, call

WINDOW = 3000
ROUNDS = 3
RULE = "RULE-MARKER: never touch vendored code."
SPAN = 2 * (ROUNDS + 2)
"""Rounds within which a cycle must be stopped: `rounds + 1` to warn and stop, one more when its
first round starts from another workspace state, and all that once again when the context
changes under the cycle (the hard limit starts refusing its calls: new outputs, a still workspace)."""


class TwoScripts:
    """Action turns from one script, summary replies from a list played round and round."""

    def __init__(self, actions: Sequence[str], summaries: Sequence[str]) -> None:
        self.actions = ScriptedPolicy(actions, context_window=WINDOW)
        self.summaries = list(summaries) or [""]
        self.spec, self.context_window = "two-scripts", WINDOW
        self.calls: list[tuple[str, Any]] = []
        self._summary = 0

    def count_tokens(self, messages, tools):
        return self.actions.count_tokens(messages, tools)

    def generate(self, messages, tools, *, max_new_tokens, kind="action"):
        if kind == "summary":
            self._summary += 1
            helper = ScriptedPolicy([self.summaries[(self._summary - 1) % len(self.summaries)]], context_window=WINDOW)
            completion = helper.generate(messages, tools, max_new_tokens=max_new_tokens, kind=kind)
            self.calls.append((kind, helper.calls[-1]))
            return completion
        completion = self.actions.generate(messages, tools, max_new_tokens=max_new_tokens, kind=kind)
        self.calls.append((kind, self.actions.calls[-1]))
        return completion


def _emit(size: int, i: int) -> str:
    return call("emit", size=size, word=f"v{i}")


@st.composite
def episodes(draw):
    sizes = st.one_of(st.integers(0, 200), st.integers(200, 1500), st.integers(3000, 9000))  # the last: over the window
    prefix = [_emit(draw(sizes), i) for i in range(draw(st.integers(0, 8)))]
    cycle: list[str] = []
    if draw(st.booleans()):
        period = draw(st.integers(1, 4))
        block = [call("write_file", path="f.txt", content=f"{k}\n") if draw(st.booleans()) else _emit(draw(sizes), 100 + k)
                 for k in range(period)]
        cycle = block * SPAN
    summaries = draw(st.lists(st.sampled_from(["", "  \n", '<tool_call>\n{"name": "emit", "arguments": {"size": 1}}\n</tool_call>',
                                               "Goal: emit words. State: going on.", "S " * 400]), min_size=1, max_size=4))
    return prefix, cycle, summaries


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    import subprocess

    from shadow_backend.local import LocalBackend

    repo = tmp_path_factory.mktemp("repo")
    (repo / "AGENTS.md").write_text(RULE + "\n")
    (repo / "f.txt").write_text("start\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "base"], cwd=repo, check=True)
    workspace = LocalBackend.create(repo)
    yield workspace
    workspace.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(episode=episodes(), summarize_at=st.integers(1300, 1800), keep_recent=st.integers(0, 2),
       max_summaries=st.integers(0, 6), max_new_tokens=st.integers(32, 160))
def test_context_guarantees_over_random_episodes(ws, episode, summarize_at, keep_recent, max_summaries, max_new_tokens):
    prefix, cycle, summaries = episode
    ws.write_bytes("f.txt", b"start\n")  # the module's workspace starts each example where it was made
    actions = [*prefix, *cycle, call("finish", message="done")]
    policy = TwoScripts(actions, summaries)
    config = RecapConfig(
        agent=AgentConfig(max_steps=60, loop_guard_repeats=ROUNDS, max_new_tokens=max_new_tokens, summary_max_new_tokens=max_new_tokens),
        context=ContextConfig(summarize_at=summarize_at, hard_limit=0.95, keep_recent=keep_recent, max_summaries=max_summaries),
    )
    result = Agent(policy=policy, workspace=ws, tools=TOOLS, config=config).run("emit words")
    assert result.stop_reason in {"finish", "loop_guard"}, result.message

    turns = [e for e in result.events if isinstance(e, PolicyTurn)]
    assert len(turns) == len(policy.calls)
    for turn, (kind, c) in zip(turns, policy.calls):
        assert turn.kind == kind
        assert c.prompt_tokens + c.max_new_tokens <= WINDOW
        assert RULE in c.messages[0]["content"]
        before = result.events[: turn.seq]
        done = [e for e in before if isinstance(e, Summary)]
        if len(done) >= max_summaries:
            continue  # past the cap, drop-oldest may act: only the window guarantee holds
        boundary = done[-1].replaces_through_seq if done else 0
        prompt = "\n".join(m.get("content") or "" for m in c.messages)
        for o in before:
            if isinstance(o, Observation) and o.seq > boundary:
                shown = observation_header(o.obs_id, o.name, o.arguments) + "\n" + o.output
                assert shown in prompt, (kind, o.obs_id)
    for s in (e for e in result.events if isinstance(e, Summary)):
        assert s.text.strip() and (s.fallback is None) == (s.rejected < 2)

    if cycle:
        period = len(cycle) // SPAN
        assert result.stop_reason == "loop_guard"
        assert result.steps <= len(prefix) + period * SPAN
