"""run_command: exit codes, both streams, wall time, bounded output, and the timeout that kills the
whole process group."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any

import pytest

from harness.tools import default_registry
from harness.tools.command import format_command_result
from harness.workspace import CommandResult

REGISTRY = default_registry()


def _pids_running(marker: str) -> list[int]:
    """Host pids whose command line contains `marker`."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as handle:
                    if marker.encode() in handle.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def test_run_command_reports_exit_code_streams_and_time(workspace: Any) -> None:
    out = REGISTRY.call("run_command", {"command": "cat README.md; echo oops >&2; exit 3"}, workspace).output
    lines = out.splitlines()
    assert lines[0].startswith("exit code 3 (") and lines[0].endswith(" s wall time)")
    assert lines[1:] == ["--- stdout ---", "# sample", "", "A small project.", "--- stderr ---", "oops"]
    assert REGISTRY.call("run_command", {"command": "true"}, workspace).output.endswith("(no output)")


def test_run_command_timeout_kills_the_process_group(workspace: Any) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}.5"  # a unique `sleep` argument to find the child by
    started = time.monotonic()
    result = REGISTRY.call(
        "run_command", {"command": f"sleep {marker} & echo child started; wait", "timeout_s": 1}, workspace
    )
    assert time.monotonic() - started < 10
    assert result.output.startswith("TIMED OUT after 1s (process group killed)")
    assert "child started" in result.output
    deadline = time.monotonic() + 5
    while _pids_running(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _pids_running(marker) == []


def test_background_leftovers_are_killed_when_the_command_exits(workspace: Any) -> None:
    marker = f"{uuid.uuid4().int % 10**6 + 10**6}.25"
    result = workspace.run(f"sleep {marker} & echo done", timeout_s=30)
    assert result.exit_code == 0 and not result.timed_out and result.stdout == "done\n"
    assert result.duration_s < 5
    time.sleep(0.2)
    assert _pids_running(marker) == []


def test_timeout_is_bounded_and_validated(workspace: Any) -> None:
    for bad in (0, -1, 601, "soon"):
        result = REGISTRY.call("run_command", {"command": "true", "timeout_s": bad}, workspace)
        assert result.is_error and result.error_kind == "bad_arguments"
    assert REGISTRY.call("run_command", {"command": ""}, workspace).error_kind == "bad_arguments"
    schema = default_registry(command_timeout_s=120).get("run_command").parameters_schema()
    assert schema["properties"]["timeout_s"]["default"] == 120
    with pytest.raises(ValueError):
        default_registry(command_timeout_s=10_000)


def test_huge_output_is_bounded(workspace: Any) -> None:
    result = REGISTRY.call("run_command", {"command": "seq 1 2000000; seq 1 100000 >&2"}, workspace)
    assert len(result.output) <= 8000
    assert "--- stdout ---\n1\n2\n" in result.output and "1999999\n2000000\n--- stderr ---" in result.output
    assert result.output.endswith("99999\n100000") and result.output.count("cut ...]") == 2


def test_format_gives_a_short_stream_its_whole_text() -> None:
    text = format_command_result(CommandResult(1, "o" * 50_000, "the error\n", False, 0.5), timeout_s=60)
    assert len(text) <= 8000 and text.endswith("--- stderr ---\nthe error")


def test_missing_program_is_exit_127(workspace: Any) -> None:
    result = workspace.run(["no-such-program-xyz", "--help"], timeout_s=5)
    assert result.exit_code == 127 and "not found" in result.stderr
    shell = workspace.run("no-such-program-xyz", timeout_s=5)
    assert shell.exit_code == 127
