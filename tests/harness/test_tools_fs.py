"""File tools on real workspaces: read_file, list_dir, edit_file, write_file, delete_file, and the
paths they must refuse."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from harness.tools import default_registry

REGISTRY = default_registry()


def call(ws: Any, name: str, **args: Any):
    return REGISTRY.call(name, args, ws)


# --- read_file -------------------------------------------------------------------------------


def test_read_file_numbers_lines_and_reads_ranges(workspace: Any) -> None:
    whole = call(workspace, "read_file", path="pkg/calc.py")
    assert not whole.is_error
    assert whole.output.splitlines()[0] == "     1\tdef add(a, b):"
    assert whole.output.splitlines()[-1] == "     6\t    return a - b"
    part = call(workspace, "read_file", path="pkg/calc.py", start_line=5, end_line=99)
    assert part.output.splitlines() == ["[pkg/calc.py: lines 5-6 of 6]", "     5\tdef sub(a, b):", "     6\t    return a - b"]


@pytest.mark.parametrize(
    ("args", "kind", "message"),
    [
        ({"path": "pkg/calc.py", "start_line": 7}, "tool_error", "start_line 7 is past the end of pkg/calc.py (6 lines)"),
        ({"path": "pkg/calc.py", "start_line": 4, "end_line": 2}, "bad_arguments", "end_line (2) is before start_line (4)"),
        ({"path": "pkg/calc.py", "start_line": 0}, "bad_arguments", "greater than or equal to 1"),
        ({"path": "pkg/missing.py"}, "tool_error", "pkg/missing.py: no such file"),
        ({"path": "pkg"}, "tool_error", "pkg is a directory; use list_dir"),
        ({"path": "pkg/calc.py", "lines": 3}, "bad_arguments", "lines: Extra inputs are not permitted"),
        ({"start_line": 1}, "bad_arguments", "path: Field required"),
    ],
)
def test_read_file_bad_input_is_an_error_observation(workspace: Any, args: dict, kind: str, message: str) -> None:
    result = REGISTRY.call("read_file", args, workspace)
    assert result.is_error and result.error_kind == kind
    assert message in result.output


def test_read_file_reports_binary_and_non_utf8_files(workspace_of: Any, make_repo: Any) -> None:
    ws = workspace_of(make_repo({"img.png": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR" + bytes(range(256)),
                                 "latin.txt": "café\nsecond\n".encode("latin-1")}))
    binary = call(ws, "read_file", path="img.png")
    assert binary.is_error and "img.png is a binary file (272 bytes)" in binary.output
    latin = call(ws, "read_file", path="latin.txt")
    assert not latin.is_error
    assert "latin.txt is not valid UTF-8 (first bad byte at offset 3)" in latin.output
    assert "     1\tcaf\ufffd" in latin.output and "     2\tsecond" in latin.output


def test_read_file_of_an_empty_file(workspace: Any) -> None:
    assert call(workspace, "read_file", path="pkg/__init__.py").output == "pkg/__init__.py is empty"


def test_long_file_is_cut_in_the_middle_with_a_marker(workspace: Any) -> None:
    workspace.write_bytes("big.txt", "".join(f"line {i}\n" for i in range(5000)).encode())
    out = call(workspace, "read_file", path="big.txt").output
    assert len(out) <= 8000
    assert out.startswith("     1\tline 0\n") and out.endswith("  5000\tline 4999")
    assert "chars (" in out and "lines) cut ...]" in out


# --- paths that leave the workspace ---------------------------------------------------------


@pytest.mark.parametrize("path", ["../outside.py", "pkg/../../outside.py", "/etc/passwd", "~/x", ".git/config", "escape/outside.py", "link.py"])
def test_paths_outside_the_workspace_are_refused(workspace_of: Any, make_repo: Any, tmp_path: Path, path: str) -> None:
    outside = tmp_path / "outside.py"
    outside.write_text("secret = 1\n")
    repo = make_repo({"a.txt": "a\n"})
    os.symlink(tmp_path, repo / "escape")
    os.symlink(outside, repo / "link.py")
    ws = workspace_of(repo)
    calls = {"read_file": {"path": path}, "write_file": {"path": path, "content": "x"},
             "delete_file": {"path": path}, "list_dir": {"path": path}, "outline": {"path": path},
             "edit_file": {"path": path, "old_string": "secret", "new_string": "public"},
             "grep": {"pattern": "secret", "path": path}}
    for tool, args in calls.items():
        result = REGISTRY.call(tool, args, ws)
        assert result.is_error and result.error_kind == "tool_error", (tool, result)
        assert "refused" in result.output and "secret" not in result.output, (tool, result)
    assert outside.read_text() == "secret = 1\n"


# --- list_dir --------------------------------------------------------------------------------


def test_list_dir_shows_a_tree_to_the_given_depth(workspace: Any) -> None:
    workspace.write_bytes("build/out.bin", b"ignored")
    workspace.write_bytes("debug.log", b"ignored")
    assert call(workspace, "list_dir").output.splitlines() == [
        "pkg/", "  util/ (1 file)", "  __init__.py", "  calc.py",
        "tests/", "  test_calc.py",
        "web/", "  app.js",
        ".gitignore", "README.md",
    ]
    assert call(workspace, "list_dir", path="pkg", depth=1).output.splitlines() == [
        "util/ (1 file)", "__init__.py", "calc.py"]
    assert call(workspace, "list_dir", path="pkg/util/", depth=3).output == "strings.py"


def test_list_dir_errors(workspace: Any) -> None:
    assert "no such directory" in call(workspace, "list_dir", path="nope").output
    assert "is a file, not a directory" in call(workspace, "list_dir", path="README.md").output
    assert REGISTRY.call("list_dir", {"depth": 0}, workspace).error_kind == "bad_arguments"


# --- edit_file -------------------------------------------------------------------------------


def test_edit_file_replaces_exactly_one_occurrence(workspace: Any) -> None:
    result = call(workspace, "edit_file", path="pkg/calc.py", old_string="return a - b", new_string="return b - a")
    assert not result.is_error
    assert result.output.splitlines()[0] == "edited pkg/calc.py: replaced line 6"
    assert "     6\t    return b - a" in result.output
    assert workspace.read_bytes("pkg/calc.py").decode().endswith("def sub(a, b):\n    return b - a\n")


def test_edit_file_refuses_a_missing_or_ambiguous_old_string(workspace: Any) -> None:
    before = workspace.read_bytes("pkg/calc.py")
    missing = call(workspace, "edit_file", path="pkg/calc.py", old_string="return a * b", new_string="x")
    assert missing.is_error and "old_string was not found in pkg/calc.py" in missing.output
    twice = call(workspace, "edit_file", path="pkg/calc.py", old_string="(a, b):", new_string="(x, y):")
    assert twice.is_error
    assert "old_string occurs 2 times in pkg/calc.py (at lines 1, 5)" in twice.output
    indented = call(workspace, "edit_file", path="pkg/calc.py", old_string="def sub(a, b):\nreturn a - b", new_string="x")
    assert "it matches at line 5 if whitespace is ignored" in indented.output
    assert workspace.read_bytes("pkg/calc.py") == before
    same = call(workspace, "edit_file", path="pkg/calc.py", old_string="add", new_string="add")
    assert same.is_error and "the same" in same.output
    empty = call(workspace, "edit_file", path="pkg/calc.py", old_string="", new_string="x")
    assert empty.is_error and "use write_file" in empty.output


def test_edit_file_replace_all(workspace: Any) -> None:
    result = call(workspace, "edit_file", path="pkg/calc.py", old_string="(a, b)", new_string="(x, y)", replace_all=True)
    assert result.output.startswith("edited pkg/calc.py: replaced 2 occurrences")
    assert workspace.read_bytes("pkg/calc.py").count(b"(x, y)") == 2


def test_edit_file_keeps_crlf_line_endings(workspace_of: Any, make_repo: Any) -> None:
    ws = workspace_of(make_repo({"win.txt": b"one\r\ntwo\r\nthree\r\n"}))
    result = call(ws, "edit_file", path="win.txt", old_string="one\ntwo", new_string="1\n2")
    assert not result.is_error
    assert ws.read_bytes("win.txt") == b"1\r\n2\r\nthree\r\n"


def test_edit_file_refuses_binary_and_non_utf8(workspace_of: Any, make_repo: Any) -> None:
    ws = workspace_of(make_repo({"b.bin": b"ab\0cd", "l.txt": "é\n".encode("latin-1")}))
    assert "binary file" in call(ws, "edit_file", path="b.bin", old_string="ab", new_string="x").output
    out = call(ws, "edit_file", path="l.txt", old_string="x", new_string="y").output
    assert "not valid UTF-8" in out and "write_file" in out
    assert ws.read_bytes("l.txt") == "é\n".encode("latin-1")


# --- write_file, delete_file -----------------------------------------------------------------


def test_write_file_creates_parents_and_overwrites(workspace: Any) -> None:
    assert call(workspace, "write_file", path="new/dir/f.txt", content="a\nb\n").output == "created new/dir/f.txt (2 lines, 4 bytes)"
    assert call(workspace, "write_file", path="new/dir/f.txt", content="c").output == "overwrote new/dir/f.txt (1 line, 1 bytes)"
    assert workspace.read_bytes("new/dir/f.txt") == b"c"
    assert "is a directory" in call(workspace, "write_file", path="pkg", content="x").output
    under_a_file = call(workspace, "write_file", path="README.md/x.txt", content="x")
    assert under_a_file.is_error and under_a_file.output == "write_file failed: Not a directory: README.md/x.txt"


def test_delete_file(workspace: Any) -> None:
    assert call(workspace, "delete_file", path="README.md").output == "deleted README.md"
    assert not workspace.exists("README.md")
    assert "no such file" in call(workspace, "delete_file", path="README.md").output
    assert "is a directory" in call(workspace, "delete_file", path="pkg").output
    assert workspace.exists("pkg/calc.py")


def test_file_changes_show_in_the_workspace_diff(workspace: Any) -> None:
    call(workspace, "write_file", path="added.txt", content="hello\n")
    call(workspace, "edit_file", path="pkg/calc.py", old_string="a + b", new_string="b + a")
    call(workspace, "delete_file", path="README.md")
    diff = workspace.diff()
    assert "diff --git a/added.txt b/added.txt\nnew file mode 100644" in diff
    assert "-    return a + b\n+    return b + a" in diff
    assert "diff --git a/README.md b/README.md\ndeleted file mode 100644" in diff
