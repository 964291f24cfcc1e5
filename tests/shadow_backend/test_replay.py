"""Replay of recorded sessions: exact on both backends, divergence reported, bad files named by
line while the sessions before them still replay, and a killed replay cleaned up by gc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.agent import Agent
from harness.policies.scripted import ScriptedPolicy
from harness.session import SessionWriter, read_session
from shadow_backend.gc import collect_garbage
from shadow_backend.image import docker_client
from shadow_backend.local import LocalBackend
from shadow_backend.replay import normalize, replay_session, replay_sessions

TURNS = [
    {"content": "look first", "tool_calls": [{"name": "read_file", "arguments": {"path": "pkg/calc.py"}}]},
    {"tool_calls": [{"name": "edit_file", "arguments": {
        "path": "pkg/calc.py", "old_string": "return a - b", "new_string": "return a + b"}}]},
    {"tool_calls": [{"name": "run_command", "arguments": {
        "command": "python3 -c 'from pkg.calc import add; print(add(2, 3))'; pwd"}}]},
    {"tool_calls": [{"name": "write_file", "arguments": {"path": "NOTES.md", "content": "fixed add\n"}},
                    {"name": "read_file", "arguments": {"path": "missing.py"}}]},
    "<tool_call>{not json</tool_call>",
    {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]},
    {"tool_calls": [{"name": "finish", "arguments": {"message": "add fixed"}}]},
]


def record(repo: Path, path: Path, turns: list) -> Path:
    """Run the agent with a scripted policy on a local workspace of `repo`, logging to `path`."""
    workspace = LocalBackend.create(repo)
    writer = SessionWriter(path)
    try:
        result = Agent(policy=ScriptedPolicy(turns), workspace=workspace, log=writer).run("fix add", verify="true")
    finally:
        writer.close()
        workspace.close()
    assert result.stop_reason == "finish"
    return path


@pytest.fixture(scope="module")
def recorded(small_repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(small_repo, tmp_path_factory.mktemp("sessions") / "good.jsonl", TURNS)


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_replay_of_a_recorded_session_matches(recorded: Path, backend: str) -> None:
    result = replay_session(recorded, backend=backend)
    assert result.error is None
    assert result.divergences == ()
    assert result.ok
    assert result.observations == 8  # 7 turns, one with two calls
    assert result.skipped == 1  # the malformed call is compared as recorded, not re-run
    assert result.exact + result.normalized == 7
    assert result.final_diff in ("exact", "normalized")
    if backend == "local":
        assert result.final_diff == "exact"


def _tamper(source: Path, dest: Path, *, name: str, new_output: str) -> Path:
    lines = source.read_text().splitlines()
    for i, line in enumerate(lines):
        event = json.loads(line)
        if event["type"] == "observation" and event["name"] == name:
            event["output"] = new_output
            lines[i] = json.dumps(event)
            break
    dest.write_text("\n".join(lines) + "\n")
    return dest


def test_tampered_session_diverges_with_step_and_diff(recorded: Path, tmp_path: Path) -> None:
    tampered = _tamper(recorded, tmp_path / "tampered.jsonl", name="read_file", new_output="1\tsomething else\n")
    result = replay_session(tampered, backend="local")
    assert not result.ok
    (divergence,) = result.divergences
    assert divergence.what == "observation"
    assert divergence.step == 0 and divergence.obs_id == 1
    assert "-1\tsomething else" in divergence.detail
    assert "1\tdef add(a, b):" in divergence.detail


def test_tampered_final_diff_diverges(recorded: Path, tmp_path: Path) -> None:
    lines = recorded.read_text().splitlines()
    final = json.loads(lines[-1])
    assert final["type"] == "final"
    final["diff"] = final["diff"].replace("+fixed add", "+something else")
    lines[-1] = json.dumps(final)
    (tmp_path / "final.jsonl").write_text("\n".join(lines) + "\n")
    result = replay_session(tmp_path / "final.jsonl", backend="local")
    assert [d.what for d in result.divergences] == ["final_diff"]
    assert result.final_diff == "diverged"


def test_bad_files_are_named_and_earlier_sessions_still_replay(recorded: Path, tmp_path: Path) -> None:
    lines = recorded.read_text().splitlines()
    start = json.loads(lines[0])
    start["schema_version"] = 99
    (tmp_path / "version.jsonl").write_text("\n".join([json.dumps(start), *lines[1:]]) + "\n")
    torn_text = "\n".join(lines[:5]) + "\n" + lines[5][: len(lines[5]) // 2]
    (tmp_path / "torn.jsonl").write_text(torn_text)
    middle = lines[:3] + ["{broken"] + lines[3:]
    (tmp_path / "middle.jsonl").write_text("\n".join(middle) + "\n")

    paths = [recorded, tmp_path / "version.jsonl", tmp_path / "torn.jsonl", tmp_path / "middle.jsonl"]
    results = replay_sessions(paths, backend="local", jobs=2)
    assert [r.path for r in results] == [str(p) for p in paths]
    assert results[0].ok
    assert "version.jsonl:1:" in results[1].error and "schema_version 99" in results[1].error
    assert "torn.jsonl:6:" in results[2].error and "truncated" in results[2].error
    assert results[2].observations > 0 and results[2].divergences == ()  # the prefix still replayed
    assert "middle.jsonl:4:" in results[3].error


def test_normalize_hides_timings_and_temp_paths() -> None:
    a = "ran in 0.52s at /tmp/recap-ws-abc123/demo/pkg, took 12 ms"
    b = "ran in 1.3s at /workspace/pkg, took 7 ms"
    assert normalize(a) == normalize(b)
    assert normalize("exit 1") != normalize("exit 2")


def _cli(args: list[str]) -> object:
    import typer

    from recap.cmd_backend import register

    app = typer.Typer()
    register(app)
    return CliRunner().invoke(app, args)


def test_cli_exit_status_and_report(recorded: Path, tmp_path: Path) -> None:
    tampered = _tamper(recorded, tmp_path / "t.jsonl", name="list_dir", new_output="nothing\n")
    report = tmp_path / "report.json"
    ok = _cli(["replay", str(recorded), "--report", str(report)])
    assert ok.exit_code == 0, ok.output
    assert json.loads(report.read_text())[0]["ok"] is True
    bad = _cli(["replay", str(recorded), str(tampered), "--jobs", "2", "--report", str(report)])
    assert bad.exit_code == 1, bad.output
    rows = json.loads(report.read_text())
    assert [r["ok"] for r in rows] == [True, False]
    assert rows[1]["divergences"][0]["step"] == 5
    allowed = _cli(["replay", str(tampered), "--allow-divergence"])
    assert allowed.exit_code == 0


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_killed_replay_leaves_nothing_after_gc(small_repo: Path, tmp_path: Path, backend: str) -> None:
    slow = record(small_repo, tmp_path / "slow.jsonl", [
        {"tool_calls": [{"name": "run_command", "arguments": {"command": "sleep 0.1"}}]},
        {"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]},
    ])
    # The recorded command was short; make the replay's long so that the kill lands mid-command.
    text = slow.read_text().replace("sleep 0.1", "sleep 120")
    slow.write_text(text)
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from shadow_backend.replay import replay_session; "
         "replay_session(sys.argv[1], backend=sys.argv[2])", str(slow), backend],
        cwd=Path(__file__).resolve().parents[2],
    )
    marker_glob = "recap-ws-*.recap-owner"
    tmp_root = Path(os.environ.get("TMPDIR", "/tmp"))
    deadline = time.monotonic() + 60
    owned: list[Path] = []
    while time.monotonic() < deadline and not owned:
        owned = [m for m in tmp_root.glob(marker_glob) if f'"pid": "{proc.pid}"' in m.read_text()]
        time.sleep(0.2)
    assert owned, "the replay never created its workspace"
    time.sleep(1.0)  # let it reach the long command
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    workspace_dir = Path(str(owned[0])[: -len(".recap-owner")])
    assert workspace_dir.exists()  # leaked by the crash...
    report = collect_garbage(docker=backend == "docker")
    assert str(workspace_dir) in report.dirs  # ...and collected
    assert not workspace_dir.exists() and not owned[0].exists()
    if backend == "docker":
        left = docker_client().containers.list(all=True, filters={"label": f"recap.owner_pid={proc.pid}"})
        assert left == []
        assert len(report.containers) >= 1
    assert read_session(slow).final is not None
