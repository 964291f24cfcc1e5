"""Long sessions as they go in real use (issue 13; issue 12 fault 4), with the scripted policy (and
a real OpenAI-compatible HTTP server for the empty-summary case) on real local workspaces:
observations cut to a token budget, project rules pinned, unusable summaries never accepted,
scripts that say their window."""

from __future__ import annotations

import io
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from harness.agent import Agent, usable_summary
from harness.config import AgentConfig, ContextConfig, RecapConfig
from harness.policies.scripted import ScriptedPolicy, tokenize
from harness.prompts import SUMMARY_RETRY
from harness.render import render_session
from harness.rules import MAX_RULES_CHARS
from harness.session import Observation, ProjectRules, SessionWriter, Summary, read_session
from harness.tools import default_registry
from harness.truncate import MIN_TOKENS, truncate_tokens
from test_agent_support import TOOLS, call

BIG = "#" * 8000 + "\nLAST-LINE-ERROR\n"


@pytest.fixture
def local(make_repo):
    """`local(files)`: a local workspace of a new repository holding `files`."""
    from shadow_backend.local import LocalBackend

    opened = []

    def make(files, **kwargs):
        opened.append(LocalBackend.create(make_repo(files, **kwargs)))
        return opened[-1]

    yield make
    for ws in opened:
        ws.close()


def run(ws, turns, *, window=8192, tools=None, config=None, writes_summaries=True, task="fix it", log=None):
    policy = ScriptedPolicy(turns, context_window=window, writes_summaries=writes_summaries)
    agent = Agent(policy=policy, workspace=ws, tools=tools or default_registry(), config=config or RecapConfig(), log=log)
    return agent.run(task), policy


def system_of(c):
    return c.messages[0]["content"]


# --- fault 2: an observation bigger than the window --------------------------------------------


def test_a_huge_observation_is_cut_to_tokens_and_its_last_line_reaches_the_model(local):
    ws = local({"build.log": BIG})
    result, policy = run(ws, [call("run_command", command="cat build.log"), call("finish", message="seen")], window=4096,
                         writes_summaries=False)
    assert result.stop_reason == "finish"
    obs = [o for o in result.events if isinstance(o, Observation)][0]
    assert "LAST-LINE-ERROR" in obs.output and "cut to fit the context" in obs.output
    assert obs.output.count("#") > 100  # the head is there too
    # the observation reached the model, in full-cut form, in the prompt after it
    after = policy.calls[1]
    assert any("LAST-LINE-ERROR" in (m.get("content") or "") for m in after.messages)
    assert all(c.prompt_tokens + c.max_new_tokens <= 4096 for c in policy.calls)


def test_a_file_read_cut_says_which_lines_to_read(local):
    from harness.tools.base import ToolRegistry
    from harness.tools.control import FINISH
    from harness.tools.fs import READ_FILE

    text = "".join(f"line {i} " + "word " * 30 + "\n" for i in range(1, 46))  # under the 8,000-char cap
    ws = local({"long.txt": text})
    result, policy = run(ws, [call("read_file", path="long.txt"), call("finish", message="ok")], window=2048,
                         tools=ToolRegistry([READ_FILE, FINISH]), writes_summaries=False)
    obs = [o for o in result.events if isinstance(o, Observation)][0]
    assert "read_file start_line/end_line" in obs.output
    import re

    first, last = map(int, re.search(r"lines (\d+)-(\d+) of this output", obs.output).groups())
    assert f"\t{'line'} {first - 1} " in obs.output and f"\tline {first} " not in obs.output
    assert f"\tline {last + 1} " in obs.output and "\tline 45 " in obs.output


def _bpe_like(text):
    """Roughly a byte-level BPE: ASCII words about 4 characters a token, ASCII symbols one token
    each, every UTF-8 byte of CJK and emoji a token."""
    ascii_word = sum(1 for ch in text if ch.isascii() and (ch.isalnum() or ch == " "))
    other_ascii = sum(1 for ch in text if ch.isascii() and not (ch.isalnum() or ch == " "))
    return -(-ascii_word // 4) + other_ascii + sum(len(ch.encode()) for ch in text if not ch.isascii())


COUNTERS = {
    "toy": lambda s: len(tokenize(s)),  # the scripted policy's tokenizer
    "bpe_like": _bpe_like,
    "utf8_bytes": lambda s: len(s.encode("utf-8")),  # every byte a token: the worst case
}
SAMPLES = {
    "cjk": "\n".join("错误：无法找到模块「数据处理」，请检查路径设置。" * 3 for _ in range(200)),
    "emoji": "\n".join("🚀✨🔥 build 🎉👍🏽👨‍👩‍👧 ok ✅" * 4 for _ in range(200)) + "\nLAST ❌",
    "symbols": "\n".join("{[(<>)]}=>::->!=&&||~^%$#@" * 4 for _ in range(300)) + "\nEND",
    "hashes": BIG,
}


@pytest.mark.parametrize("counter", sorted(COUNTERS))
@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_token_cut_keeps_head_and_tail_within_budget(counter, sample):
    count, text = COUNTERS[counter], SAMPLES[sample]
    for budget in (MIN_TOKENS if counter != "utf8_bytes" else 160, 300, 1000):
        out = truncate_tokens(text, max_tokens=budget, count=count)
        assert count(out) <= budget
        head, _, rest = out.partition("\n[... ")
        tail = rest.partition(" ...]\n")[2]
        assert text.startswith(head) and text.endswith(tail)
        assert "cut to fit the context" in out
    last_line = text.rsplit("\n", 1)[-1]
    visible = last_line if count(last_line) < 100 else last_line[-10:]  # a short last line is kept whole
    assert truncate_tokens(text, max_tokens=400, count=count).endswith(visible)


@settings(max_examples=80, deadline=None)
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=3000), budget=st.integers(160, 600),
       counter=st.sampled_from(sorted(COUNTERS)), keep=st.sampled_from(["both", "head"]))
def test_token_cut_property(text, budget, counter, keep):
    count = COUNTERS[counter]
    out = truncate_tokens(text, max_tokens=budget, count=count, keep=keep)
    assert count(out) <= budget
    if count(text) <= budget:
        assert out == text
    else:
        assert out.split("\n[... ")[0] == text[: len(out.split("\n[... ")[0])]


# --- fault 3: project rules pinned ---------------------------------------------------------------


RULE = "Never edit generated files; RULE-MARKER-42 says run make check before finish.\n"


def emits(n, size=300):
    return [call("emit", size=size, word=f"w{i}") for i in range(n)]


def test_rules_files_are_pinned_in_every_prompt_across_summaries(local):
    files = {
        "AGENTS.md": RULE,
        "CLAUDE.md": RULE,  # the same text: listed once
        ".cursor/rules/style.mdc": "---\ndescription: style\nalwaysApply: true\n---\nUse four spaces. CURSOR-ALWAYS\n",
        ".cursor/rules/db.mdc": "---\ndescription: database migrations\nglobs: db/**\nalwaysApply: false\n---\nDB-ONLY\n",
        "CONVENTIONS.md": "Type hints everywhere. AIDER-CONV\n",
    }
    ws = local(files)
    config = RecapConfig(agent=AgentConfig(max_new_tokens=64, summary_max_new_tokens=64),
                         context=ContextConfig(summarize_at=900, hard_limit=0.95, keep_recent=0))
    turns = emits(3) + ["summary one"] + emits(3) + ["summary two"] + [call("finish", message="done")]
    result, policy = run(ws, turns, window=2048, tools=TOOLS, config=config)
    assert result.stop_reason == "finish"
    assert sum(isinstance(e, Summary) for e in result.events) == 2
    rules = [e for e in result.events if isinstance(e, ProjectRules)]
    assert len(rules) == 1 and rules[0].seq == 1
    assert rules[0].files == ["AGENTS.md", "CONVENTIONS.md", ".cursor/rules/style.mdc"]
    assert rules[0].listed == [".cursor/rules/db.mdc"]
    assert rules[0].skipped == ["CLAUDE.md: same text as AGENTS.md"]
    for c in policy.calls:  # action and summary prompts alike
        system = system_of(c)
        assert "RULE-MARKER-42" in system and "CURSOR-ALWAYS" in system and "AIDER-CONV" in system
        assert "DB-ONLY" not in system and ".cursor/rules/db.mdc: database migrations" in system
    # summaries never carry the rules away: the post-summary prompt has them in the system message
    assert "RULE-MARKER-42" not in policy.calls[-1].messages[2]["content"]
    assert rules[0].tokens > 0


def test_rules_count_in_the_budget(local):
    """The same run with and without rules: the rules make every prompt longer by their tokens."""
    config = RecapConfig(context=ContextConfig(summarize_at=0.99, hard_limit=0.99))
    turns = [call("emit", size=5), call("finish", message="done")]
    _, bare = run(local({"x.txt": "x\n"}, name="bare"), turns, window=2048, tools=TOOLS, config=config)
    result, ruled = run(local({"x.txt": "x\n", "AGENTS.md": RULE}), turns, window=2048, tools=TOOLS, config=config)
    rules = [e for e in result.events if isinstance(e, ProjectRules)][0]
    extra = [r.prompt_tokens - b.prompt_tokens for b, r in zip(bare.calls, ruled.calls)]
    assert extra[0] == extra[1] > 0 and abs(extra[0] - rules.tokens) <= 2


def test_rules_are_capped_with_a_note(local):
    ws = local({"AGENTS.md": "rule: keep it short\n" + "filler words here\n" * 3000})
    result, policy = run(ws, [call("finish", message="done")], window=4096, tools=TOOLS)
    rules = [e for e in result.events if isinstance(e, ProjectRules)][0]
    assert rules.truncated and rules.chars > len(rules.text)
    assert "project rules cut to fit" in rules.text and "read AGENTS.md with read_file" in rules.text
    assert rules.text.startswith("Project rules from the repository (AGENTS.md)")
    assert rules.tokens <= RecapConfig().context.summarize_at * 4096 // 4
    assert "rule: keep it short" in system_of(policy.calls[0])
    # in a large window only the per-file character cap cuts, and says so
    result, policy = run(ws, [call("finish", message="done")], window=200_000, tools=TOOLS)
    rules = [e for e in result.events if isinstance(e, ProjectRules)][0]
    assert rules.truncated and f"[AGENTS.md cut at {MAX_RULES_CHARS:,} of 54,019 characters" in rules.text
    assert rules.text in system_of(policy.calls[0])


def test_a_rules_symlink_leading_out_of_the_workspace_is_skipped(local, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-TOKEN\n")
    ws = local({"README.md": "hi\n"})
    os.symlink(secret, os.path.join(ws.root, "AGENTS.md"))
    result, policy = run(ws, [call("finish", message="done")], tools=TOOLS)
    rules = [e for e in result.events if isinstance(e, ProjectRules)]
    assert rules and rules[0].files == [] and rules[0].skipped[0].startswith("AGENTS.md: ")
    assert "SECRET-TOKEN" not in json.dumps([c.messages for c in policy.calls])


def test_no_rules_files_no_event(local):
    result, policy = run(local({"README.md": "hi\n"}), [call("finish", message="done")], tools=TOOLS)
    assert not any(isinstance(e, ProjectRules) for e in result.events)
    assert "Project rules" not in system_of(policy.calls[0])


def test_session_show_prints_the_pinned_rules(local, tmp_path):
    ws = local({"AGENTS.md": RULE})
    log = SessionWriter(tmp_path / "s.jsonl")
    run(ws, [call("finish", message="done")], tools=TOOLS, log=log)
    log.close()
    session = read_session(tmp_path / "s.jsonl")
    console = Console(file=io.StringIO(), width=120, color_system=None)
    render_session(session, console)
    out = console.file.getvalue()
    assert "project rules" in out and "AGENTS.md" in out and "RULE-MARKER-42" in out


# --- fault 4 (and issue 12 fault 4): unusable summaries ------------------------------------------


SUMMARY_CONFIG = RecapConfig(agent=AgentConfig(max_new_tokens=64, summary_max_new_tokens=64),
                             context=ContextConfig(summarize_at=900, hard_limit=0.95, keep_recent=0))


@pytest.mark.parametrize("bad", ["", "   \n", '<tool_call>\n{"name": "emit", "arguments": {"size": 1}}\n</tool_call>', "<think>hmm</think>"])
def test_usable_summary_rejects_empty_and_markup_only(bad):
    assert usable_summary(bad) is None
    assert usable_summary("Goal: fix x. " + bad).startswith("Goal: fix x.")


def test_an_empty_summary_is_retried_once_with_the_plain_request(local):
    ws = local({"README.md": "hi\n"})
    turns = [call("emit", size=30, word="FACT-7")] + emits(1) + ["", "Goal: emit. Found FACT-7.", call("finish", message="done")]
    result, policy = run(ws, turns, window=2048, tools=TOOLS, config=SUMMARY_CONFIG)
    assert result.stop_reason == "finish"
    (summary,) = [e for e in result.events if isinstance(e, Summary)]
    assert summary.text == "Goal: emit. Found FACT-7." and summary.rejected == 1 and summary.fallback is None
    kinds = [c.kind for c in policy.calls]
    assert kinds == ["action"] * 2 + ["summary", "summary", "action"]
    retry = policy.calls[3]
    assert retry.tools == () and retry.messages[-1]["content"] == SUMMARY_RETRY.format(index=1)


def test_two_unusable_summaries_fall_back_to_masking_and_say_so(local):
    ws = local({"README.md": "hi\n"})
    markup = '<tool_call>\n{"name": "emit", "arguments": {"size": 1}}\n</tool_call>'
    turns = [call("emit", size=30, word="FACT-7")] + emits(1) + ["", markup, call("finish", message="done")]
    result, policy = run(ws, turns, window=2048, tools=TOOLS, config=SUMMARY_CONFIG)
    assert result.stop_reason == "finish"
    (summary,) = [e for e in result.events if isinstance(e, Summary)]
    assert summary.fallback == "mask" and summary.rejected == 2
    assert "outputs masked" in summary.text and '[obs 1] emit {"size": 30, "word": "FACT-7"} -> FACT-7' in summary.text
    # what the model sees next is that summary, never an empty one
    assert "FACT-7" in policy.calls[-1].messages[2]["content"]


def test_a_script_without_summaries_keeps_its_actions_for_actions(local):
    """Fault 8: a scripted file says its window and that it writes no summaries."""
    ws = local({"README.md": "hi\n"})
    script = {"context_window": 2048, "summaries": False,
              "turns": [call("emit", size=300, word=f"w{i}") for i in range(4)] + [call("finish", message="all four")]}
    path = ws.root + "/../script.json"
    with open(path, "w") as fh:
        json.dump(script, fh)
    policy = ScriptedPolicy.from_file(path)
    assert policy.context_window == 2048 and policy.writes_summaries is False
    result = Agent(policy=policy, workspace=ws, tools=TOOLS, config=SUMMARY_CONFIG).run("emit")
    assert result.stop_reason == "finish" and result.message == "all four"
    summaries = [e for e in result.events if isinstance(e, Summary)]
    assert summaries and all(s.fallback == "mask" for s in summaries)
    assert result.steps == 5


def test_script_file_errors_are_clear(tmp_path):
    from harness.errors import PolicyError

    path = tmp_path / "s.json"
    for data, says in [({"turns": "x"}, 'holds .turns. .a list.'), ({"turns": [], "window": 3}, "unknown: window"),
                       ({"turns": [], "context_window": "big"}, "context_window must be a positive integer"),
                       ({"turns": [], "summaries": "no"}, "summaries must be true or false"), (3, "got int")]:
        path.write_text(json.dumps(data))
        with pytest.raises(PolicyError, match=says):
            ScriptedPolicy.from_file(path)
    path.write_text(json.dumps({"turns": [], "context_window": 999}))
    assert ScriptedPolicy.from_file(path, context_window=5000).context_window == 5000


class _Server:
    """A real OpenAI-compatible HTTP server on 127.0.0.1 answering chat completions from a queue."""

    def __init__(self, replies):
        self.replies, self.requests = list(replies), []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 (model listing, props: not known here)
                self._send(404, {"error": "not found"})

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": "not found"})
                outer.requests.append(body)
                message = outer.replies.pop(0)
                self._send(200, {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                                 "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}],
                                 "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}})

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


def _tool_call(name, **args):
    return {"content": None, "tool_calls": [{"id": f"c{len(args)}{name}", "type": "function",
                                             "function": {"name": name, "arguments": json.dumps(args)}}]}


def test_a_server_summary_of_only_tool_calls_is_never_accepted(local):
    """Issue 12 fault 4: the summary reply holds only tool_calls, the retry no text: the history
    is not replaced by nothing; the harness masks it and says so."""
    from harness.policies import load_policy

    server = _Server([_tool_call("emit", size=1500, word="FACT-9"), _tool_call("emit", size=1500),
                      _tool_call("emit", size=1),  # the summary reply: only a tool call
                      {"content": ""},  # the retry: no text
                      _tool_call("finish", message="done")])
    try:
        policy = load_policy(f"openai:m@{server.url}")
        config = RecapConfig(context=ContextConfig(summarize_at=2000, hard_limit=0.95, keep_recent=0))
        result = Agent(policy=policy, workspace=local({"README.md": "hi\n"}), tools=TOOLS, config=config).run("emit")
    finally:
        server.httpd.shutdown()
    assert result.stop_reason == "finish", result.message
    (summary,) = [e for e in result.events if isinstance(e, Summary)]
    assert summary.fallback == "mask" and summary.rejected == 2 and "FACT-9" in summary.text
    # where the summary falls depends on how the tokens are counted (the estimate errs high): find
    # the summary request by its instruction; the retry follows it, then the next action turn
    first = next(i for i, r in enumerate(server.requests)
                 if str(r["messages"][-1].get("content", "")).startswith("The context is nearly full"))
    summary_requests = server.requests[first : first + 2]
    assert all("tools" not in r for r in summary_requests)
    assert summary_requests[1]["messages"][-1]["content"] == SUMMARY_RETRY.format(index=1)
    assert "FACT-9" in json.dumps(server.requests[first + 2]["messages"])
