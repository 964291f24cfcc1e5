"""Hostile session files: what recap promises about a session file someone else wrote.

A session file is untrusted input (`harness.session`, `shadow_backend.replay`). Read it, show it,
replay it or train on it, and:

- a file that is not a regular one (a FIFO, /dev/zero, a directory, a socket) is refused at once,
  never opened for a blocking read;
- reading is bounded: a line, and the file, past their caps are refused without reading on;
- a bad line is an error naming FILE:LINE (bad JSON, nesting too deep, an invalid event, a `seq`
  gap or duplicate); a torn last line is still read up to the tear;
- nothing recorded in it runs outside the workspace sandbox: recorded commands and the verify
  command run in the sandbox, the recorded start state cannot write outside the workspace, the
  recorded model/adapter are never loaded, `base_commit` cannot smuggle a git option;
- every command prints `error: FILE:LINE: ...` and exits 2, never a traceback.

Caps are small here to keep the tests fast; the real defaults are used where that costs nothing
(sparse files).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Callable

import pytest

from harness.errors import SessionFormatError, WorkspaceError
from harness.jsonl import JsonlLimits
from harness.session import SCHEMA_VERSION, read_session

ROOT = Path(__file__).resolve().parents[2]
PROMPT_S = 20.0
"""How long a refusal may take at most before the test calls it a hang (generous: a loaded machine)."""


def start(**fields: Any) -> dict[str, Any]:
    return {"type": "session_start", "seq": 0, "ts": 0.0, "schema_version": SCHEMA_VERSION, "session_id": "hostile",
            "repo": "/nonexistent", "task": "t", "model": "m", **fields}


def message(seq: int, content: str = "hi") -> dict[str, Any]:
    return {"type": "user_message", "seq": seq, "ts": 0.0, "content": content}


def write(path: Path, *lines: dict[str, Any] | str | bytes, end: bytes = b"\n") -> Path:
    """`lines` (events, or raw text/bytes) joined by newlines, `end` after the last."""
    raw = [line if isinstance(line, bytes) else (line if isinstance(line, str) else json.dumps(line)).encode()
           for line in lines]
    path.write_bytes(b"\n".join(raw) + end)
    return path


def promptly(fn: Callable[[], Any], *, unblock: Callable[[], None] = lambda: None) -> Any:
    """`fn()` in a thread: its result, or what it raised; fails (and calls `unblock`) if it is still
    running after `PROMPT_S`, so a regression that blocks fails instead of hanging the suite."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # handed to the test thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(PROMPT_S)
    if thread.is_alive():
        unblock()
        pytest.fail(f"still running after {PROMPT_S:g} s: it blocked")
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def refused(path: Path | str, *, limits: JsonlLimits | None = None) -> str:
    """The message of the SessionFormatError that reading `path` raises (promptly)."""
    with pytest.raises(SessionFormatError) as info:
        promptly(lambda: read_session(path, limits=limits))
    return str(info.value)


def _unblock_fifo(path: Path) -> None:
    """Open `path` (a FIFO) for writing and close it, so that a reader blocked in open() gets EOF."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


# --- files that are not files --------------------------------------------------------------------

def test_dev_zero_is_refused_without_reading() -> None:
    # small caps: should the type check regress, the line cap still stops the read
    message_ = refused("/dev/zero", limits=JsonlLimits(max_line_bytes=1024, max_file_bytes=4096))
    assert message_ == "/dev/zero: not a regular file (a character device); a session file must be one"


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "s.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(SessionFormatError, match=r"s\.jsonl: not a regular file \(a FIFO\)"):
        promptly(lambda: read_session(fifo), unblock=lambda: _unblock_fifo(fifo))


def test_path_swapped_for_a_fifo_after_stat_does_not_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: stat sees a regular file, open gets a FIFO. The open is non-blocking, fstat refuses."""
    fifo, regular = tmp_path / "s.jsonl", write(tmp_path / "regular.jsonl", start())
    os.mkfifo(fifo)
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, *a, **k: real_stat(regular if Path(p) == fifo else p, *a, **k))
    with pytest.raises(SessionFormatError, match=r"not a regular file \(a FIFO\)"):
        promptly(lambda: read_session(fifo), unblock=lambda: _unblock_fifo(fifo))


def test_directory_and_socket_are_refused(tmp_path: Path) -> None:
    (tmp_path / "dir.jsonl").mkdir()
    assert "not a regular file (a directory)" in refused(tmp_path / "dir.jsonl")
    sock_path = tmp_path / "sock.jsonl"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        assert "not a regular file (a socket)" in refused(sock_path)


def test_missing_file_is_an_error_not_an_oserror(tmp_path: Path) -> None:
    assert refused(tmp_path / "nope.jsonl").startswith(f"{tmp_path / 'nope.jsonl'}: cannot open: ")


# --- bounded reading -----------------------------------------------------------------------------

def test_a_200_mb_line_is_refused_at_the_default_line_cap(tmp_path: Path) -> None:
    huge = tmp_path / "huge.jsonl"
    with huge.open("wb") as fh:  # sparse: 200 MB of NUL bytes and no newline, written at once
        fh.truncate(200 * 2**20)
    limit = JsonlLimits().max_line_bytes
    assert refused(huge) == f"{huge}:1: line longer than {limit} bytes (max_line_bytes)"


def test_line_cap_applies_to_any_line(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", start(), message(1, "x" * 5000), message(2))
    assert refused(path, limits=JsonlLimits(max_line_bytes=1024)) == f"{path}:2: line longer than 1024 bytes (max_line_bytes)"
    assert len(read_session(path, limits=JsonlLimits(max_line_bytes=8192)).events) == 3  # the limit is the cap


def test_file_cap_refuses_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("wb") as fh:
        fh.truncate(JsonlLimits().max_file_bytes + 1)
    assert refused(big) == (f"{big}: file of {JsonlLimits().max_file_bytes + 1} bytes is larger than the limit of "
                            f"{JsonlLimits().max_file_bytes} bytes (max_file_bytes)")
    small = write(tmp_path / "s.jsonl", start(), message(1))
    assert "larger than the limit of 100 bytes" in refused(small, limits=JsonlLimits(max_file_bytes=100))


def test_file_cap_applies_to_a_file_that_grows_while_read(tmp_path: Path) -> None:
    from harness.jsonl import read_jsonl

    path = write(tmp_path / "s.jsonl", start(), message(1))
    lines = read_jsonl(path, limits=JsonlLimits(max_file_bytes=path.stat().st_size + 10))
    assert next(lines).number == 1  # opened and checked: within the cap
    with path.open("ab") as fh:
        fh.write((json.dumps(message(2)) + "\n").encode())
    assert next(lines).number == 2
    with pytest.raises(SessionFormatError, match=r"s\.jsonl:3: file grew past the limit of \d+ bytes"):
        next(lines)


# --- bad lines, named by FILE:LINE -------------------------------------------------------------------

def test_bad_json_line_is_named(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", start(), message(1), "{oops", message(3))
    assert refused(path).startswith(f"{path}:3: not valid JSON (")


@pytest.mark.parametrize("line", [1, 2])
def test_200000_nested_brackets_are_nested_too_deeply(tmp_path: Path, line: int) -> None:
    deep = "[" * 200_000
    path = write(tmp_path / "s.jsonl", *([start(), deep] if line == 2 else [deep]))
    assert refused(path) == f"{path}:{line}: nested too deeply (more than 64 levels of arrays/objects)"
    torn = write(tmp_path / "torn.jsonl", start(), deep, end=b"")  # no newline: still not a tear
    assert refused(torn).startswith(f"{torn}:2: nested too deeply")


def test_depth_is_bounded_below_pythons_recursion_limit(tmp_path: Path) -> None:
    def nested(depth: int) -> Any:
        value: Any = 1
        for _ in range(depth):
            value = {"k": value}
        return value

    ok = write(tmp_path / "ok.jsonl", start(meta=nested(30)))
    assert read_session(ok).start.meta["k"]["k"]["k"]
    deep = write(tmp_path / "deep.jsonl", start(meta=nested(200)))  # json parses it; recap refuses it
    assert refused(deep) == f"{deep}:1: nested too deeply (more than 64 levels of arrays/objects)"
    assert "nested too deeply (more than 10 levels" in refused(ok, limits=JsonlLimits(max_depth=10))


def test_invalid_event_and_wrong_first_line_are_named(tmp_path: Path) -> None:
    unknown = write(tmp_path / "u.jsonl", start(), {"type": "rm -rf", "seq": 1, "ts": 0})
    assert refused(unknown).startswith(f"{unknown}:2: invalid event: ")
    first = write(tmp_path / "f.jsonl", message(0))
    assert refused(first) == f"{first}:1: first line must be a session_start event"
    empty = write(tmp_path / "e.jsonl", end=b"")
    assert refused(empty) == f"{empty}:1: empty session file"


@pytest.mark.parametrize(("seqs", "line", "expected", "found"), [
    ((0, 2), 2, 1, 2),         # a gap
    ((0, 1, 1), 3, 2, 1),      # a duplicate
    ((0, 1, 3, 2), 3, 2, 3),   # out of order
])
def test_seq_gaps_and_duplicates_are_errors(tmp_path: Path, seqs: tuple[int, ...], line: int, expected: int,
                                            found: int) -> None:
    path = write(tmp_path / "s.jsonl", start(), *(message(s) for s in seqs[1:]))
    assert refused(path) == f"{path}:{line}: expected seq {expected}, found {found}"
    first = write(tmp_path / "first.jsonl", start(seq=5))
    assert refused(first) == f"{first}:1: expected seq 0, found 5"


def test_torn_last_line_is_still_read_up_to_the_tear(tmp_path: Path) -> None:
    good = json.dumps(message(2))
    path = write(tmp_path / "s.jsonl", start(), message(1), good[: len(good) // 2], end=b"")
    session = read_session(path)
    assert session.torn and [e.seq for e in session.events] == [0, 1]
    complete = write(tmp_path / "c.jsonl", start(), message(1), good[: len(good) // 2])  # with its newline: bad
    assert refused(complete).startswith(f"{complete}:3: not valid JSON")


def test_invalid_utf8_is_replaced_not_fatal(tmp_path: Path) -> None:
    path = write(tmp_path / "s.jsonl", json.dumps(start()).encode(), b'{"type": "user_message", "seq": 1, "ts": 0, '
                                                                      b'"content": "caf\xe9 \xff"}')
    assert read_session(path).events[1].content == "caf\ufffd \ufffd"


# --- the recorded start state ----------------------------------------------------------------------

def test_base_commit_cannot_be_a_git_option(tmp_path: Path, make_repo: Any) -> None:
    owned = tmp_path / "owned"
    path = write(tmp_path / "s.jsonl", start(repo=str(tmp_path), base_commit=f"--index-output={owned}"))
    assert refused(path).startswith(f"{path}:1: invalid event: session_start.base_commit")
    from shadow_backend.git_state import read_commit

    with pytest.raises(WorkspaceError, match="not a full commit id"):
        read_commit(make_repo({"a.txt": "a\n"}), f"--index-output={owned}")
    assert not owned.exists()


@pytest.mark.parametrize(("fields", "where"), [
    ({"repo": "relative/path"}, "session_start.repo"),
    ({"repo": "/tmp/a\0b"}, "session_start.repo"),
    ({"buffers": {"a\0b": "x"}}, "session_start.buffers"),
    ({"buffers": {"\ud800": "x"}}, "session_start.buffers"),
    ({"buffers": {"a.txt": "\ud800"}}, "session_start.buffers"),
    ({"base_diff": "\ud800"}, "session_start.base_diff"),
])
def test_unusable_start_fields_are_refused_on_read(tmp_path: Path, fields: dict[str, Any], where: str) -> None:
    path = write(tmp_path / "s.jsonl", start(**fields))
    assert refused(path).startswith(f"{path}:1: invalid event: {where}")


# --- replay: nothing runs or lands outside the sandbox ---------------------------------------------

def _observation(seq: int, obs_id: int, name: str, arguments: dict[str, Any], output: str = "") -> dict[str, Any]:
    return {"type": "observation", "seq": seq, "ts": 0.0, "turn": obs_id - 1, "obs_id": obs_id, "call_id": f"c{obs_id}",
            "name": name, "arguments": json.dumps(arguments), "output": output}


def _head(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.mark.parametrize("backend", ["local", "docker"])
def test_replayed_commands_run_only_in_the_sandbox(tmp_path: Path, make_repo: Any, backend: str) -> None:
    from shadow_backend.replay import replay_session

    repo = make_repo({"a.txt": "a\n"})
    owned = tmp_path / "owned"  # writable on the host: a command run there would create it
    path = write(tmp_path / "s.jsonl", start(repo=str(repo), base_commit=_head(repo)),
                 _observation(1, 1, "run_command", {"command": f"echo owned > {owned}; touch $HOME/recap-owned-{os.getpid()}"}),
                 _observation(2, 2, "write_file", {"path": str(owned), "content": "x"}),
                 _observation(3, 3, "run_command", {"command": "[" * 5000}),
                 {"type": "observation", "seq": 4, "ts": 0.0, "turn": 3, "obs_id": 4, "call_id": "c4", "name": "read_file",
                  "arguments": "[" * 200_000, "output": ""})
    result = replay_session(path, backend=backend)
    assert result.session_id == "hostile" and result.error is None and result.observations == 4
    assert not owned.exists() and not (Path.home() / f"recap-owned-{os.getpid()}").exists()


def test_verify_runs_only_in_the_sandbox(tmp_path: Path, make_repo: Any) -> None:
    from harness.policies.scripted import ScriptedPolicy
    from shadow_backend.replay import sample_rollouts

    repo = make_repo({"a.txt": "a\n"})
    owned = tmp_path / "owned"
    verify = f"echo owned > {owned}; touch $HOME/recap-owned-{os.getpid()}; echo verify-ran"
    path = write(tmp_path / "s.jsonl", start(repo=str(repo), base_commit=_head(repo), verify=verify))
    finish = [{"tool_calls": [{"name": "finish", "arguments": {"message": "done"}}]}]
    (rollout,) = sample_rollouts(path, lambda: ScriptedPolicy(finish), n=1)
    assert "verify-ran" in rollout.score["verify_output"]  # it ran: in the sandbox, whose writes stay there
    assert not owned.exists() and not (Path.home() / f"recap-owned-{os.getpid()}").exists()


def test_start_state_cannot_write_outside_the_workspace(tmp_path: Path, make_repo: Any) -> None:
    from shadow_backend.replay import replay_session

    repo = make_repo({"a.txt": "a\n"})
    owned = tmp_path / "owned"
    fsmonitor = f"[core]\n\tfsmonitor = touch {owned} #\n"
    link = "diff --git a/gl b/gl\nnew file mode 120000\n--- /dev/null\n+++ b/gl\n@@ -0,0 +1 @@\n+.git\n\\ No newline at end of file\n"
    hook = ("diff --git a/{p} b/{p}\nnew file mode 100755\n--- /dev/null\n+++ b/{p}\n@@ -0,0 +1,2 @@\n"
            f"+#!/bin/sh\n+touch {owned}\n")
    starts = {
        "up": {"buffers": {"../../owned": "x"}},
        "abs": {"buffers": {str(owned): "x"}},
        "git": {"buffers": {".git/config": fsmonitor}},
        "diff-git": {"base_diff": hook.format(p=".git/hooks/post-index-change")},
        "diff-up": {"base_diff": hook.format(p="../../owned")},
        "diff-link": {"base_diff": link + hook.format(p="gl/hooks/post-index-change")},
        "buffer-link": {"base_diff": link, "buffers": {"gl/config": fsmonitor}},
        "long-name": {"buffers": {"n" * 5000: "x"}},
    }
    for name, fields in starts.items():
        path = write(tmp_path / f"{name}.jsonl", start(repo=str(repo), base_commit=_head(repo), **fields))
        result = replay_session(path)
        assert result.error and result.error.startswith(f"{path}: cannot rebuild the start state: "), (name, result.error)
        assert not owned.exists(), name
    assert not (repo / "owned").exists() and (repo / "a.txt").read_text() == "a\n"


def test_recorded_model_adapter_and_config_are_not_obeyed(tmp_path: Path, make_repo: Any) -> None:
    """A FIFO as the recorded model/adapter: anything that loaded them would block. A huge recorded
    command timeout falls back to the defaults instead of crashing replay."""
    from rl.data import load_starts
    from shadow_backend.replay import replay_session, session_config

    repo = make_repo({"a.txt": "a\n"})
    trap = tmp_path / "trap"
    os.mkfifo(trap)
    folder = tmp_path / "sessions"
    folder.mkdir()
    path = write(folder / "s.jsonl", start(repo=str(repo), base_commit=_head(repo), model=f"scripted:{trap}",
                                           adapter_id=str(trap), config={"agent": {"command_timeout_s": 1e9}}))
    result = promptly(lambda: replay_session(path), unblock=lambda: _unblock_fifo(trap))
    assert result.error is None
    assert session_config(read_session(path)).agent.command_timeout_s == 120.0  # the default
    (loaded,) = promptly(lambda: load_starts(folder), unblock=lambda: _unblock_fifo(trap))
    assert loaded.model == f"scripted:{trap}"


def test_training_data_refuses_a_fifo_named_like_a_session(tmp_path: Path) -> None:
    from rl.data import load_starts, split_sessions

    os.mkfifo(tmp_path / "a.jsonl")
    write(tmp_path / "b.jsonl", start())
    for call in (lambda: load_starts(tmp_path), lambda: split_sessions([tmp_path], out=tmp_path / "out", held_out=0.5)):
        with pytest.raises(SessionFormatError, match=r"a\.jsonl: not a regular file \(a FIFO\)"):
            promptly(call, unblock=lambda: _unblock_fifo(tmp_path / "a.jsonl"))
    assert not (tmp_path / "out").exists()


# --- through the real command line -------------------------------------------------------------------

def _recap(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "recap", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "400"})


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """name -> (file, the `FILE:LINE:` (or `FILE:`) its error must name)."""
    d = tmp_path_factory.mktemp("hostile")
    os.mkfifo(d / "fifo.jsonl")
    with (d / "long.jsonl").open("wb") as fh:
        fh.truncate(200 * 2**20)  # sparse: one 200 MB line
    files = {
        "devzero": Path("/dev/zero"),
        "fifo": d / "fifo.jsonl",
        "long": d / "long.jsonl",
        "badjson": write(d / "badjson.jsonl", start(), message(1), "{not json"),
        "deep": write(d / "deep.jsonl", start(), "[" * 200_000),
        "gap": write(d / "gap.jsonl", start(), message(1), message(3)),
    }
    where = {"devzero": "/dev/zero: not a regular file", "fifo": f"{files['fifo']}: not a regular file",
             "long": f"{files['long']}:1: line longer than", "badjson": f"{files['badjson']}:3: not valid JSON",
             "deep": f"{files['deep']}:2: nested too deeply", "gap": f"{files['gap']}:3: expected seq 2, found 3"}
    return {name: (files[name], where[name]) for name in files}


def _assert_clean_error(out: subprocess.CompletedProcess[str], *expected: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout
    for text in expected:
        assert f"error: {text}" in out.stderr, (text, out.stderr)


@pytest.mark.parametrize("name", ["devzero", "fifo", "long", "badjson", "deep", "gap"])
def test_session_show_of_a_hostile_file(hostile_files: dict[str, tuple[Path, str]], name: str) -> None:
    path, expected = hostile_files[name]
    _assert_clean_error(_recap("session", "show", str(path), timeout=60), expected)


def test_replay_of_hostile_files(hostile_files: dict[str, tuple[Path, str]]) -> None:
    paths = [str(path) for path, _ in hostile_files.values()]
    _assert_clean_error(_recap("replay", *paths, timeout=120), *(expected for _, expected in hostile_files.values()))


def test_train_and_split_of_a_folder_with_a_hostile_file(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    write(folder / "a.jsonl", start())
    gap = write(folder / "b.jsonl", start(), message(2))
    _assert_clean_error(_recap("train", "--sessions", str(folder), "--model", "tiny", "--out", str(tmp_path / "run")),
                        f"{gap}:2: expected seq 1, found 2")
    os.mkfifo(folder / "c.jsonl")
    gap.unlink()
    _assert_clean_error(_recap("tasks", "split", str(folder), "--out", str(tmp_path / "split")),
                        f"{folder / 'c.jsonl'}: not a regular file (a FIFO)")


def test_session_show_prints_session_text_as_text(tmp_path: Path) -> None:
    """Markup and terminal escapes in a session are shown, not interpreted."""
    path = write(tmp_path / "s.jsonl",
                 start(session_id="[/x]", task="t\x1b]0;owned\x07 [bold]", config={"context": 5}),
                 {"type": "policy_turn", "seq": 1, "ts": 0.0, "turn": 0, "text": "hi \x1b[2J", "finish_reason": "[/oops]"},
                 {"type": "score", "seq": 2, "ts": 0.0, "rewards": {"[/r]": 1.0}})
    out = _recap("session", "show", str(path), timeout=60)
    assert out.returncode == 0, out.stderr
    assert "\x1b" not in out.stdout
    for shown in ("session [/x]", "t\\x1b]0;owned\\x07 [bold]", "hi \\x1b[2J", "[/oops]", "'[/r]': 1.0", "context: 5"):
        assert shown in out.stdout, (shown, out.stdout)


def test_a_recorded_setup_command_runs_only_when_the_user_says_so(tmp_path: Path, make_repo: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A set-up command runs with network access: one read from a session file (which may name any
    repository the user can read) is never run unless the user asks (`--setup recorded`); a build
    of it already cached on this machine is reused."""
    from shadow_backend.backends import rebuild_backend
    from shadow_backend.replay import origin_of, replay_session, with_setup

    monkeypatch.setenv("RECAP_CACHE_DIR", str(tmp_path / "cache"))
    repo = make_repo({"a.txt": "a\n"})
    setup = "cat a.txt > setup-read-this.txt; echo exfiltrated"
    path = write(tmp_path / "s.jsonl", start(repo=str(repo), base_commit=_head(repo), env={"setup": setup}))
    result = replay_session(path, backend="local")
    assert result.error is not None and "not run unless you say so" in result.error and "--setup recorded" in result.error
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("output.txt"))
    origin = origin_of(read_session(path))
    with pytest.raises(WorkspaceError, match="not run unless you say so"):
        rebuild_backend("local", origin)
    with rebuild_backend("local", with_setup(origin, "recorded")) as ws:  # the user trusts it: it runs
        assert ws.read_bytes("setup-read-this.txt") == b"a\n"
    with rebuild_backend("local", origin) as ws:  # now cached here: reused, nothing runs
        assert ws.read_bytes("setup-read-this.txt") == b"a\n"


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "directory"])
def test_script_and_config_files_that_are_not_regular_files_are_refused_at_once(tmp_path: Path, kind: str) -> None:
    """`--model scripted:FILE` and `--config FILE` name files too: a FIFO, a device or a folder is a
    clear error, never a hang or an endless read."""
    from harness.config import RecapConfig
    from harness.errors import ConfigError, PolicyError
    from harness.policies.scripted import ScriptedPolicy

    if kind == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    elif kind == "directory":
        path = str(tmp_path)
    else:
        path = kind
    for load, error in ((RecapConfig.from_toml, ConfigError), (ScriptedPolicy.from_file, PolicyError)):
        with pytest.raises(error, match="not a regular file"):
            promptly(lambda: load(path))
