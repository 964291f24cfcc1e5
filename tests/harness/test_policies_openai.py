"""OpenAIPolicy against a real OpenAI-compatible HTTP server on 127.0.0.1 (http.server in a thread)."""

from __future__ import annotations

import json
import socket

import pytest
from fake_openai import FakeServer, reply

from harness.errors import ConfigError, PolicyError
from harness.policies import load_policy
from harness.policies.openai_policy import OpenAIPolicy, OpenAIPolicyConfig
from harness.types import Policy, assistant_message, tool_message

TOOLS = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}]
MESSAGES = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Read setup.py"}]


@pytest.fixture
def server():
    srv = FakeServer()
    yield srv
    srv.close()


def test_structured_tool_calls_round_trip(server):
    call = {"id": "call_abc", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "setup.py"}'}}
    server.replies = [(200, reply({"content": None, "tool_calls": [call]}, finish="tool_calls", logprobs=[-0.5, -0.25])),
                      (200, reply({"content": "It is a setup script."}))]
    policy = load_policy(f"openai:my-model@{server.url}", api_key="sk-test", temperature=0.2, seed=7)
    assert isinstance(policy, Policy) and policy.spec == f"openai:my-model@{server.url}"
    c = policy.generate(MESSAGES, TOOLS, max_new_tokens=64)
    assert [(t.id, t.name, json.loads(t.arguments)) for t in c.tool_calls] == [("call_abc", "read_file", {"path": "setup.py"})]
    assert c.logprobs == (-0.5, -0.25) and c.finish_reason == "tool_calls"
    assert (c.prompt_tokens, c.completion_tokens, c.completion_ids) == (42, 2, None)
    sent = server.requests[0]
    assert sent["path"] == "/v1/chat/completions" and server.headers[0]["authorization"] == "Bearer sk-test"
    assert (sent["model"], sent["max_tokens"], sent["temperature"], sent["seed"]) == ("my-model", 64, 0.2, 7)
    assert sent["tools"] == TOOLS and sent["messages"] == MESSAGES and sent["logprobs"] is True
    assert sent["tool_choice"] == "auto"  # llama-cpp-python ignores tools without it

    history = MESSAGES + [assistant_message(c.text, c.tool_calls), tool_message("call_abc", "read_file", "print(1)")]
    second = policy.generate(history, TOOLS, max_new_tokens=64)
    assert second.text == "It is a setup script." and second.tool_calls == () and second.logprobs is None
    wire = server.requests[1]["messages"]
    assert wire[2]["tool_calls"][0]["function"] == {"name": "read_file", "arguments": '{"path": "setup.py"}'}
    assert wire[3] == {"role": "tool", "tool_call_id": "call_abc", "content": "print(1)"}


def test_text_format_calls_in_content_are_parsed_and_summaries_get_no_tools(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    text = 'Reading.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n<tool_call>{bad'
    server.replies = [(200, reply({"content": text})), (200, reply({"content": "Summary: read a.py."}))]
    policy = load_policy("openai:m")
    c = policy.generate(MESSAGES, TOOLS, max_new_tokens=32)
    assert [(t.name, json.loads(t.arguments)) for t in c.tool_calls] == [("read_file", {"path": "a.py"})]
    assert len(c.parse_errors) == 1 and "not valid JSON" in c.parse_errors[0]
    assert server.headers[0]["authorization"] == "Bearer EMPTY"
    s = policy.generate(MESSAGES, TOOLS, max_new_tokens=32, kind="summary")
    assert "tools" not in server.requests[1] and s.tool_calls == ()


def test_http_and_connection_errors_become_policy_errors(server):
    server.replies = [(500, {"error": {"message": "model crashed", "type": "server_error"}})]
    policy = OpenAIPolicy(config=OpenAIPolicyConfig(model="m", base_url=server.url, max_retries=0))
    with pytest.raises(PolicyError, match="HTTP 500.*model crashed"):
        policy.generate(MESSAGES, None, max_new_tokens=8)
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dead = OpenAIPolicy(config=OpenAIPolicyConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout_s=5))
    with pytest.raises(PolicyError, match=f"cannot reach http://127.0.0.1:{port}/v1"):
        dead.generate(MESSAGES, None, max_new_tokens=8)


def test_approximate_token_count_overestimates_and_grows(server):
    from harness.policies.loading import embedded_gguf, embedded_tokenizer
    from harness.policies.chat_format import ChatFormat

    policy = OpenAIPolicy(config=OpenAIPolicyConfig(model="m", base_url=server.url))
    exact = ChatFormat(embedded_tokenizer())
    longer = MESSAGES + [{"role": "user", "content": "def f(x):\n    return x + 1\n" * 20}]
    for msgs, tools in ((MESSAGES, None), (MESSAGES, TOOLS), (longer, TOOLS)):
        assert policy.count_tokens(msgs, tools) >= len(exact.encode(msgs, tools))
    assert policy.count_tokens(longer, TOOLS) > policy.count_tokens(MESSAGES, TOOLS) > policy.count_tokens(MESSAGES, None)
    folder, name = embedded_gguf()
    exact_policy = OpenAIPolicy(config=OpenAIPolicyConfig(model="m", base_url=server.url, tokenizer_path=f"{folder}/{name}"))
    assert exact_policy.count_tokens(longer, TOOLS) == len(exact.encode(longer, TOOLS))


def test_config_errors(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        load_policy("openai:gpt-4o-mini")
    with pytest.raises(ConfigError, match="model name"):
        load_policy("openai:@http://127.0.0.1:1/v1")
