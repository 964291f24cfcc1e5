"""Hostile commands on both backends: a command that sleeps forever, forks in a loop, fills memory
or opens a network socket is stopped or refused, and the workspace and the host stay intact."""

from __future__ import annotations

import os
import threading
import time
import uuid
from pathlib import Path

from harness.workspace import Workspace


def _host_processes_with(marker: str) -> list[str]:
    """Command lines of host processes containing `marker` (container processes included)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append(cmdline)
    return found


def _gone(marker: str, *, within_s: float = 10.0) -> list[str]:
    """Processes with `marker` still alive after waiting up to `within_s` (a killed PID namespace
    is torn down by the kernel asynchronously; on a loaded machine that takes a moment)."""
    deadline = time.monotonic() + within_s
    while (left := _host_processes_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _still_works(workspace: Workspace) -> None:
    result = workspace.run("echo alive && cat README.md", timeout_s=30)
    assert result.exit_code == 0, result
    assert result.stdout == "alive\n# demo\n"


def test_sleep_forever_is_killed_with_its_whole_tree(shared_workspace: Workspace) -> None:
    marker = f"{time.time() % 1000:.3f}{uuid.uuid4().int % 1000}"
    started = time.monotonic()
    result = shared_workspace.run(
        f"sleep {marker}1 & setsid sleep {marker}2 & (sleep {marker}3 &) ; sleep {marker}4", timeout_s=1.5
    )
    assert result.timed_out is True
    assert result.exit_code < 0
    assert time.monotonic() - started < 10
    assert _gone(marker) == []
    _still_works(shared_workspace)


def test_interrupt_kills_the_running_command_from_another_thread(shared_workspace: Workspace) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.25"
    timer = threading.Timer(1.5, shared_workspace.interrupt)
    timer.start()
    started = time.monotonic()
    result = shared_workspace.run(f"echo before; sleep {marker}00", timeout_s=300)
    timer.join()
    assert time.monotonic() - started < 30 and result.timed_out is False
    assert result.exit_code != 0 and result.stdout == "before\n"
    assert _gone(marker) == []
    _still_works(shared_workspace)


def test_fork_loop_is_stopped(shared_workspace: Workspace) -> None:
    marker = f"{uuid.uuid4().int % 10**6}.5"
    result = shared_workspace.run(f"while true; do sleep {marker} & done", timeout_s=3)
    # Either the pids limit refuses the forks until the timeout fires, or the timeout alone stops it.
    assert result.timed_out is True
    assert _gone(marker) == []
    _still_works(shared_workspace)


def test_filling_memory_is_refused(shared_workspace: Workspace) -> None:
    # 6 GiB: above the local RLIMIT_DATA (4 GiB) and the container's memory limit (1 GiB).
    result = shared_workspace.run("python3 -c 'b = bytearray(6 * 1024**3); print(len(b))'", timeout_s=60)
    assert result.exit_code != 0
    assert result.stdout == ""
    _still_works(shared_workspace)


def test_network_is_refused(shared_workspace: Workspace) -> None:
    code = (
        "import socket\n"
        "s = socket.socket()\n"
        "s.settimeout(5)\n"
        "s.connect(('1.1.1.1', 80))\n"
        "print('connected')\n"
    )
    shared_workspace.write_bytes("net_probe.py", code.encode())
    try:
        result = shared_workspace.run(["python3", "net_probe.py"], timeout_s=30)
    finally:
        shared_workspace.delete("net_probe.py")
    assert result.exit_code != 0
    assert "connected" not in result.stdout
    assert "unreachable" in result.stderr.lower(), result.stderr
    assert "no network" in shared_workspace.origin.sandbox or "network_mode=none" in shared_workspace.origin.sandbox


def test_output_is_bounded(shared_workspace: Workspace) -> None:
    result = shared_workspace.run("head -c 50000000 /dev/zero | tr '\\0' x; echo END", timeout_s=60)
    assert result.exit_code == 0
    assert len(result.stdout) < 3_000_000
    assert result.stdout.startswith("xxxx")
    assert result.stdout.endswith("END\n")
    assert "cut" in result.stdout or "dropped" in result.stdout
