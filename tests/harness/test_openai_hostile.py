"""OpenAIPolicy against servers that misbehave the way real ones do (issue 12), each a fake
OpenAI-compatible server on 127.0.0.1: window discovery, token counts, the window guarantee,
tool-call formats of local models, llama.cpp's tool_choice, and server failures."""

from __future__ import annotations

import json
import logging
import time

import pytest
from fake_openai import FakeServer, reply, stream_chunks

from harness.agent import Agent
from harness.config import ContextConfig, RecapConfig
from harness.context import ContextManager
from harness.errors import ConfigError, PolicyError
from harness.policies import load_policy
from harness.policies.openai_policy import DEFAULT_CONTEXT_WINDOW, OpenAIPolicy, OpenAIPolicyConfig
from harness.policies.token_count import estimate_text_tokens
from harness.session import Observation, PolicyTurn, Summary
from test_agent_support import TOOLS

SPECS = TOOLS.specs()
MESSAGES = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Read app.py"}]


@pytest.fixture
def server():
    srv = FakeServer()
    yield srv
    srv.close()


def policy_for(server: FakeServer | str, **options) -> OpenAIPolicy:
    url = server if isinstance(server, str) else server.url
    return OpenAIPolicy(config=OpenAIPolicyConfig(model="m", base_url=url, max_retries=0, timeout_s=10, **options))


def closed_port_url() -> str:
    """A URL where nothing listens."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@pytest.fixture(scope="module")
def real_count():
    """The real prompt length under the embedded model's tokenizer and chat template."""
    from harness.policies.chat_format import ChatFormat
    from harness.policies.loading import embedded_tokenizer

    chat = ChatFormat(embedded_tokenizer())
    return lambda messages, tools: len(chat.encode(messages, tools))


# -- fault 1: the context window ---------------------------------------------------------------

@pytest.mark.parametrize("route, body, window, source", [
    ("GET /v1/models", {"object": "list", "data": [{"id": "other", "max_model_len": 4096},
                                                   {"id": "m", "object": "model", "max_model_len": 131072}]},
     131072, "/v1/models max_model_len"),
    ("GET /props", {"default_generation_settings": {"n_ctx": 2048}}, 2048, "llama.cpp /props n_ctx"),
    ("POST /api/show", {"parameters": "temperature 0.2\nnum_ctx 16384", "model_info": {"qwen2.context_length": 32768}},
     16384, "ollama /api/show num_ctx"),
    ("POST /api/show", {"model_info": {"qwen2.context_length": 32768}}, 32768, "ollama /api/show context_length"),
])
def test_the_window_comes_from_the_server(server, caplog, route, body, window, source):
    server.routes[route] = (200, body)
    policy = policy_for(server)
    assert (policy.context_window, policy.window_source) == (window, source)
    assert ("smaller num_ctx" in caplog.text) == (source == "ollama /api/show context_length")


def test_window_from_the_flag_else_a_default_with_one_warning(server, caplog):
    server.routes["GET /v1/models"] = (200, {"data": [{"id": "m"}]})  # no window in it
    with caplog.at_level(logging.WARNING):
        policy = policy_for(server)
    assert (policy.context_window, policy.window_source) == (DEFAULT_CONTEXT_WINDOW, "default")
    assert caplog.text.count("does not report its context window") == 1
    assert load_policy(f"openai:m@{server.url}", context_window=65536).context_window == 65536

    server.routes["GET /props"] = (200, {"n_ctx": 4096})
    caplog.clear()
    policy = policy_for(server, context_window=65536)  # the user's window is above the server's
    assert policy.context_window == 4096 and "above the server's window of 4096" in caplog.text
    assert policy_for(server, context_window=3000).context_window == 3000


def test_a_budget_above_the_window_is_announced_not_silently_capped(server, caplog):
    server.routes["GET /v1/models"] = (200, {"data": [{"id": "m", "max_model_len": 131072}]})
    policy = policy_for(server)
    manager = ContextManager(policy=policy, config=ContextConfig(summarize_at=100000, hard_limit=120000),
                             tool_specs=SPECS, reserve_tokens=512)
    assert manager.summarize_at_tokens == 100000 and "summarize_at" not in caplog.text
    small = ContextManager(policy=policy_for(closed_port_url()), config=ContextConfig(summarize_at=100000, hard_limit=120000),
                           tool_specs=SPECS, reserve_tokens=512)
    assert small.summarize_at_tokens == DEFAULT_CONTEXT_WINDOW - 512
    assert "context.summarize_at=100000 is 100000 tokens, above what fits the 8192-token window" in caplog.text


# -- fault 2: token counting and the window guarantee -----------------------------------------

def numbered(lines: int) -> str:
    return "\n".join(f"{i:>6}\tvalue_{i} = compute({i}, {i * 7 % 13})  # {i * 31}" for i in range(1, lines + 1))


def test_the_estimate_errs_high_on_line_numbered_reads(real_count):
    text = numbered(200)
    messages = MESSAGES + [{"role": "user", "content": text}]
    estimate = OpenAIPolicy(config=OpenAIPolicyConfig(model="m", base_url="http://127.0.0.1:9/v1", probe=False))
    assert estimate.counter.kind == "estimate"
    assert estimate.count_tokens(messages, SPECS) >= real_count(messages, SPECS)
    assert len(text.encode()) / 3 < real_count([{"role": "user", "content": text}], None)  # what bytes/3 missed
    assert estimate_text_tokens(text) >= real_count([{"role": "user", "content": text}], None) - 10


def test_calibration_from_usage_only_raises_counts(server, real_count):
    policy = policy_for(server)
    before = policy.count_tokens(MESSAGES, SPECS)
    server.replies = [(200, reply({"content": "ok"}, prompt_tokens=3 * before)), (200, reply({"content": "ok"}, prompt_tokens=1))]
    policy.generate(MESSAGES, SPECS, max_new_tokens=8)
    raised = policy.count_tokens(MESSAGES, SPECS)
    assert raised >= 3 * before and policy.count_epoch == 1
    policy.generate(MESSAGES, SPECS, max_new_tokens=8)  # a lower real count never lowers the scale
    assert policy.count_tokens(MESSAGES, SPECS) == raised


def test_the_servers_tokenizer_is_used_when_it_has_one(server):
    seen = []

    def tokenize(body):
        seen.append(body["prompt"])
        return {"count": len(body["prompt"].split()) * 2, "max_model_len": 4096, "tokens": []}

    server.routes["POST /tokenize"] = (200, tokenize)
    policy = policy_for(server)
    assert policy.counter.kind == "server"
    words = "alpha beta gamma delta"
    n = policy.count_tokens([{"role": "user", "content": words}], None)
    assert words in seen and n >= 8


def test_no_prompt_passes_the_window_of_a_server_that_rejects_longer_ones(server, real_count, workspace_of, make_repo):
    """The guarantee with a remote model: the server counts with the real tokenizer and answers
    HTTP 400 above its window; recap only has its estimate, calibrated by `usage.prompt_tokens`."""
    repo = make_repo({f"f{i}.py": numbered(60) + "\n" for i in range(8)})
    server.routes["GET /v1/models"] = (200, {"data": [{"id": "m", "max_model_len": 4096}]})
    server.window, server.count = 4096, real_count
    state = {"read": 0}

    def respond(body):
        if not body.get("tools"):
            return 200, reply({"content": "Summary: read files f0..f%d; nothing changed yet." % (state["read"] - 1)})
        if state["read"] >= 8:
            return 200, reply({"content": None, "tool_calls": [{"id": "fin", "type": "function", "function": {
                "name": "finish", "arguments": json.dumps({"message": "done"})}}]})
        state["read"] += 1
        path = f"f{state['read'] - 1}.py"
        return 200, reply({"content": json.dumps({"name": "read_file", "arguments": {"path": path}})})  # bare JSON

    server.respond = respond
    policy = policy_for(server)
    assert policy.context_window == 4096
    config = RecapConfig().with_overrides(max_new_tokens=256, summary_max_new_tokens=256)
    result = Agent(policy=policy, workspace=workspace_of(repo), tools=TOOLS, config=config).run("read every file")
    assert server.rejected == [], f"prompts over the window reached the server: {server.rejected}"
    assert result.stop_reason == "finish", result.message
    assert any(isinstance(e, Summary) for e in result.events)  # the window was reached and managed
    reads = [e for e in result.events if isinstance(e, Observation) and e.name == "read_file" and not e.is_error]
    assert len(reads) == 8
    formats = {e.tool_call_format for e in result.events if isinstance(e, PolicyTurn) and e.kind == "action"}
    assert formats == {"bare_json", "structured"}


# -- fault 3: tool-call formats of local models ------------------------------------------------

@pytest.mark.parametrize("content, fmt", [
    ('{"name": "read_file", "arguments": {"path": "app.py"}}', "bare_json"),
    ("<function=read_file><parameter=path>app.py</parameter></function>", "xml_function"),
    ("<tool_call>\n<function=read_file>\n<parameter=path>\napp.py\n</parameter>\n</function>\n</tool_call>", "xml_function"),
    ('<tool_call>\n{"name": "read_file", "arguments": {"path": "app.py"}}\n</tool_call>', "hermes"),
    ('[TOOL_CALLS][{"name": "read_file", "arguments": {"path": "app.py"}}]', "mistral"),
    ('<|python_tag|>{"name": "read_file", "parameters": {"path": "app.py"}}', "llama3_json"),
    ('[read_file(path="app.py")]', "pythonic"),
    ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>read_file\n```json\n{\"path\": \"app.py\"}\n```"
     "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "deepseek"),
    ('<function=read_file>{"path": "app.py"}</function>', "xml_function"),
    ('[TOOL_CALLS]read_file[ARGS]{"path": "app.py"}', "mistral"),
    ("```json\n{\"name\": \"read_file\", \"arguments\": {\"path\": \"app.py\"}}\n```", "bare_json"),
])
def test_text_tool_calls_in_the_formats_local_models_write(server, content, fmt):
    server.replies = [(200, reply({"content": content}))]
    c = policy_for(server).generate(MESSAGES, SPECS, max_new_tokens=64)
    assert [(t.name, json.loads(t.arguments)) for t in c.tool_calls] == [("read_file", {"path": "app.py"})]
    assert c.parse_errors == () and c.tool_call_format == fmt


def test_hostile_text_calls_are_data(server):
    server.replies = [(200, reply({"content": '[read_file(path=__import__("os").system("touch /tmp/x"))]'})),
                      (200, reply({"content": "<function=read_file>{not json</function>"})),
                      (200, reply({"content": 'I would call {"name": "read_file"} but I am done.'}))]
    policy = policy_for(server)
    first = policy.generate(MESSAGES, SPECS, max_new_tokens=64)
    assert first.tool_calls == () and "literal values" in first.parse_errors[0]
    second = policy.generate(MESSAGES, SPECS, max_new_tokens=64)
    assert second.tool_calls == () and "not valid JSON" in second.parse_errors[0]
    prose = policy.generate(MESSAGES, SPECS, max_new_tokens=64)
    assert prose.tool_calls == () and prose.parse_errors == () and prose.tool_call_format is None


# -- fault 6: llama.cpp needs tool_choice; fault 7: server failures ----------------------------

def test_tools_are_sent_with_tool_choice_and_a_400_on_tools_falls_back_to_text(server, caplog):
    server.replies = [(400, {"error": {"message": "tools are not supported by this model", "type": "invalid_request_error"}}),
                      (200, reply({"content": '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'})),
                      (200, reply({"content": "prose"}))]
    policy = policy_for(server)
    with caplog.at_level(logging.WARNING):
        c = policy.generate(MESSAGES + [{"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "read_file", "arguments": {"path": "b.py"}}}]},
                                        {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "B"}],
                            SPECS, max_new_tokens=64)
    first, second = server.requests[0], server.requests[1]
    assert first["tool_choice"] == "auto" and first["tools"] == SPECS
    assert "tools" not in second and "tool_choice" not in second and "<tools>" in second["messages"][0]["content"]
    assert all("tool_calls" not in m and m["role"] != "tool" for m in second["messages"])
    assert "<tool_response>\nB\n</tool_response>" in second["messages"][-1]["content"]
    assert [t.name for t in c.tool_calls] == ["read_file"] and policy.text_tools
    assert "refused the tools" in caplog.text
    policy.generate(MESSAGES, SPECS, max_new_tokens=8)
    assert "tools" not in server.requests[2]  # for the rest of the policy's life


def test_an_html_page_is_a_clear_error(server):
    server.replies = [(200, "<!DOCTYPE html><html><body>Welcome to nginx!</body></html>")]
    with pytest.raises(PolicyError, match=r"HTML page that is not a chat completion.*nginx.*/v1"):
        policy_for(server).generate(MESSAGES, SPECS, max_new_tokens=8)


def test_a_hung_server_fails_within_the_configured_timeout_and_says_so(server):
    policy = OpenAIPolicy(config=OpenAIPolicyConfig(model="m", base_url=server.url, timeout_s=1, max_retries=1))
    server.hang_s = 30
    start = time.monotonic()
    with pytest.raises(PolicyError, match=r"accepted the connection but sent no reply within 1 s \(2 attempts\)"):
        policy.generate(MESSAGES, SPECS, max_new_tokens=8)
    assert time.monotonic() - start < 10 and len(server.requests) == 2


def test_an_over_long_prompt_rejected_by_the_server_is_explained_and_recalibrates(server, real_count):
    server.window, server.count = 300, real_count
    policy = policy_for(server, context_window=300)
    big = MESSAGES + [{"role": "user", "content": "word " * 400}]
    with pytest.raises(PolicyError, match="did not fit the server's window of 300 tokens") as err:
        policy.generate(big, None, max_new_tokens=8)
    assert "Traceback" not in str(err.value)
    assert policy.count_tokens(big, None) >= real_count(big, None)


def test_urls_without_a_scheme_are_rejected_before_anything_runs(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match=r"needs a scheme.*did you mean http://localhost:8000/v1"):
        load_policy("openai:m@localhost:8000/v1")
    with pytest.raises(ConfigError, match="needs a scheme"):
        load_policy("openai:m", endpoint="127.0.0.1:8000")


def test_a_server_that_is_down_is_a_clear_error():
    with pytest.raises(PolicyError, match="cannot reach"):
        policy_for(closed_port_url()).generate(MESSAGES, SPECS, max_new_tokens=8)


def test_streamed_replies_reach_the_callback_as_they_come(server):
    text = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>'
    server.replies = [(200, stream_chunks(text, pieces=4, prompt_tokens=77))]
    pieces: list[str] = []
    policy = policy_for(server)
    with policy.streaming(pieces.append):
        c = policy.generate(MESSAGES, SPECS, max_new_tokens=64)
    assert len(pieces) >= 4 and "".join(pieces) == text and server.requests[0]["stream"] is True
    assert [t.name for t in c.tool_calls] == ["read_file"] and c.prompt_tokens == 77
    server.replies = [(200, reply({"content": "not streamed"}))]
    assert policy.generate(MESSAGES, SPECS, max_new_tokens=8).text == "not streamed" and "stream" not in server.requests[1]
