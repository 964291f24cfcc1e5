"""The real embedded model (SmolLM2-135M, grammar-constrained, greedy) crosses the summary trigger
and keeps working afterwards.

The trigger is not a fixed number: what the model does after its first action, and how long an
observation that holds a temp path is in tokens, change from run to run and from checkout to
checkout. So a one-step probe episode first measures the first prompt and how much the first action
and its observation add; the trigger is then set just below the second prompt. The first prompt
holds no path (system prompt, tool specs, task), so greedy decoding repeats the first action, and
the second prompt must cross the trigger whatever the model does next."""

from __future__ import annotations

import pytest

from harness.agent import Agent
from harness.config import AgentConfig, ContextConfig, RecapConfig
from harness.session import PolicyTurn, Summary
from test_agent_support import TOOLS

TASK = "Read notes.txt, then print 60 words with emit, then set x = 2 in app.py."
WINDOW_TOKENS = 1400
PATH_SLACK_TOKENS = 12
"""The probe's and the real run's temp paths differ in 8 random characters: at most that many
tokens apart, with room to spare."""


def _agent(policy, workspace, *, max_steps: int, context: ContextConfig) -> Agent:
    config = RecapConfig(
        agent=AgentConfig(max_steps=max_steps, loop_guard_repeats=max_steps + 1, max_new_tokens=48,
                          summary_max_new_tokens=64),
        context=context,
    )
    return Agent(policy=policy, workspace=workspace, tools=TOOLS, config=config)


def _actions(events) -> list[PolicyTurn]:
    return [e for e in events if isinstance(e, PolicyTurn) and e.kind == "action"]


@pytest.mark.embedded
def test_embedded_model_summarizes_and_keeps_going(make_repo):
    from harness.policies import load_policy
    from shadow_backend.local import LocalBackend

    policy = load_policy("embedded", context_window=WINDOW_TOKENS, temperature=0.0)
    repo = make_repo({"notes.txt": "alpha beta gamma\n" * 40, "app.py": "x = 1\n"})

    with LocalBackend.create(repo) as ws:  # probe: one action, no context management
        probe = _agent(policy, ws, max_steps=1, context=ContextConfig(summarize_at=0.9, hard_limit=0.95))
        probed = probe.run(TASK)
    (first_action,) = _actions(probed.events)
    assert probed.stop_reason == "max_steps", f"the first action ended the episode: {first_action.text!r}"
    first_prompt = first_action.prompt_tokens
    second_prompt = probe.context.tokens(probed.events)
    summarize_at = second_prompt - PATH_SLACK_TOKENS
    assert summarize_at > first_prompt + 2 * PATH_SLACK_TOKENS, (first_prompt, second_prompt)

    context = ContextConfig(summarize_at=summarize_at, hard_limit=WINDOW_TOKENS - 100, keep_recent=1, max_summaries=2)
    with LocalBackend.create(repo) as ws:
        agent = _agent(policy, ws, max_steps=3, context=context)
        result = agent.run(TASK)

    turns = [e for e in result.events if isinstance(e, PolicyTurn)]
    summaries = [e for e in result.events if isinstance(e, Summary)]
    actions = _actions(result.events)
    assert actions[0].prompt_tokens == first_prompt and actions[0].text == first_action.text  # greedy, path-free
    assert summaries, (f"no summary: trigger {summarize_at} tokens, prompts {[t.prompt_tokens for t in turns]}, "
                       f"stop {result.stop_reason}: {result.message}")
    first = summaries[0]
    assert first.seq > actions[0].seq and first.tokens_before > summarize_at
    assert first.tokens_after < first.tokens_before and first.text
    after = [t for t in actions if t.seq > first.seq]
    assert after, f"the agent did not keep going after its summary: {result.stop_reason}: {result.message}"
    assert after[0].segment == 1 and after[0].constrained
    limit = policy.context_window - agent.config.reserve_tokens
    assert all(t.prompt_tokens <= limit for t in turns)
    # exact token ids recorded for training, summary turn included
    summary_turn = next(t for t in turns if t.kind == "summary")
    assert summary_turn.completion_ids and len(summary_turn.logprobs) == len(summary_turn.completion_ids)
