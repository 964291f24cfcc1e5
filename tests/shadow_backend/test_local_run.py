"""Commands in a local workspace: sandbox (no network, read-only toolchain, private /tmp), scrubbed
environment, limits, output bounded while reading, process-group kill with and without bwrap."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness.errors import ConfigError
from shadow_backend.local import LocalBackend, LocalConfig, bwrap_works


@pytest.fixture
def repo(make_repo: Any) -> Path:
    return make_repo({"a.txt": "a\n"})


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on the host's loopback that answers every connection with b"pong"."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(b"pong")
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def _connect(port: int) -> str:
    return (f"python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=3); "
            f"print(s.recv(4).decode())\"")


def test_bwrap_is_used_here() -> None:
    assert bwrap_works(), "bubblewrap must work where the tests run (CI installs it)"


def test_network_is_refused_unless_asked_for(repo: Path, listener: int) -> None:
    with LocalBackend.create(repo) as ws:
        assert ws.origin.sandbox.startswith("bwrap: no network, toolchain read-only")
        refused = ws.run(_connect(listener), timeout_s=30)
        assert refused.exit_code != 0 and "pong" not in refused.stdout
        assert "refused" in refused.stderr or "unreachable" in refused.stderr
    with LocalBackend.create(repo, network=True) as ws:
        assert ws.origin.sandbox.startswith("bwrap: network allowed, toolchain read-only")
        assert ws.run(_connect(listener), timeout_s=30).stdout == "pong\n"


def test_host_is_read_only_and_tmp_is_private(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "host-file.txt"
    host_tmp = Path("/tmp") / f"recap-test-{uuid.uuid4().hex}"
    with LocalBackend.create(repo) as ws:
        result = ws.run(f"echo x > {marker}; echo y > {repo}/a.txt; echo z > {host_tmp}; cat {host_tmp}; "
                        "echo w > inside.txt; echo h > $HOME/h", timeout_s=30)
        assert result.stdout == "z\n"
        assert ws.read_bytes("inside.txt") == b"w\n"
    assert not marker.exists() and (repo / "a.txt").read_text() == "a\n" and not host_tmp.exists()


def test_user_history_is_hidden_from_commands(repo: Path) -> None:
    # the user's .git is an answer source (RL) and none of the agent's business: it is an empty tmpfs
    with LocalBackend.create(repo) as ws:
        hidden = ws.run(f"ls -A {repo}/.git; git -C {repo} log --oneline", timeout_s=30)
        own = ws.run("git log --oneline", timeout_s=30)
    assert hidden.stdout == "" and hidden.exit_code != 0
    assert [line.split(" ", 1)[1] for line in own.stdout.splitlines()] == ["start", "base"]
    assert (repo / ".git" / "HEAD").exists()


def test_programs_on_path_below_tmp_stay_visible(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a virtualenv in a checkout under /tmp (CI clones there) must still run inside the private /tmp
    env = tmp_path / "venv"
    (env / "bin").mkdir(parents=True)
    (env / "pyvenv.cfg").write_text("home = /usr/bin\n")
    tool = env / "bin" / "recap-test-tool"
    tool.write_text("#!/bin/sh\necho tool ran; cat \"$(dirname \"$0\")/../pyvenv.cfg\"\n")
    tool.chmod(0o755)
    secret = tmp_path / "secret.txt"
    secret.write_text("host /tmp file\n")
    monkeypatch.setenv("PATH", f"{env / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with LocalBackend.create(repo) as ws:
        result = ws.run(f"recap-test-tool; cat {secret}; touch {env}/new", timeout_s=30)
    assert result.stdout == "tool ran\nhome = /usr/bin\n"
    assert "No such file" in result.stderr and not (env / "new").exists()


def test_environment_is_scrubbed(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECAP_TEST_SECRET", "hunter2")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "hunter3")
    with LocalBackend.create(repo) as ws:
        env = dict(line.split("=", 1) for line in ws.run("env", timeout_s=30).stdout.splitlines() if "=" in line)
        assert "hunter2" not in str(env) and "hunter3" not in str(env)
        assert env["LANG"] == "C.UTF-8" and env["TERM"] == "dumb"
        assert Path(env["HOME"]).parent == Path(ws.root).parent
        assert ws.run("pwd", timeout_s=30).stdout.strip() == ws.root


@pytest.mark.parametrize("sandbox", ["auto", "none"])
def test_timeout_kills_the_whole_group(repo: Path, sandbox: str) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}.75"
    with LocalBackend.create(repo, config=LocalConfig(sandbox=sandbox)) as ws:
        assert ws.origin.sandbox.startswith("bwrap" if sandbox == "auto" else "none: sandbox disabled")
        started = time.monotonic()
        result = ws.run(f"(sleep {marker}; echo late) & sleep {marker}", timeout_s=1)
        assert result.timed_out and result.exit_code == -9
        assert 0.9 < time.monotonic() - started < 10
        time.sleep(0.2)
        assert not any(marker.encode() in _cmdline(pid) for pid in os.listdir("/proc") if pid.isdigit())


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_output_is_bounded_while_reading(repo: Path) -> None:
    config = LocalConfig(max_output_bytes=64 * 1024)
    with LocalBackend.create(repo, config=config) as ws:
        result = ws.run("head -c 200000000 /dev/zero | tr '\\0' x; echo; echo END", timeout_s=60)
        assert result.exit_code == 0
        assert len(result.stdout) < 70 * 1024
        assert "bytes cut while reading ...]" in result.stdout and result.stdout.endswith("x\nEND\n")


def test_memory_limit(repo: Path) -> None:
    with LocalBackend.create(repo, config=LocalConfig(memory_limit_bytes=256 * 2**20)) as ws:
        result = ws.run("python3 -c 'b = bytearray(1024 * 1024 * 1024); print(len(b))'", timeout_s=60)
        assert result.exit_code != 0 and "MemoryError" in result.stderr
        assert ws.run("python3 -c 'print(len(bytearray(10_000_000)))'", timeout_s=60).stdout == "10000000\n"


def test_config_is_validated() -> None:
    for bad in ({"sandbox": "docker"}, {"memory_limit_bytes": 10}, {"max_processes": 0}, {"max_output_bytes": 10},
                {"tmp_size_bytes": 1000}, {"disk_quota_bytes": 1000}):
        with pytest.raises(ConfigError):
            LocalConfig(**bad)


def test_run_arguments(repo: Path) -> None:
    with LocalBackend.create(repo) as ws:
        assert ws.run(["cat", "a.txt"], timeout_s=30).stdout == "a\n"
        assert ws.run("exit 7", timeout_s=30).exit_code == 7
        with pytest.raises(ValueError):
            ws.run("true", timeout_s=0)
