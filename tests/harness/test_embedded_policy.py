"""The real embedded SmolLM2-135M-Instruct, grammar-constrained: it calls an offered tool, well
formed, and the next turn reuses the KV cache. Loaded once for the module (~20 s)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict, Field

from harness.policies import load_policy
from harness.tools.base import Tool, ToolResult
from harness.toolcall import parse_tool_calls
from harness.types import assistant_message, tool_message

pytestmark = pytest.mark.embedded


class ReadFileParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(description="Workspace-relative path of the file to read.")


class FinishParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str = Field(description="What was done.")


def _unused(params: BaseModel, workspace: object) -> ToolResult:
    raise AssertionError("tools are not run in this test")


TOOLS = {
    "read_file": Tool("read_file", "Read a text file of the workspace.", ReadFileParams, _unused),
    "finish": Tool("finish", "End the task and report what was done.", FinishParams, _unused),
}
SPECS = [t.spec() for t in TOOLS.values()]
MESSAGES = [
    {"role": "system", "content": "You are a coding agent. You act only by calling tools."},
    {"role": "user", "content": "What does setup.py contain? Read the file setup.py."},
]


@pytest.fixture(scope="module")
def policy():
    return load_policy("embedded", seed=0)


def test_embedded_constrained_calls_over_two_turns_with_kv_reuse(policy):
    assert policy.config.constrain and policy.context_window == 8192
    first = policy.generate(MESSAGES, SPECS, max_new_tokens=96)
    assert first.constrained and first.finish_reason == "stop"
    _, calls, errors = parse_tool_calls(first.text, turn=0)
    assert not errors and len(calls) == 1
    assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in first.tool_calls]
    call = calls[0]
    assert call.name in TOOLS
    TOOLS[call.name].params.model_validate_json(call.arguments)
    assert len(first.completion_ids) == len(first.logprobs) == first.completion_tokens
    assert all(lp <= 0 for lp in first.logprobs)
    assert first.encoded_tokens == first.prompt_tokens

    history = MESSAGES + [assistant_message(first.text, first.tool_calls),
                          tool_message(call.id, call.name, "from setuptools import setup\nsetup(name='demo')")]
    second = policy.generate(history, SPECS, max_new_tokens=96)
    assert len(second.tool_calls) == 1 and second.tool_calls[0].name in TOOLS and not second.parse_errors
    # the whole first prompt is reused; what is encoded is the new turn plus, at most, the part of
    # the first completion whose re-rendered text tokenizes differently from the sampled tokens
    new_tokens = second.prompt_tokens - first.prompt_tokens - first.completion_tokens
    assert new_tokens <= second.encoded_tokens <= new_tokens + first.completion_tokens
