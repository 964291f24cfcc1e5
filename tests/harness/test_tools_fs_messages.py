"""What the file tools tell the model when an edit goes wrong the way models get it wrong
(issue 13, faults 5, 6, 9), on real workspaces."""

from __future__ import annotations

from typing import Any

import pytest

from harness.toolcall import parse_tool_calls
from harness.tools import default_registry
from harness.tools.fs import NO_FINAL_NEWLINE

REGISTRY = default_registry()


@pytest.fixture
def ws(workspace_of, make_repo):
    return workspace_of(make_repo({"conf.py": "name = 'x'\nlevel = 3", "calc.py": "def one():\n    return 1\n\n\ndef two():\n    return 2\n"}))


def call(ws: Any, name: str, **args: Any):
    return REGISTRY.call(name, args, ws)


def test_read_file_marks_a_missing_final_newline(ws):
    out = call(ws, "read_file", path="conf.py").output
    assert out.splitlines()[-1] == NO_FINAL_NEWLINE == "\\ No newline at end of file"
    assert NO_FINAL_NEWLINE not in call(ws, "read_file", path="calc.py").output
    # a range that stops before the last line says nothing about it
    assert NO_FINAL_NEWLINE not in call(ws, "read_file", path="conf.py", end_line=1).output


def test_edit_error_names_the_missing_final_newline(ws):
    result = call(ws, "edit_file", path="conf.py", old_string="level = 3\n", new_string="level = 4\n")
    assert result.is_error
    assert "no newline at its end" in result.output and "drop the final newline" in result.output
    assert "indentation" not in result.output
    assert ws.read_bytes("conf.py") == b"name = 'x'\nlevel = 3"
    ok = call(ws, "edit_file", path="conf.py", old_string="level = 3", new_string="level = 4")
    assert not ok.is_error and ws.read_bytes("conf.py") == b"name = 'x'\nlevel = 4"


def test_old_string_copied_with_the_gutter_is_recognised(ws):
    shown = call(ws, "read_file", path="calc.py").output.splitlines()
    assert shown[1] == "     2\t    return 1"
    result = call(ws, "edit_file", path="calc.py", old_string=shown[1], new_string="    return 11")
    assert not result.is_error, result.output
    assert "line numbers read_file shows were removed" in result.output
    assert ws.read_bytes("calc.py").decode().splitlines()[1] == "    return 11"
    # new_string with the gutter on every line loses it too
    result = call(ws, "edit_file", path="calc.py", old_string="     5\tdef two():\n     6\t    return 2",
                  new_string="     5\tdef two():\n     6\t    return 22")
    assert not result.is_error and "    return 22\n" in ws.read_bytes("calc.py").decode()


def test_a_gutter_that_does_not_match_is_named_in_the_error(ws):
    result = call(ws, "edit_file", path="calc.py", old_string="     2\t    return 7", new_string="x")
    assert result.is_error and "the gutter read_file adds" in result.output


def test_a_gutter_is_never_stripped_from_text_that_really_has_it(workspace_of, make_repo):
    ws = workspace_of(make_repo({"data.tsv": "1\tone\n2\ttwo\n"}))
    result = call(ws, "edit_file", path="data.tsv", old_string="2\ttwo", new_string="2\tTWO")
    assert not result.is_error and "removed" not in result.output
    assert ws.read_bytes("data.tsv") == b"1\tone\n2\tTWO\n"


def test_write_file_of_the_same_content_says_unchanged(ws):
    result = call(ws, "write_file", path="calc.py", content=ws.read_bytes("calc.py").decode())
    assert result.output.startswith("unchanged calc.py")
    assert call(ws, "write_file", path="calc.py", content="x = 1\n").output.startswith("overwrote calc.py")


def test_malformed_json_message_reads_well():
    _, calls, errors = parse_tool_calls('<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py</tool_call>', turn=0)
    assert not calls and len(errors) == 1
    assert "at at" not in errors[0] and "Unterminated string starting at: line 1 column" in errors[0]
