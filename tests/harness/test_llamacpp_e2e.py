"""recap against the REAL llama.cpp server (llama-cpp-python, chatml-function-calling) serving the
embedded SmolLM2 GGUF: window discovery at two --n_ctx values, structured tool calls (which need
`tool_choice`), server-side token counts, and an agent run that summarizes before the window.

Marked `llamacpp`: `scripts/services.sh` installs the server; the tests fail (not skip) when it is
missing, so that CI cannot pass them silently."""

from __future__ import annotations

import json

import pytest
from llamacpp_server import LlamaServer

from harness.agent import Agent
from harness.config import RecapConfig
from harness.policies import load_policy
from harness.session import PolicyTurn, Summary
from harness.tools import default_registry

pytestmark = pytest.mark.llamacpp

SPECS = default_registry().specs()
MESSAGES = [{"role": "system", "content": "You are a coding agent. Act only through the tools."},
            {"role": "user", "content": "Read the file README.md with the read_file tool."}]


@pytest.fixture(scope="module", params=[2048, 4096])
def server(request):
    with LlamaServer(n_ctx=request.param) as srv:
        yield srv


def test_window_and_tokenizer_are_discovered(server):
    policy = load_policy(f"openai:{server.model}@{server.url}", temperature=0.0)
    assert policy.context_window == server.n_ctx
    assert policy.window_source == "llama-cpp-python overflow probe" and policy.server.kind == "llama-cpp-python"
    assert policy.counter.kind == "server"


def test_tool_calls_come_back_structured_and_counts_err_high(server):
    policy = load_policy(f"openai:{server.model}@{server.url}", temperature=0.0)
    counted = policy.count_tokens(MESSAGES, SPECS)
    c = policy.generate(MESSAGES, SPECS, max_new_tokens=96)
    assert c.tool_calls and c.tool_call_format == "structured", c.text
    assert all(isinstance(json.loads(t.arguments), dict) for t in c.tool_calls)
    assert counted >= c.prompt_tokens > 0  # the server's usage.prompt_tokens


@pytest.mark.xfail(strict=False, reason="issue 12, open: with the portable llama.cpp build this run failed once and "
                   "timed out once on a loaded machine; the cause is not found yet (tool calls and window discovery "
                   "against the same server pass)")
def test_an_agent_run_summarizes_before_the_window(server, workspace_of, make_repo):
    if server.n_ctx != 4096:
        pytest.skip("one agent run is enough; at 2048 the ten tool specs alone take most of the window")
    files = {f"notes_{i}.md": "".join(f"{j:>4}  line {j} of note {i}\n" for j in range(40)) for i in range(6)}
    files["README.md"] = "Read every notes_*.md file, then finish.\n" + "".join(f"- notes_{i}.md\n" for i in range(6))
    policy = load_policy(f"openai:{server.model}@{server.url}", temperature=0.7, seed=3)
    # a budget a little above the first prompt (about 1,450 tokens: the system prompt and the ten
    # tool specs), so that a summary must come within a few steps whatever the small model reads
    config = RecapConfig().with_overrides(max_steps=10, max_new_tokens=128, summary_max_new_tokens=128,
                                          loop_guard_repeats=50, summarize_at=1560)
    result = Agent(policy=policy, workspace=workspace_of(make_repo(files)), config=config).run(
        "Read README.md and every notes file it lists, then finish.")
    turns = [e for e in result.events if isinstance(e, PolicyTurn)]
    assert result.stop_reason != "error", result.message
    assert any(isinstance(e, Summary) for e in result.events), [t.prompt_tokens for t in turns]
    assert all(t.prompt_tokens + t.completion_tokens <= server.n_ctx for t in turns)
