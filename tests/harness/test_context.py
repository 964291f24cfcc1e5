"""The context manager: exact trigger points, chained and capped summaries, truncated summaries,
prune stubs, the hard limit, the baselines, and the window guarantee (property test)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.agent import Agent
from harness.config import AgentConfig, ContextConfig, RecapConfig
from harness.context import CUT_MARKER, ContextManager
from harness.errors import ConfigError
from harness.policies.scripted import ScriptedPolicy
from harness.session import Observation, PolicyTurn, Prune, Summary
from test_agent_support import TOOLS, call

WINDOW = 2048


@pytest.fixture
def ws(make_repo):
    """A local workspace: the subject here is the context manager, not the backend."""
    from shadow_backend.local import LocalBackend

    workspace = LocalBackend.create(make_repo({"README.md": "hello\n"}))
    yield workspace
    workspace.close()


def run(ws, turns, *, window=WINDOW, max_new_tokens=64, **context):
    policy = ScriptedPolicy(turns, context_window=window)
    config = RecapConfig(agent=AgentConfig(max_new_tokens=max_new_tokens, summary_max_new_tokens=max_new_tokens), context=ContextConfig(**context))
    agent = Agent(policy=policy, workspace=ws, tools=TOOLS, config=config)
    return agent.run("emit words until told to stop"), policy, agent


def prompt_before_turn(ws, n, size=100):
    """Prompt tokens of action turn `n` (0-based) of an unmanaged run of emits of `size` words."""
    _, free, _ = run(ws, emits(n + 1, size) + [call("finish", message="done")], summarize_at=0.99, hard_limit=0.99)
    return free.calls[n].prompt_tokens


def kinds(policy):
    return [c.kind for c in policy.calls]


def emits(n, size=100):
    return [call("emit", size=size, word=f"w{i}") for i in range(n)]


def test_summary_fires_exactly_when_the_next_prompt_would_pass_summarize_at(ws):
    _, free, _ = run(ws, emits(4) + [call("finish", message="done")], summarize_at=0.99, hard_limit=0.99)
    assert "summary" not in kinds(free)
    third = free.calls[3].prompt_tokens  # prompt of the 4th action turn, after three observations

    _, at, _ = run(ws, emits(4) + [call("finish", message="done")], summarize_at=third, hard_limit=0.99)
    assert kinds(at)[:5] == ["action"] * 4 + ["summary"]  # reaching summarize_at is not passing it

    _, past, agent = run(ws, emits(3) + ["the summary", call("emit", size=1), call("finish", message="done")], summarize_at=third - 1, hard_limit=0.99)
    assert kinds(past) == ["action"] * 3 + ["summary", "action", "action"]
    # the summary turn saw exactly the prompt that would have been sent, plus the request, and no tools
    assert past.calls[3].messages[:-1] == free.calls[3].messages
    assert past.calls[3].tools == ()
    assert "Write summary 1 of the work so far" in past.calls[3].messages[-1]["content"]


def test_post_summary_context_is_system_task_summary_and_recent_turns(ws):
    result, policy, agent = run(ws, emits(5) + ["GOAL emit. DONE five.", call("finish", message="done")], summarize_at=prompt_before_turn(ws, 5) - 1, keep_recent=1)
    assert kinds(policy) == ["action"] * 5 + ["summary", "action"]
    after = policy.calls[6].messages
    assert after[0]["role"] == "system" and after[1]["content"] == "emit words until told to stop"
    assert after[2]["content"] == "Summary 1 of the work so far:\nGOAL emit. DONE five."
    # one recent turn kept verbatim: its assistant call and its observation (obs 5, word w4)
    assert [m["role"] for m in after[3:]] == ["assistant", "tool"]
    assert after[4]["content"].startswith('[obs 5] emit {"size": 100, "word": "w4"}\nw4 w4')
    summary = next(e for e in result.events if isinstance(e, Summary))
    assert summary.tokens_after == policy.calls[6].prompt_tokens < summary.tokens_before
    assert summary.tokens_after <= agent.context.summarize_at_tokens


def test_keep_recent_zero_keeps_no_turn(ws):
    _, policy, _ = run(ws, emits(3) + ["S", call("finish", message="done")], summarize_at=900, keep_recent=0)
    assert [m["role"] for m in policy.calls[4].messages] == ["system", "user", "user"]


def test_summaries_chain_and_fold_in_the_earlier_ones(ws):
    turns = emits(3) + ["FIRST-SUMMARY"] + emits(3) + ["SECOND-SUMMARY"] + [call("finish", message="done")]
    result, policy, _ = run(ws, turns, summarize_at=prompt_before_turn(ws, 3) - 1, keep_recent=0)
    assert kinds(policy) == ["action"] * 3 + ["summary"] + ["action"] * 3 + ["summary", "action"]
    second_request = policy.calls[7].messages
    assert any(m["content"] == "Summary 1 of the work so far:\nFIRST-SUMMARY" for m in second_request)
    last = policy.calls[8].messages
    assert last[2]["content"] == "Summary 2 of the work so far (it folds in 1 earlier summary):\nSECOND-SUMMARY"
    assert not any("FIRST-SUMMARY" in m["content"] for m in last)
    turns_ = [e for e in result.events if isinstance(e, PolicyTurn)]
    assert [t.segment for t in turns_] == [0, 0, 0, 0, 1, 1, 1, 1, 2]
    assert [s.index for s in result.events if isinstance(s, Summary)] == [1, 2]


def test_the_cap_stops_summaries_then_the_hard_limit_and_drop_oldest_take_over(ws):
    turns = emits(2, size=150) + ["ONLY-SUMMARY"] + emits(12, size=150)
    result, policy, agent = run(ws, turns, summarize_at=900, hard_limit=1300, max_summaries=1, keep_recent=0)
    assert kinds(policy).count("summary") == 1
    actions = [c for c in policy.calls if c.kind == "action"]
    restricted = [c for c in actions if {t["function"]["name"] for t in c.tools} == {"prune", "finish"}]
    assert restricted, "above the hard limit only prune and finish are offered"
    assert all(c.prompt_tokens <= agent.context.limit_tokens for c in policy.calls)
    # calling a tool that is not offered any more is an error the model reads
    assert any(o.error_kind == "not_offered" for o in result.events if isinstance(o, Observation))
    assert result.stop_reason == "error" and "script exhausted" in result.message  # 12 emits, never finishing


def test_a_summary_too_long_to_fit_is_cut_and_flagged(ws):
    long_summary = " ".join(f"fact{i}" for i in range(1000))
    result, policy, agent = run(ws, emits(3) + [long_summary, call("finish", message="done")], summarize_at=900, keep_recent=0, max_new_tokens=1500, window=4096)
    summary = next(e for e in result.events if isinstance(e, Summary))
    assert summary.truncated
    assert summary.text.endswith(CUT_MARKER) and summary.text.startswith("fact0 fact1")
    assert summary.tokens_after <= agent.context.summarize_at_tokens
    assert policy.calls[4].prompt_tokens == summary.tokens_after


def test_a_summary_cut_by_the_completion_limit_is_flagged(ws):
    result, _, _ = run(ws, emits(3) + ["word " * 200, call("finish", message="done")], summarize_at=900, max_new_tokens=50)
    summary = next(e for e in result.events if isinstance(e, Summary))
    assert summary.truncated and summary.text.count("word") == 50


def test_prune_leaves_stubs_and_reports_tokens(ws):
    turns = emits(3, size=50) + [call("prune", ids=[1, 2, 99]), call("finish", message="done")]
    result, policy, _ = run(ws, turns, summarize_at=0.99, hard_limit=800)
    prune = next(e for e in result.events if isinstance(e, Prune))
    assert prune.obs_ids == [1, 2]
    assert prune.tokens_after < prune.tokens_before
    prompt = [m["content"] for m in policy.calls[4].messages]
    assert '[obs 1] emit {"size": 50, "word": "w0"} (pruned: 149 characters dropped)' in prompt
    assert any(c.startswith("[obs 3] emit") and "w2 w2" in c for c in prompt)
    obs = [e for e in result.events if isinstance(e, Observation)]
    assert "pruned observations [1, 2]" in obs[3].output and "ignored [99]" in obs[3].output
    assert not any("w0 w0" in c for c in prompt)
    # the raw history is kept in the log
    assert "w0 w0" in obs[0].output


def test_prune_of_unknown_ids_is_an_error_observation(ws):
    result, _, _ = run(ws, emits(3, size=50) + [call("prune", ids=[42]), call("finish", message="done")], summarize_at=0.99, hard_limit=800)
    obs = [e for e in result.events if isinstance(e, Observation)]
    assert obs[3].error_kind == "tool_error" and "nothing to prune among [42]" in obs[3].output
    assert not any(isinstance(e, Prune) for e in result.events)


def test_hard_limit_offers_only_prune_and_finish(ws):
    _, policy, _ = run(ws, emits(3, size=50) + [call("finish", message="done")], summarize_at=0.99, hard_limit=800)
    offered = [sorted(t["function"]["name"] for t in c.tools) for c in policy.calls]
    assert offered[0] == ["emit", "finish", "read_file", "write_file"]
    assert offered[-1] == ["finish", "prune"]


def test_drop_oldest_truncates_the_oldest_turns(ws):
    result, policy, agent = run(ws, emits(6) + [call("finish", message="done")], strategy="drop_oldest", summarize_at=900)
    assert "summary" not in kinds(policy)
    last = [m["content"] for m in policy.calls[-1].messages]
    assert not any("w0 w0" in c for c in last) and any("w5 w5" in c for c in last)
    assert all(c.prompt_tokens <= 900 for c in policy.calls)
    assert result.stop_reason == "finish"


def test_mask_replaces_old_observations_by_a_placeholder(ws):
    _, policy, _ = run(ws, emits(6) + [call("finish", message="done")], strategy="mask", summarize_at=900, keep_recent=2)
    last = [m["content"] for m in policy.calls[-1].messages]
    assert '[obs 1] emit {"size": 100, "word": "w0"} (old output omitted: 299 characters)' in last
    assert any(c.startswith("[obs 6] emit") and "w5 w5" in c for c in last)
    assert sum("old output omitted" in c for c in last) == 4


def test_no_management_stops_with_context_exhausted(ws):
    result, policy, agent = run(ws, emits(30), strategy="none")
    assert result.stop_reason == "context_exhausted"
    assert all(c.prompt_tokens <= agent.context.limit_tokens for c in policy.calls)


def test_a_task_too_long_for_the_window_is_never_sent(ws):
    policy = ScriptedPolicy([call("finish", message="x")], context_window=1024)
    agent = Agent(policy=policy, workspace=ws, tools=TOOLS, config=RecapConfig(agent=AgentConfig(max_new_tokens=64)))
    result = agent.run("word " * 2000)
    assert result.stop_reason == "context_exhausted"
    assert policy.calls == []


def test_config_validation_says_how_to_fix():
    with pytest.raises(ConfigError, match="summarize_at must be a fraction"):
        ContextConfig(summarize_at=0)
    with pytest.raises(ConfigError, match="raise hard_limit or lower summarize_at"):
        ContextConfig(summarize_at=0.8, hard_limit=0.5)
    with pytest.raises(ConfigError, match="strategy must be one of"):
        ContextConfig(strategy="magic")
    with pytest.raises(ConfigError, match="loop_guard_repeats must be an integer >= 2"):
        AgentConfig(loop_guard_repeats=1)
    with pytest.raises(ConfigError, match="lower context.reserve_tokens"):
        ContextManager(policy=ScriptedPolicy([], context_window=100), config=ContextConfig(reserve_tokens=100), tool_specs=[], reserve_tokens=100)


def test_config_file_and_overrides(tmp_path):
    path = tmp_path / "recap.toml"
    path.write_text('[agent]\nmax_steps = 7\n[context]\nsummarize_at = 3000\nhard_limit = 3500\n[backend]\nkind = "docker"\n')
    cfg = RecapConfig.load(path, keep_recent=4, max_steps=None)
    assert cfg.agent.max_steps == 7 and cfg.context.summarize_at == 3000 and cfg.context.keep_recent == 4
    assert cfg.to_dict()["context"]["hard_limit"] == 3500
    assert cfg.reserve_tokens == cfg.agent.max_new_tokens
    with pytest.raises(ConfigError, match="unknown option 'max_stepz'"):
        cfg.with_overrides(max_stepz=3)
    path.write_text("[context]\nsumarize_at = 0.5\n")
    with pytest.raises(ConfigError, match=r"unknown option\(s\) in \[context\]: sumarize_at"):
        RecapConfig.from_toml(path)
    path.write_text("[context\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        RecapConfig.from_toml(path)


@st.composite
def episodes(draw):
    n = draw(st.integers(1, 25))
    turns = []
    for _ in range(n):
        choice = draw(st.sampled_from(["emit", "emit", "emit", "prune", "text"]))
        if choice == "emit":
            turns.append(call("emit", size=draw(st.integers(0, 900))))
        elif choice == "prune":
            turns.append(call("prune", ids=draw(st.lists(st.integers(1, 12), max_size=4))))
        else:
            turns.append("summary " * draw(st.integers(0, 700)))
    return turns


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=episodes(),
    strategy=st.sampled_from(["summary", "drop_oldest", "mask", "none"]),
    summarize_at=st.integers(700, 2500),
    hard_extra=st.integers(0, 800),
    keep_recent=st.integers(0, 3),
    max_summaries=st.integers(0, 4),
    max_new_tokens=st.integers(16, 400),
)
def test_no_prompt_ever_exceeds_the_window(ws, turns, strategy, summarize_at, hard_extra, keep_recent, max_summaries, max_new_tokens):
    policy = ScriptedPolicy(turns, context_window=3000)
    config = RecapConfig(
        agent=AgentConfig(max_steps=40, max_new_tokens=max_new_tokens, summary_max_new_tokens=max_new_tokens),
        context=ContextConfig(strategy=strategy, summarize_at=summarize_at, hard_limit=summarize_at + hard_extra,
                              keep_recent=keep_recent, max_summaries=max_summaries),
    )
    agent = Agent(policy=policy, workspace=ws, tools=TOOLS, config=config)
    result = agent.run("emit words")
    limit = 3000 - max_new_tokens
    for c in policy.calls:
        assert c.prompt_tokens <= limit
        assert c.prompt_tokens + c.max_new_tokens <= 3000
        assert c.prompt_tokens == policy.count_tokens(c.messages, c.tools or None)
    # the episode only ends for a reason the loop owns, never because a prompt overflowed
    assert result.stop_reason in {"error", "loop_guard", "max_steps", "context_exhausted"}
    if result.stop_reason == "error":
        assert "script exhausted" in result.message
    summaries = [e for e in result.events if isinstance(e, Summary)]
    assert len(summaries) <= max_summaries


def test_between_summaries_each_prompt_extends_the_last_prompt_and_completion(ws):
    """What KV-cache reuse relies on: the context is append-only until a summary or a prune."""
    small = [call("emit", size=5, word=f"v{i}") for i in range(3)]
    result, policy, _ = run(ws, emits(3) + ["S"] + small + [call("finish", message="done")], summarize_at=prompt_before_turn(ws, 3) - 1, keep_recent=1)
    turns = [e for e in result.events if isinstance(e, PolicyTurn)]
    assert [t.kind for t in turns] == ["action"] * 3 + ["summary"] + ["action"] * 4
    for before, after in zip(turns, turns[1:]):
        seen = before.prompt_ids + before.completion_ids
        extends = after.prompt_ids[: len(seen)] == seen
        assert extends == (before.kind == after.kind == "action" and before.segment == after.segment), (before.turn, after.turn)
