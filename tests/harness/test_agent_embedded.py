"""The real embedded model (SmolLM2-135M, grammar-constrained) crosses the summary trigger at a
small budget and keeps working afterwards."""

from __future__ import annotations

import pytest

from harness.agent import Agent
from harness.config import AgentConfig, ContextConfig, RecapConfig
from harness.session import PolicyTurn, Summary
from test_agent_support import TOOLS


@pytest.mark.embedded
def test_embedded_model_summarizes_and_keeps_going(make_repo):
    from harness.policies import load_policy
    from shadow_backend.local import LocalBackend

    policy = load_policy("embedded", context_window=1400, temperature=0.0)
    ws = LocalBackend.create(make_repo({"notes.txt": "alpha beta gamma\n" * 40, "app.py": "x = 1\n"}))
    config = RecapConfig(
        agent=AgentConfig(max_steps=6, max_new_tokens=48, summary_max_new_tokens=64),
        context=ContextConfig(summarize_at=900, hard_limit=1300, keep_recent=1, max_summaries=2),
    )
    agent = Agent(policy=policy, workspace=ws, tools=TOOLS, config=config)
    try:
        result = agent.run("Read notes.txt, then print 60 words with emit, then set x = 2 in app.py.")
    finally:
        ws.close()

    turns = [e for e in result.events if isinstance(e, PolicyTurn)]
    summaries = [e for e in result.events if isinstance(e, Summary)]
    assert result.stop_reason in {"finish", "max_steps", "loop_guard"}, result.message
    assert summaries, "the episode never crossed the summary trigger"
    first = summaries[0]
    assert first.tokens_after < first.tokens_before and first.text
    after = [t for t in turns if t.kind == "action" and t.seq > first.seq]
    assert after, "the agent did not keep going after its summary"
    assert after[0].segment == 1 and after[0].constrained
    limit = policy.context_window - config.reserve_tokens
    assert all(t.prompt_tokens <= limit for t in turns)
    # exact token ids recorded for training, summary turn included
    summary_turn = next(t for t in turns if t.kind == "summary")
    assert summary_turn.completion_ids and len(summary_turn.logprobs) == len(summary_turn.completion_ids)
