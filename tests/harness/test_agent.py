"""The agent loop end to end with a scripted policy on a real git workspace."""

from __future__ import annotations

import io
import json
import threading

import pytest
from rich.console import Console

from harness.agent import Agent
from harness.config import AgentConfig, ContextConfig, RecapConfig
from harness.policies.scripted import ScriptedPolicy
from harness.render import render_session
from harness.session import Final, Observation, PolicyTurn, SessionStart, SessionWriter, Summary, read_session
from harness.toolcall import parse_tool_calls
from test_agent_support import TOOLS, call


@pytest.fixture
def ws(workspace_of, make_repo):
    return workspace_of(make_repo({"app.py": "x = 1\n"}))


def run(ws, turns, *, config=None, log=None, window=4096, **kwargs):
    policy = ScriptedPolicy(turns, context_window=window)
    agent = Agent(policy=policy, workspace=ws, tools=TOOLS, config=config or RecapConfig(), log=log, **kwargs)
    return agent.run("change x to 2 in app.py"), policy


def observations(result):
    return [e for e in result.events if isinstance(e, Observation)]


def test_finish_returns_the_diff_and_the_message(ws):
    result, policy = run(ws, [call("read_file", path="app.py"), call("write_file", path="app.py", content="x = 2\n"), call("finish", message="x is 2 now")])
    assert result.stop_reason == "finish"
    assert result.message == "x is 2 now"
    assert result.steps == 3
    assert "-x = 1\n+x = 2" in result.diff
    # the model read the file through an observation headed with its id
    assert policy.calls[1].messages[-1]["content"] == '[obs 1] read_file {"path": "app.py"}\nx = 1\n'
    final = result.events[-1]
    assert isinstance(final, Final) and final.diff == result.diff and final.steps == 3


@pytest.mark.parametrize(
    "turn, kind, says",
    [
        ('<tool_call>\n{"name": "read_file", "arguments": {"path": "app.py"\n</tool_call>', "malformed", "not valid JSON"),
        (call("open_file", path="app.py"), "unknown_tool", "unknown tool 'open_file'"),
        (call("emit", size="many"), "bad_arguments", "size"),
        ({"content": "", "tool_calls": [{"name": "emit", "arguments": "{size: 3"}]}, "malformed", "not valid JSON"),
        ({"content": "", "tool_calls": [{"name": "emit", "arguments": "[" * 100_000}]}, "malformed", "not valid JSON"),
        ("I think I am done.", "no_call", "No tool call found"),
        (call("prune", ids=[1]), "not_offered", "prune is not offered now"),
    ],
)
def test_malformed_calls_become_counted_readable_observations(ws, turn, kind, says):
    result, policy = run(ws, [turn, call("finish", message="ok")])
    assert result.stop_reason == "finish"
    errors = [o for o in observations(result) if o.is_error]
    assert [o.error_kind for o in errors] == [kind]
    assert says in errors[0].output
    # the next prompt shows the error to the model, headed by its observation id
    assert "[obs 1]" in policy.calls[1].messages[-1]["content"]
    assert says in policy.calls[1].messages[-1]["content"]


def test_tool_call_nested_too_deeply_is_a_parse_error_not_a_recursion_error():
    _, calls, errors = parse_tool_calls("<tool_call>\n" + "[" * 100_000 + "\n</tool_call>", turn=0)
    assert calls == [] and "nesting too deep" in errors[0]


def test_loop_guard_warns_then_stops_on_the_same_call_repeated(ws):
    same = call("emit", size=1)
    as_dict = {"content": "", "tool_calls": [{"name": "emit", "arguments": {"size": 1}}]}
    result, policy = run(ws, [same, as_dict, same, same, call("finish", message="never")],
                         config=RecapConfig(agent=AgentConfig(loop_guard_repeats=3)))
    assert result.stop_reason == "loop_guard"
    assert result.steps == 4
    assert 'emit {"size": 1}' in result.message and "after a warning" in result.message
    # the warning came after the third repeat, as an observation the policy read
    warning = [o for o in observations(result) if o.name == "loop_guard"]
    assert len(warning) == 1 and "repeat the same call 3 times" in warning[0].output
    assert "Loop guard" in policy.calls[3].messages[-1]["content"]


def test_loop_guard_warning_heeded_lets_the_run_go_on(ws):
    same = call("emit", size=1)
    result, _ = run(ws, [same, same, same, call("emit", size=2), call("finish", message="done")],
                    config=RecapConfig(agent=AgentConfig(loop_guard_repeats=3)))
    assert result.stop_reason == "finish"


def test_loop_guard_catches_an_alternating_cycle_that_undoes_itself(ws):
    """Fault 1: write_file x = 1 / edit_file x = 1 -> x = 2 alternating ran to max_steps."""
    from harness.tools import default_registry

    write = call("write_file", path="app.py", content="x = 1\n")
    edit = call("edit_file", path="app.py", old_string="x = 1", new_string="x = 2")
    policy = ScriptedPolicy([write, edit] * 20)
    config = RecapConfig(agent=AgentConfig(max_steps=40, loop_guard_repeats=3))
    result = Agent(policy=policy, workspace=ws, tools=default_registry(), config=config).run("set x")
    assert result.stop_reason == "loop_guard"
    assert result.steps == 8  # warned after 3 rounds (6 steps), stopped one round later
    assert "cycle of 2 calls" in result.message
    assert "write_file" in result.message and "edit_file" in result.message
    warnings = [o for o in observations(result) if o.name == "loop_guard"]
    assert len(warnings) == 1 and warnings[0].turn == 5


def test_loop_guard_catches_a_cycle_that_restores_the_workspace_with_new_outputs(ws):
    """Observations differ each round (a counter), but the workspace comes back each round."""
    from harness.tools import default_registry

    turns = []
    for i in range(10):
        turns += [call("write_file", path="tmp.txt", content="scratch\n"), call("delete_file", path="tmp.txt"),
                  call("run_command", command=f"true {i % 1}")]
    policy = ScriptedPolicy(turns)
    config = RecapConfig(agent=AgentConfig(max_steps=40, loop_guard_repeats=2))
    result = Agent(policy=policy, workspace=ws, tools=default_registry(), config=config).run("tidy")
    assert result.stop_reason == "loop_guard"
    assert result.steps <= 3 * 3
    assert "leave the workspace as it was" in result.message


def test_loop_guard_leaves_progress_alone(ws):
    """The same call shape with different arguments, or a growing file, is not a loop."""
    from harness.tools import default_registry

    turns = [call("write_file", path="app.py", content=f"x = {i}\n") for i in range(12)] + [call("finish", message="done")]
    policy = ScriptedPolicy(turns, context_window=32768)
    result = Agent(policy=policy, workspace=ws, tools=default_registry(), config=RecapConfig()).run("count")
    assert result.stop_reason == "finish"


def test_loop_guard_counts_only_consecutive_repeats(ws):
    a, b = call("emit", size=1), call("emit", size=2)
    result, _ = run(ws, [a, a, b, a, a, call("finish", message="done")], config=RecapConfig(agent=AgentConfig(loop_guard_repeats=3)))
    assert result.stop_reason == "finish"


def test_loop_guard_tells_different_broken_calls_apart(ws):
    cut = ['<tool_call>\n{"name": "emit", "arguments": {"size": ' + str(i) for i in range(3)]
    result, _ = run(ws, [*cut, call("finish", message="done")], config=RecapConfig(agent=AgentConfig(loop_guard_repeats=3)))
    assert result.stop_reason == "finish"
    result, _ = run(ws, [cut[0]] * 4 + [call("finish", message="done")], config=RecapConfig(agent=AgentConfig(loop_guard_repeats=3)))
    assert result.stop_reason == "loop_guard"


def test_max_steps(ws):
    turns = [call("emit", size=i) for i in range(10)]
    result, policy = run(ws, turns, config=RecapConfig(agent=AgentConfig(max_steps=4)))
    assert result.stop_reason == "max_steps"
    assert result.steps == 4 and len(policy.calls) == 4


def test_policy_failure_ends_with_error_and_a_final_event(ws):
    result, _ = run(ws, [call("write_file", path="app.py", content="x = 3\n")])
    assert result.stop_reason == "error"
    assert "script exhausted after 1 turns" in result.message
    assert isinstance(result.events[-1], Final)
    assert "+x = 3" in result.diff


def test_cancel_stops_before_the_next_step(ws):
    cancel = threading.Event()
    seen = []

    def on_event(event):
        seen.append(event)
        if isinstance(event, Observation):
            cancel.set()

    result, policy = run(ws, [call("emit", size=1), call("emit", size=2)], on_event=on_event, cancel=cancel)
    assert result.stop_reason == "cancelled"
    assert len(policy.calls) == 1
    assert [e.seq for e in seen] == [e.seq for e in result.events]


def test_session_file_records_every_event_and_reads_back(ws, tmp_path):
    path = tmp_path / "s.jsonl"
    log = SessionWriter(path)
    config = RecapConfig(context=ContextConfig(summarize_at=800, hard_limit=0.9, keep_recent=1), agent=AgentConfig(max_new_tokens=64))
    turns = [call("emit", size=150), call("emit", size=150), "Goal: x=2. Files: app.py.", call("finish", message="done")]
    result, _ = run(ws, turns, config=config, log=log, window=2048)
    log.close()
    assert result.stop_reason == "finish"
    session = read_session(path)
    assert not session.torn
    assert [e.model_dump() for e in session.events] == [e.model_dump() for e in result.events]
    start = session.start
    assert isinstance(start, SessionStart) and start.task == "change x to 2 in app.py" and start.model == "scripted"
    assert start.config == config.to_dict()
    assert start.base_commit == ws.origin.base_commit and start.sandbox == ws.origin.sandbox != ""
    assert start.repo == ws.origin.repo
    assert {t["function"]["name"] for t in start.tools} == {"emit", "read_file", "write_file", "finish", "prune"}
    turns_ = session.of_type(PolicyTurn)
    assert [t.kind for t in turns_] == ["action", "action", "summary", "action"]
    assert [t.segment for t in turns_] == [0, 0, 0, 1]
    assert all(t.prompt_ids and len(t.prompt_ids) == t.prompt_tokens for t in turns_)
    assert session.of_type(Summary)[0].text == "Goal: x=2. Files: app.py."
    assert session.final.summaries == 1


def test_torn_session_file_reads_up_to_the_tear(ws, tmp_path):
    path = tmp_path / "s.jsonl"
    log = SessionWriter(path)
    result, _ = run(ws, [call("emit", size=3), call("finish", message="done")], log=log)
    log.close()
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 25])  # a crash in the middle of writing the Final event
    session = read_session(path)
    assert session.torn
    assert [e.type for e in session.events] == [e.type for e in result.events[:-1]]
    assert session.final is None


def test_render_session_highlights_summaries(ws, tmp_path):
    path = tmp_path / "s.jsonl"
    log = SessionWriter(path)
    config = RecapConfig(context=ContextConfig(summarize_at=800, keep_recent=0), agent=AgentConfig(max_new_tokens=64))
    run(ws, [call("emit", size=150), call("emit", size=150), "SUMMARY-TEXT: emitted words", call("write_file", path="app.py", content="x = 2\n"), call("finish", message="all done")],
        config=config, log=log, window=2048)
    log.close()
    out = io.StringIO()
    render_session(read_session(path), Console(file=out, width=120, color_system=None))
    text = out.getvalue()
    assert "summary 1:" in text and "SUMMARY-TEXT: emitted words" in text
    assert "[obs 1] emit" in text
    assert "final: finish after 4 steps, 1 summaries" in text
    assert "+x = 2" in text


def test_on_event_failure_does_not_stop_the_run(ws):
    def broken(event):
        raise RuntimeError("ui crashed")

    result, _ = run(ws, [call("finish", message="ok")], on_event=broken)
    assert result.stop_reason == "finish"


def test_default_tools_end_to_end(ws):
    turns = [
        call("grep", pattern="x ="),
        call("edit_file", path="app.py", old_string="x = 1", new_string="x = 2"),
        call("run_command", command="python3 -c 'import app; print(app.x)'"),
        call("finish", message="x is 2"),
    ]
    policy = ScriptedPolicy(turns)
    result = Agent(policy=policy, workspace=ws).run("set x to 2")
    assert result.stop_reason == "finish", result.message
    assert [o.is_error for o in observations(result)] == [False] * 4
    assert "app.py" in observations(result)[0].output
    assert "2" in observations(result)[2].output
    assert "+x = 2" in result.diff
    assert "prune" in {t["function"]["name"] for t in result.events[0].tools}


def test_scripted_policy_from_file(tmp_path):
    path = tmp_path / "turns.json"
    path.write_text(json.dumps([call("finish", message="x"), {"content": "hi", "tool_calls": [{"name": "emit", "arguments": {"size": 1}}]}]))
    policy = ScriptedPolicy.from_file(path)
    assert policy.spec == f"scripted:{path}"
    assert len(policy.turns) == 2
