"""The tool set as a whole: specs, malformed calls through `ToolRegistry.call`, the output bound,
and that tools reach files only through the `Workspace` protocol (an in-memory workspace)."""

from __future__ import annotations

import json
import re
from pathlib import PurePosixPath
from typing import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.errors import PathOutsideWorkspace
from harness.tools import DEFAULT_TOOLS, MAX_OUTPUT_CHARS, default_registry
from harness.truncate import MIN_CHARS, truncate_middle
from harness.workspace import CommandResult

REGISTRY = default_registry()


class MemoryWorkspace:
    """A `Workspace` held in a dict: no host files at all, and no programs (exit 127)."""

    root = "memory:"

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = dict(files)

    def _check(self, path: str) -> str:
        pure = PurePosixPath(path)
        if pure.is_absolute() or ".." in pure.parts:
            raise PathOutsideWorkspace(f"path {path!r} refused")
        return "" if str(pure) == "." else str(pure)

    def read_bytes(self, path: str) -> bytes:
        key = self._check(path)
        if key not in self.files:
            raise FileNotFoundError(2, "No such file or directory", path)
        return self.files[key]

    def write_bytes(self, path: str, data: bytes) -> None:
        self.files[self._check(path)] = data

    def delete(self, path: str) -> None:
        del self.files[self._check(path)]

    def exists(self, path: str) -> bool:
        return self.is_dir(path) or self._check(path) in self.files

    def is_dir(self, path: str) -> bool:
        key = self._check(path)
        return key == "" or any(f.startswith(key + "/") for f in self.files)

    def list_files(self, path: str = ".") -> list[str]:
        key = self._check(path)
        return sorted(f for f in self.files if key in ("", f) or f.startswith(key + "/"))

    def run(self, command: str | Sequence[str], *, timeout_s: float) -> CommandResult:
        return CommandResult(127, "", "no programs in memory", False, 0.0)

    def interrupt(self) -> None:
        pass  # nothing ever runs

    def diff(self) -> str:
        return ""

    def close(self) -> None:
        pass


def test_tools_work_on_any_workspace_implementation() -> None:
    ws = MemoryWorkspace({"a.py": b"def f():\n    return 1\n", "d/b.txt": b"hello\n"})
    assert REGISTRY.call("read_file", {"path": "a.py"}, ws).output == "     1\tdef f():\n     2\t    return 1"
    assert REGISTRY.call("list_dir", {}, ws).output == "d/\n  b.txt\na.py"
    assert REGISTRY.call("glob", {"pattern": "**/*.txt"}, ws).output == "d/b.txt"
    assert REGISTRY.call("grep", {"pattern": "return"}, ws).output == "a.py:2:    return 1"
    assert REGISTRY.call("outline", {"path": "a.py"}, ws).output == "    1 function f"
    REGISTRY.call("edit_file", {"path": "a.py", "old_string": "1", "new_string": "2"}, ws)
    REGISTRY.call("write_file", {"path": "c.txt", "content": "new"}, ws)
    REGISTRY.call("delete_file", {"path": "d/b.txt"}, ws)
    assert ws.files == {"a.py": b"def f():\n    return 2\n", "c.txt": b"new"}
    assert REGISTRY.call("run_command", {"command": "ls"}, ws).output.startswith("exit code 127")


def test_specs_are_openai_function_specs() -> None:
    specs = REGISTRY.specs()
    assert [s["function"]["name"] for s in specs] == [t.name for t in DEFAULT_TOOLS]
    assert "prune" not in REGISTRY
    for spec in specs:
        params = spec["function"]["parameters"]
        assert spec["type"] == "function" and spec["function"]["description"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert all(p.get("description") for p in params["properties"].values()), spec["function"]["name"]
        json.dumps(spec)


@pytest.mark.parametrize(
    ("name", "arguments", "kind"),
    [
        ("read_file", "{not json", "malformed"),
        ("read_file", "[1, 2]", "malformed"),
        ("read_file", {"path": 3}, "bad_arguments"),
        ("read_file", {"path": "a.py", "start_line": "one"}, "bad_arguments"),
        ("edit_file", {"path": "a.py", "old_string": "x"}, "bad_arguments"),
        ("edit_file", {"path": "a.py", "old_string": "x", "new_string": "y", "replace_all": "maybe"}, "bad_arguments"),
        ("grep", {"pattern": "x", "paths": ["a"]}, "bad_arguments"),
        ("finish", {}, "bad_arguments"),
        ("rm_rf", {"path": "."}, "unknown_tool"),
    ],
)
def test_malformed_calls_become_error_observations(name: str, arguments: object, kind: str) -> None:
    ws = MemoryWorkspace({"a.py": b"x = 1\n"})
    result = REGISTRY.call(name, arguments, ws)
    assert result.is_error and result.error_kind == kind and result.output
    assert ws.files == {"a.py": b"x = 1\n"}


def test_finish_ends_the_episode() -> None:
    result = REGISTRY.call("finish", {"message": "done: fixed the bug"}, MemoryWorkspace({}))
    assert result.finished and not result.is_error and result.output == "done: fixed the bug"


def test_every_output_is_bounded() -> None:
    ws = MemoryWorkspace({f"d{i}/f{i}.txt": b"needle " * 50 + b"\n" for i in range(2000)})
    for name, args in [("list_dir", {"depth": 3}), ("glob", {"pattern": "**/*"}), ("grep", {"pattern": "needle"}),
                       ("finish", {"message": "m" * 20_000})]:
        out = REGISTRY.call(name, args, ws).output
        assert len(out) <= MAX_OUTPUT_CHARS, name


def test_truncate_marker_says_what_was_cut() -> None:
    text = "".join(f"line {i}\n" for i in range(1000))
    cut = truncate_middle(text, max_chars=200)
    head, _, rest = cut.partition("\n[... ")
    marker, _, tail = rest.partition(" ...]\n")
    chars, lines = re.fullmatch(r"([\d,]+) chars \(([\d,]+) lines\) cut", marker).groups()
    assert text.startswith(head + "\n") and text.endswith(tail) and tail.endswith("line 999\n")
    assert int(chars.replace(",", "")) == len(text) - len(head) - 1 - len(tail)
    assert int(lines.replace(",", "")) == 1000 - (head.count("\n") + 1) - tail.count("\n")
    assert truncate_middle("short", max_chars=100) == "short"
    with pytest.raises(ValueError):
        truncate_middle(text, max_chars=MIN_CHARS - 1)


@given(st.text(), st.integers(min_value=MIN_CHARS, max_value=500))
def test_truncate_never_exceeds_the_bound(text: str, max_chars: int) -> None:
    out = truncate_middle(text, max_chars=max_chars)
    assert len(out) <= max_chars
    if len(text) <= max_chars:
        assert out == text
    else:
        assert "chars (" in out and "cut ...]" in out
