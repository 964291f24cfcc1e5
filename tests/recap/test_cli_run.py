"""`recap run` end to end, as a user runs it: a real process, a scripted policy, a real repo."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.session import Score, read_session
from harness.toolcall import render_tool_call

ROOT = Path(__file__).resolve().parents[2]


def _script(tmp_path: Path, *calls: tuple[str, dict[str, Any]]) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps([render_tool_call(name, args) for name, args in calls]))
    return f"scripted:{path}"


def _recap(*args: str, sessions: Path, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recap", "run", "--sessions-dir", str(sessions), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, **kwargs)


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_run_prints_the_diff_and_leaves_the_repo_alone(make_repo: Any, tmp_path: Path) -> None:
    repo = make_repo({"app.py": "x = 1\n"}, untracked={"notes.txt": "mine\n"})
    before = _tree(repo)
    model = _script(tmp_path, ("edit_file", {"path": "app.py", "old_string": "x = 1", "new_string": "x = 2"}),
                    ("finish", {"message": "set x to 2 [/docs] [bold]"}))
    out = _recap("--repo", str(repo), "--model", model, "set x to 2", sessions=tmp_path / "s")
    assert out.returncode == 0, out.stderr
    assert "-x = 1\n+x = 2\n" in out.stdout
    assert "set x to 2 [/docs] [bold]" in out.stderr  # model text is printed verbatim, not as markup
    assert _tree(repo) == before
    (session_file,) = (tmp_path / "s").iterdir()
    assert read_session(session_file).start.session_id == session_file.stem


def test_apply_from_a_subdirectory_applies_the_whole_diff(make_repo: Any, tmp_path: Path) -> None:
    repo = make_repo({"app.py": "x = 1\n", "docs/index.md": "# docs\n"})
    model = _script(tmp_path, ("edit_file", {"path": "app.py", "old_string": "x = 1", "new_string": "x = 2"}),
                    ("write_file", {"path": "docs/new.md", "content": "new\n"}), ("finish", {"message": "done"}))
    out = _recap("--repo", str(repo / "docs"), "--model", model, "--apply", "edit", sessions=tmp_path / "s")
    assert out.returncode == 0, out.stderr
    assert (repo / "app.py").read_text() == "x = 2\n" and (repo / "docs" / "new.md").read_text() == "new\n"


def test_verify_runs_in_the_workspace_and_sets_the_exit_status(make_repo: Any, tmp_path: Path) -> None:
    repo = make_repo({"a.txt": "hello\n"})
    model = _script(tmp_path, ("write_file", {"path": "a.txt", "content": "bye\n"}), ("finish", {"message": "ok"}))
    good = _recap("--repo", str(repo), "--model", model, "--verify", "grep -q bye a.txt", "t", sessions=tmp_path / "good")
    bad = _recap("--repo", str(repo), "--model", model, "--verify", "grep -q hello a.txt", "t", sessions=tmp_path / "bad")
    assert good.returncode == 0 and "verify passed" in good.stderr
    assert bad.returncode == 1 and "verify failed" in bad.stderr
    (session_file,) = (tmp_path / "bad").iterdir()
    (score,) = read_session(session_file).of_type(Score)
    assert score.verify_passed is False


def test_failures_and_bad_input_exit_non_zero(make_repo: Any, tmp_path: Path) -> None:
    repo = make_repo({"a.txt": "a\n"})
    exhausted = _recap("--repo", str(repo), "--model", _script(tmp_path), "do it", sessions=tmp_path / "s")
    assert exhausted.returncode == 1 and "stopped: error" in exhausted.stderr and "Traceback" not in exhausted.stderr
    empty = _recap("--repo", str(repo), "--model", "embedded", "  ", sessions=tmp_path / "s")
    assert empty.returncode == 2 and "the task is empty" in empty.stderr
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    sessions_is_file = _recap("--repo", str(repo), "--model", _script(tmp_path), "x", sessions=not_a_dir)
    assert sessions_is_file.returncode == 2 and "error:" in sessions_is_file.stderr
    assert "Traceback" not in sessions_is_file.stderr


def test_interrupt_applies_nothing_and_exits_130(make_repo: Any, tmp_path: Path) -> None:
    repo = make_repo({"a.txt": "a\n"})
    before = _tree(repo)
    model = _script(tmp_path, ("write_file", {"path": "a.txt", "content": "half done\n"}),
                    ("run_command", {"command": "sleep 60"}), ("finish", {"message": "done"}))
    sessions = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-m", "recap", "run", "--sessions-dir", str(sessions), "--repo", str(repo),
                             "--model", model, "--apply", "work"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the sleep is running
        files = list(sessions.glob("*.jsonl")) if sessions.exists() else []
        if files and '"name":"run_command"' in files[0].read_text().replace(" ", ""):
            break
        time.sleep(0.2)
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted: nothing applied" in err and "+half done" in out
    assert _tree(repo) == before


def test_session_show_cuts_observations_unless_full(make_repo: Any, tmp_path: Path) -> None:
    repo = make_repo({"long.txt": "".join(f"line {i}\n" for i in range(1, 41))})
    model = _script(tmp_path, ("read_file", {"path": "long.txt"}), ("finish", {"message": "read it"}))
    assert _recap("--repo", str(repo), "--model", model, "read", sessions=tmp_path / "s").returncode == 0
    (session_file,) = (tmp_path / "s").iterdir()

    def show(*flags: str) -> str:
        out = subprocess.run([sys.executable, "-m", "recap", "session", "show", str(session_file), *flags],
                             cwd=ROOT, capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
        assert out.returncode == 0, out.stderr
        return out.stdout

    short, full = show(), show("--full")
    assert "more lines)" in short and "line 40" not in short
    assert "line 40" in full and "more lines)" not in full


def test_session_show_names_a_torn_first_line(tmp_path: Path) -> None:
    torn = tmp_path / "torn.jsonl"
    torn.write_text('{"type": "session_start", "schema_ver')
    out = subprocess.run([sys.executable, "-m", "recap", "session", "show", str(torn)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "torn.jsonl:1: its only line was cut mid-write" in out.stderr


def test_backend_limits_come_from_the_config_file(make_repo: Any, tmp_path: Path) -> None:
    repo = make_repo({"a.txt": "a\n"})
    config = tmp_path / "recap.toml"
    config.write_text("[backend.local]\nmemory_limit_bytes = 67108864\nmax_processes = 32\n")
    model = _script(tmp_path, ("finish", {"message": "ok"}))
    out = _recap("--repo", str(repo), "--model", model, "--config", str(config), "look", sessions=tmp_path / "s")
    assert out.returncode == 0, out.stderr
    (session_file,) = (tmp_path / "s").iterdir()
    assert "memory 64 MiB" in read_session(session_file).start.sandbox
    assert "32 processes" in read_session(session_file).start.sandbox
    config.write_text("[backend.local]\nmemory_limit = 1\n")
    bad = _recap("--repo", str(repo), "--model", model, "--config", str(config), "look", sessions=tmp_path / "s")
    assert bad.returncode == 2 and "unknown option(s) in [backend.local]: memory_limit" in bad.stderr


def test_apply_leaves_out_a_symlink_leading_outside_the_repo(make_repo: Any, tmp_path: Path) -> None:
    """Issue 13 fault 7: the agent's link to a file outside is neither printed as the change nor applied."""
    repo = make_repo({"calc.py": "x = 1\n"})
    model = _script(tmp_path, ("run_command", {"command": "ln -s /etc/hostname link.txt"}),
                    ("write_file", {"path": "calc.py", "content": "x = 2\n"}), ("finish", {"message": "fixed"}))
    out = _recap("--repo", str(repo), "--model", model, "--apply", "fix", sessions=tmp_path / "s")
    assert out.returncode == 0, out.stderr
    assert "left out: link.txt (a symlink to /etc/hostname: an absolute target, outside the workspace)" in out.stderr
    assert "link.txt" not in out.stdout and "+x = 2" in out.stdout
    assert not os.path.lexists(repo / "link.txt")
    assert (repo / "calc.py").read_text() == "x = 2\n"


def test_setup_gives_the_agent_and_verify_the_project_environment(make_repo: Any, tmp_path: Path) -> None:
    """`--setup`: the agent's commands and --verify run the venv's python, recap's packages are
    absent, the session records the environment, and a replay rebuilds it from the cache."""
    repo = make_repo({"recap.toml": '[env]\nsetup = "exit 9"\n', "a.txt": "hello\n"})
    check = "python -c 'import sys; assert sys.prefix == \"/recap/env\"' && ! python -c 'import typer'"
    model = _script(tmp_path, ("run_command", {"command": check}), ("finish", {"message": "ok"}))
    cache = {**os.environ, "RECAP_CACHE_DIR": str(tmp_path / "cache")}
    out = _recap("--repo", str(repo), "--model", model, "--setup", "echo from-setup", "--verify", check, "t",
                 sessions=tmp_path / "s", env=cache)
    assert out.returncode == 0, out.stderr
    [path] = (tmp_path / "s").glob("*.jsonl")
    session = read_session(path)
    assert session.start.env["setup"] == "echo from-setup" and "from-setup" in session.start.env["output"]
    (score,) = session.of_type(Score)
    assert score.verify_passed
    [ran] = [e for e in session.events if e.type == "observation" and e.name == "run_command"]
    assert not ran.is_error and ran.output.startswith("exit code 0"), ran.output
    replay = subprocess.run([sys.executable, "-m", "recap", "replay", str(path)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120, env=cache)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    # without --setup, recap.toml's [env] is used: its failing set-up is a clear error
    failed = _recap("--repo", str(repo), "--model", model, "t", sessions=tmp_path / "s2", env=cache)
    assert failed.returncode == 2 and "exit 9" in failed.stderr


def test_eval_help_lists_scripted_policies_and_backends() -> None:
    out = subprocess.run([sys.executable, "-m", "recap", "eval", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0 and "scripted:" in out.stdout and "--backend" in out.stdout and "--setup" in out.stdout


def test_image_is_a_docker_option(make_repo: Any, tmp_path: Path) -> None:
    repo = make_repo({"a.txt": "x\n"})
    out = _recap("--repo", str(repo), "--model", _script(tmp_path), "--image", "python:3.12", "t", sessions=tmp_path / "s")
    assert out.returncode == 2 and "--backend docker" in out.stderr
