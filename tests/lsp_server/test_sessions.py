"""Sessions end to end through a real `recap serve`: run, progress, events, accept/reject, rebase,
refusal, cancel, concurrency. The policy is scripted (`scripted:FILE.json`); the workspace is the
real local shadow backend."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from lsprotocol import types

from harness.session import Observation, SessionStart, Verdict, read_session
from lsp_helpers import CAPABILITIES, call, script

FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
ORIGINAL = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 2) == 4\n"
INVALID_PARAMS = -32602


def fix_script(tmp_path: Path) -> str:
    return script(tmp_path, [
        call("read_file", path="calc.py"),
        call("edit_file", path="calc.py", old_string="return a - b", new_string="return a + b"),
        call("write_file", path="test_calc.py", content=TEST),
        call("finish", message="add adds now"),
    ])


async def test_round_trip_run_progress_events_accept_and_verdicts(start_editor, repo: Path, tmp_path: Path) -> None:
    editor = await start_editor(repo, model=fix_script(tmp_path))
    editor.open("calc.py")
    session = await editor.run("fix add")
    assert await editor.wait_state(session, "finished", "failed") == "finished"

    # work-done progress: a server-created token, begin / one report per step / end
    ((token, reports),) = editor.client.progress_reports.items()
    assert token == f"recap-{session}"
    assert isinstance(reports[0], types.WorkDoneProgressBegin)
    assert (reports[0].title, reports[0].cancellable) == ("recap: fix add", True)
    assert [r.message for r in reports[1:-1]] == [
        "step 1: reading calc.py", "step 2: editing calc.py", "step 3: editing test_calc.py", "step 4: finishing",
    ]
    assert isinstance(reports[-1], types.WorkDoneProgressEnd)
    assert reports[-1].message == "finished: add adds now"

    # every session event streamed, between the state changes
    kinds = [e["type"] for e in editor.session_events(session)]
    assert kinds == ["state", "session_start"] + ["policy_turn", "observation"] * 4 + ["final", "state"]
    observation = editor.session_events(session, "observation")[0]
    assert "return a - b" in observation["output"] and observation["name"] == "read_file"
    assert "a/calc.py" in editor.session_events(session, "final")[0]["diff"]

    status = await editor.command("recap.status", {"session": session})
    assert status["state"] == "finished" and status["step"] == 4 and status["tokens"] > 0 and status["summaries"] == 0
    proposal = await editor.command("recap.proposal", {"session": session})
    assert [(f["path"], f["status"], f["original"], f["proposed"]) for f in proposal["files"]] == [
        ("calc.py", "modified", ORIGINAL, FIXED),
        ("test_calc.py", "added", None, TEST),
    ]
    assert (repo / "calc.py").read_text() == ORIGINAL and not (repo / "test_calc.py").exists()  # untouched so far

    result = await editor.command("recap.accept", {"session": session})
    assert result == {"session": session, "state": "accepted", "applied": True, "files": ["calc.py", "test_calc.py"]}
    (request,) = editor.edits
    assert request.label == "recap: fix add"
    edit = request.edit
    assert edit.change_annotations["recap"].needs_confirmation is False  # accepting is the confirmation
    calc, create, new = edit.document_changes
    assert calc.text_document.uri == editor.uri("calc.py") and calc.text_document.version == 1
    assert [(e.range.start.line, e.range.start.character, e.range.end.line, e.range.end.character, e.new_text, e.annotation_id)
            for e in calc.edits] == [(1, 0, 2, 0, "    return a + b\n", "recap")]
    assert isinstance(create, types.CreateFile) and create.uri == editor.uri("test_calc.py")
    assert create.annotation_id == "recap"
    assert new.text_document.version is None and [e.new_text for e in new.edits] == [TEST]
    assert editor.text("calc.py") == FIXED and (repo / "test_calc.py").read_text() == TEST

    # the verdict and the "kept" signal land in the session file
    editor.save("calc.py")
    editor.open("test_calc.py")
    editor.type("test_calc.py", "# nothing\n")
    editor.save("test_calc.py")
    await editor.wait_for(lambda: len(editor.session_events(session, "verdict")) == 3)
    log = read_session(Path(tmp_path / "sessions" / f"{session}.jsonl"))
    start = log.start
    assert isinstance(start, SessionStart) and start.source == "lsp" and start.task == "fix add"
    assert start.meta["lsp_session"] == session
    assert log.final.stop_reason == "finish"
    verdicts = [(v.verdict, v.files) for v in log.of_type(Verdict)]
    assert verdicts == [("accepted", ["calc.py", "test_calc.py"]), ("kept", ["calc.py"]), ("reverted", ["test_calc.py"])]
    assert log.of_type(Verdict)[2].reason == "0 of 3 accepted lines still there"
    assert (await editor.command("recap.status", {}))["sessions"][0]["state"] == "accepted"
    assert (await editor.error("recap.accept", {"session": session})).code == INVALID_PARAMS


async def test_the_agent_sees_unsaved_buffers_and_reject_leaves_files_untouched(
    start_editor, repo: Path, tmp_path: Path
) -> None:
    turns = [call("read_file", path="calc.py"), call("write_file", path="notes.txt", content="rewritten\n"),
             call("finish", message="done")]
    # the model comes from workspace/configuration (over the initialization options)
    editor = await start_editor(repo, model="embedded", configuration={"model": script(tmp_path, turns)})
    editor.open("calc.py")
    editor.type("calc.py", "UNSAVED = 1\n" + ORIGINAL)
    selection = {"start": {"line": 0, "character": 0}, "end": {"line": 2, "character": 0}}
    session = await editor.run("look", uri=editor.uri("calc.py"), range=selection)
    assert await editor.wait_state(session, "finished", "failed") == "finished"
    (observation, *_) = editor.session_events(session, "observation")
    assert "UNSAVED = 1" in observation["output"]
    start = read_session(tmp_path / "sessions" / f"{session}.jsonl").start
    assert start.buffers == {"calc.py": "UNSAVED = 1\n" + ORIGINAL}
    assert start.task == "look\n\nContext: calc.py, lines 1-2:\n```\nUNSAVED = 1\ndef add(a, b):\n```"

    result = await editor.command("recap.reject", {"session": session, "reason": "not what I asked"})
    assert result == {"session": session, "state": "rejected"}
    assert editor.edits == []
    assert (repo / "notes.txt").read_text() == "first\nsecond\n" and (repo / "calc.py").read_text() == ORIGINAL
    assert editor.text("calc.py") == "UNSAVED = 1\n" + ORIGINAL
    (verdict,) = read_session(tmp_path / "sessions" / f"{session}.jsonl").of_type(Verdict)
    assert (verdict.verdict, verdict.reason) == ("rejected", "not what I asked")
    assert (await editor.error("recap.reject", {"session": session})).code == INVALID_PARAMS


async def test_accept_rebases_onto_later_typing_or_refuses_when_it_overlaps(start_editor, repo: Path, tmp_path: Path) -> None:
    editor = await start_editor(repo, model=script(tmp_path, [
        call("edit_file", path="calc.py", old_string="return a * b", new_string="return b * a"),
        call("finish", message="swapped"),
    ]))
    editor.open("calc.py")
    first = await editor.run("swap")
    second = await editor.run("swap again")
    assert await editor.wait_state(first, "finished", "failed") == "finished"
    assert await editor.wait_state(second, "finished", "failed") == "finished"

    # typed after the run started, away from the agent's change: rebased, the user's line kept
    editor.type("calc.py", "# mine\n" + ORIGINAL)
    result = await editor.command("recap.accept", {"session": first, "files": ["calc.py"]})
    assert result["applied"] is True
    (request,) = editor.edits
    (change,) = request.edit.document_changes
    assert change.text_document.version == 2
    assert [(e.range.start.line, e.new_text) for e in change.edits] == [(6, "    return b * a\n")]
    assert editor.text("calc.py") == "# mine\n" + ORIGINAL.replace("a * b", "b * a")

    # the same lines changed by the user: refused, nothing sent, nothing lost, still finished
    editor.type("calc.py", ORIGINAL.replace("a * b", "a * b * 1"))
    result = await editor.command("recap.accept", {"session": second})
    assert result["applied"] is False and result["state"] == "finished"
    assert "calc.py: your edits since the run started overlap the proposed change" in result["message"]
    assert len(editor.edits) == 1
    assert editor.text("calc.py") == ORIGINAL.replace("a * b", "a * b * 1")
    assert (await editor.command("recap.status", {"session": second}))["state"] == "finished"
    error = await editor.error("recap.accept", {"session": second, "files": ["other.py"]})
    assert "other.py not in the proposal (it changes: calc.py)" in error.message


async def test_a_client_that_refuses_the_edit_leaves_the_session_finished(start_editor, repo: Path, tmp_path: Path) -> None:
    # confirmAccept: the user asked to review accepted changes (VS Code's refactor preview)
    editor = await start_editor(repo, model=fix_script(tmp_path), confirmAccept=True)
    session = await editor.run("fix add")
    assert await editor.wait_state(session, "finished", "failed") == "finished"
    editor.refuse_edits = "the user pressed Cancel"
    result = await editor.command("recap.accept", {"session": session})
    assert result == {"session": session, "state": "finished", "applied": False, "files": [],
                      "message": "the user pressed Cancel"}
    assert editor.edits[-1].edit.change_annotations["recap"].needs_confirmation is True
    assert (repo / "calc.py").read_text() == ORIGINAL and not (repo / "test_calc.py").exists()
    assert read_session(tmp_path / "sessions" / f"{session}.jsonl").of_type(Verdict) == []

    editor.refuse_edits = None  # asking again works
    result = await editor.command("recap.accept", {"session": session, "files": ["calc.py"]})
    assert result["applied"] is True and result["files"] == ["calc.py"]
    edit = editor.edits[-1].edit
    assert edit.document_changes[0].text_document.version is None  # calc.py is not open: version null
    assert (repo / "calc.py").read_text() == FIXED and not (repo / "test_calc.py").exists()


async def test_cancel_stops_the_run_and_leaves_no_workspace_behind(start_editor, repo: Path, tmp_path: Path) -> None:
    tmp = tmp_path / "server-tmp"
    tmp.mkdir()
    sleeps = [call("run_command", command="sleep 0.5")] * 30
    editor = await start_editor(repo, env={"TMPDIR": str(tmp)}, model=script(tmp_path, sleeps))

    session = await editor.run("sleep a lot")
    await editor.wait_for(lambda: editor.session_events(session, "observation"))
    assert any(tmp.iterdir())  # the shadow workspace exists while it runs
    error = await editor.error("recap.accept", {"session": session})
    assert error.code == INVALID_PARAMS and "is running" in error.message
    assert "has no proposal" in (await editor.error("recap.proposal", {"session": session})).message
    result = await editor.command("recap.cancel", {"session": session})
    assert result == {"session": session, "state": "cancelled"}
    assert list(tmp.iterdir()) == []
    log = read_session(tmp_path / "sessions" / f"{session}.jsonl")
    assert log.final.stop_reason == "cancelled" and log.final.steps < 30
    assert editor.client.progress_reports[f"recap-{session}"][-1].message == "cancelled"

    # the client cancelling the progress token cancels the session too
    editor.client.progress_reports["my-token"] = []
    other = (await editor.command("recap.run", {"task": "sleep again"}, token="my-token"))["session"]
    await editor.wait_for(lambda: editor.session_events(other, "observation"))
    editor.client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token="my-token"))
    assert await editor.wait_state(other, "cancelled", "finished", "failed") == "cancelled"
    assert editor.client.progress_reports["my-token"][0].title == "recap: sleep again"
    await editor.wait_for(lambda: not any(tmp.iterdir()), timeout_s=10)
    assert (await editor.command("recap.cancel", {"session": other}))["state"] == "cancelled"  # idempotent


async def test_two_sessions_run_at_once_with_their_own_configuration(start_editor, repo: Path, tmp_path: Path) -> None:
    slow = [call("run_command", command="sleep 1"), call("write_file", path="a.txt", content="A\n"), call("finish", message="a")]
    other = [call("run_command", command="sleep 1"), call("write_file", path="b.txt", content="B\n"), call("finish", message="b")]
    editor = await start_editor(repo, model=script(tmp_path, slow, "a.json"))
    first = await editor.run("write a")
    editor.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"recap": {"model": script(tmp_path, other, "b.json")}}))
    second = await editor.run("write b")
    assert await editor.wait_state(first, "finished", "failed") == "finished"
    assert await editor.wait_state(second, "finished", "failed") == "finished"
    a = read_session(tmp_path / "sessions" / f"{first}.jsonl")
    b = read_session(tmp_path / "sessions" / f"{second}.jsonl")
    assert a.start.ts < b.final.ts and b.start.ts < a.final.ts  # they overlapped in time
    assert [f["path"] for f in (await editor.command("recap.proposal", {"session": first}))["files"]] == ["a.txt"]
    assert [f["path"] for f in (await editor.command("recap.proposal", {"session": second}))["files"]] == ["b.txt"]
    statuses = (await editor.command("recap.status"))["sessions"]
    assert [(s["session"], s["task"], s["state"]) for s in statuses] == [
        (first, "write a", "finished"), (second, "write b", "finished")]


async def test_a_failing_policy_fails_the_session_and_the_server_keeps_serving(start_editor, repo: Path, tmp_path: Path) -> None:
    editor = await start_editor(repo, model="scripted:" + str(tmp_path / "missing.json"))
    session = await editor.run("anything")
    assert await editor.wait_state(session, "finished", "failed") == "failed"
    status = await editor.command("recap.status", {"session": session})
    assert "missing.json" in status["message"]
    editor.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(
        settings={"recap": {"model": fix_script(tmp_path), "backend": "nope"}}))  # a bad value: ignored
    session = await editor.run("fix add")
    assert await editor.wait_state(session, "finished", "failed") == "failed"  # the old (missing) script still
    assert any("bad workspace/didChangeConfiguration" in m.message for m in editor.client.messages)


@pytest.mark.docker
async def test_a_session_on_the_docker_backend(start_editor, repo: Path, tmp_path: Path) -> None:
    editor = await start_editor(repo, backend="docker", model=script(tmp_path, [
        call("run_command", command="cat /etc/os-release; cat calc.py"),
        call("edit_file", path="calc.py", old_string="return a - b", new_string="return a + b"),
        call("finish", message="fixed in a container"),
    ]))
    editor.open("calc.py")
    editor.type("calc.py", "# typed\n" + ORIGINAL)
    session = await editor.run("fix add")
    assert await editor.wait_state(session, "finished", "failed", timeout_s=120) == "finished"
    (observation, *_) = editor.session_events(session, "observation")
    assert "debian" in observation["output"].lower() and "# typed" in observation["output"]
    assert "docker" in read_session(tmp_path / "sessions" / f"{session}.jsonl").start.sandbox
    result = await editor.command("recap.accept", {"session": session})
    assert result["applied"] is True
    assert editor.text("calc.py") == "# typed\n" + FIXED


async def test_a_self_summary_shows_in_progress_events_and_status(start_editor, repo: Path, tmp_path: Path) -> None:
    (repo / "big.txt").write_text(" ".join(f"word{i}" for i in range(600)))
    turns = [call("read_file", path="big.txt"), "Goal: read big.txt. Files: big.txt (600 words).", call("finish", message="read")]
    editor = await start_editor(repo, model=script(tmp_path, turns), summarizeAt=2500, hardLimit=4000)
    session = await editor.run("read big.txt")
    assert await editor.wait_state(session, "finished", "failed") == "finished"
    (summary,) = editor.session_events(session, "summary")
    assert summary["text"] == "Goal: read big.txt. Files: big.txt (600 words)."
    assert summary["tokens_before"] > 2500 > summary["tokens_after"]
    reports = [r.message for r in editor.client.progress_reports[f"recap-{session}"][1:-1]]
    kilo = lambda n: f"{n / 1000:.1f}".removesuffix(".0") + "k"  # noqa: E731
    assert reports == ["step 1: reading big.txt",
                       f"summarized {kilo(summary['tokens_before'])} -> {kilo(summary['tokens_after'])} tokens",
                       "step 2: finishing"]
    status = await editor.command("recap.status", {"session": session})
    assert (status["step"], status["summaries"]) == (2, 1)
    start = read_session(tmp_path / "sessions" / f"{session}.jsonl").start
    assert (start.config["context"]["summarize_at"], start.config["context"]["hard_limit"]) == (2500, 4000)


async def test_cancel_kills_the_command_running_now(start_editor, repo: Path, tmp_path: Path) -> None:
    long = script(tmp_path, [call("run_command", command="echo started; sleep 600", timeout_s=600)])
    editor = await start_editor(repo, model=long)
    session = await editor.run("sleep for ten minutes")
    await editor.wait_for(lambda: editor.session_events(session, "policy_turn"))
    await asyncio.sleep(1.0)  # the command is running now
    started = time.monotonic()
    result = await editor.command("recap.cancel", {"session": session})
    assert result == {"session": session, "state": "cancelled"}
    assert time.monotonic() - started < 8  # not the 600 s of the command, nor the 10 s cancel wait
    log = read_session(tmp_path / "sessions" / f"{session}.jsonl")
    (obs,) = log.of_type(Observation)
    assert "started" in obs.output and log.final.stop_reason == "cancelled"


async def test_a_server_stopped_mid_run_leaves_no_workspace_behind(start_editor, repo: Path, tmp_path: Path) -> None:
    sleeps = script(tmp_path, [call("run_command", command="sleep 0.5")] * 60)
    for how in ("SIGTERM", "stdin closed"):
        tmp = tmp_path / f"tmp-{how.split()[0]}"
        tmp.mkdir()
        editor = await start_editor(repo, env={"TMPDIR": str(tmp)}, model=sleeps)
        session = await editor.run("sleep a lot")
        await editor.wait_for(lambda: editor.session_events(session, "observation"))
        assert any(tmp.iterdir())
        server = editor.client._server
        if how == "SIGTERM":
            server.send_signal(signal.SIGTERM)
        else:
            server.stdin.close()
        assert await asyncio.wait_for(server.wait(), 30) in (0, 128 + signal.SIGTERM)
        assert list(tmp.iterdir()) == [], how
        log = read_session(tmp_path / "sessions" / f"{session}.jsonl")
        assert log.final.stop_reason == "cancelled", how


async def test_accept_says_so_when_the_editor_cannot_apply_workspace_edits(start_editor, repo: Path, tmp_path: Path) -> None:
    editor = await start_editor(repo, capabilities=types.ClientCapabilities(), model=fix_script(tmp_path))
    session = await editor.run("fix add")
    assert await editor.wait_state(session, "finished", "failed") == "finished"
    result = await editor.command("recap.accept", {"session": session})
    assert result["applied"] is False and "cannot apply versioned workspace edits" in result["message"]
    assert editor.edits == [] and editor.client.progress_reports == {}  # no progress either: not supported
    assert (await editor.command("recap.status", {"session": session}))["state"] == "finished"


async def test_a_client_listing_resource_operations_gets_document_changes(start_editor, repo: Path, tmp_path: Path) -> None:
    # Neovim 0.11 lists resourceOperations but not documentChanges, and applies documentChanges
    neovim_like = CAPABILITIES.workspace.workspace_edit
    capabilities = types.ClientCapabilities(
        workspace=types.WorkspaceClientCapabilities(apply_edit=True, configuration=True,
            workspace_edit=types.WorkspaceEditClientCapabilities(resource_operations=neovim_like.resource_operations)),
        window=CAPABILITIES.window)
    editor = await start_editor(repo, capabilities=capabilities, model=fix_script(tmp_path))
    session = await editor.run("fix add")
    assert await editor.wait_state(session, "finished", "failed") == "finished"
    result = await editor.command("recap.accept", {"session": session, "files": ["calc.py"]})
    assert result["applied"] is True and (repo / "calc.py").read_text() == FIXED
