"""File tools: read_file, list_dir, edit_file, write_file, delete_file.

All of them act through the `Workspace` protocol only; paths are workspace-relative and refused
(by the workspace) when they would leave it.
"""

from __future__ import annotations

import re

from pydantic import Field, model_validator

from harness.errors import ToolError
from harness.tools.base import Tool, ToolResult
from harness.tools.common import Params, bounded, read_text, require_file
from harness.workspace import Workspace

EDIT_CONTEXT_LINES = 3
"""Lines shown around an edit in edit_file's reply."""

NO_FINAL_NEWLINE = "\\ No newline at end of file"
"""read_file's last line for a file that does not end with a newline (git's diff marker)."""

_GUTTER = re.compile(r"^ *\d+\t", re.MULTILINE)
"""read_file's line-number gutter (`cat -n` style: spaces, the number, a tab)."""


def _numbered(lines: list[str], first: int) -> str:
    """`cat -n` style: right-aligned 1-based numbers, a tab, the line."""
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, start=first))


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


# --- read_file -------------------------------------------------------------------------------


class ReadFileParams(Params):
    path: str = Field(description="File path relative to the workspace root.")
    start_line: int | None = Field(None, ge=1, description="First line to show (1-based, default 1).")
    end_line: int | None = Field(None, ge=1, description="Last line to show (inclusive, default: end of file).")

    @model_validator(mode="after")
    def _ordered(self) -> "ReadFileParams":
        if self.start_line is not None and self.end_line is not None and self.end_line < self.start_line:
            raise ValueError(f"end_line ({self.end_line}) is before start_line ({self.start_line})")
        return self


def read_file(params: ReadFileParams, workspace: Workspace) -> ToolResult:
    text, note = read_text(workspace, params.path, lossy=True)
    lines = _lines(text)
    if not lines:
        return ToolResult(f"{params.path} is empty")
    first = params.start_line or 1
    if first > len(lines):
        raise ToolError(f"start_line {first} is past the end of {params.path} ({len(lines)} lines)")
    last = min(params.end_line or len(lines), len(lines))
    body = _numbered(lines[first - 1 : last], first)
    if last == len(lines) and not text.endswith("\n"):
        body += "\n" + NO_FINAL_NEWLINE
    header = [note] if note else []
    if (first, last) != (1, len(lines)):
        header.append(f"[{params.path}: lines {first}-{last} of {len(lines)}]")
    return ToolResult(bounded("\n".join([*header, body])))


# --- list_dir --------------------------------------------------------------------------------


class ListDirParams(Params):
    path: str = Field(".", description="Directory relative to the workspace root ('.' is the root).")
    depth: int = Field(2, ge=1, le=10, description="How many directory levels to show.")


def list_dir(params: ListDirParams, workspace: Workspace) -> ToolResult:
    if not workspace.exists(params.path):
        raise ToolError(f"{params.path}: no such directory")
    if not workspace.is_dir(params.path):
        raise ToolError(f"{params.path} is a file, not a directory; use read_file to read it")
    prefix = "" if params.path.strip("/") in ("", ".") else params.path.strip("/") + "/"
    tree: dict = {}
    for file in workspace.list_files(params.path):
        node = tree
        parts = file[len(prefix):].split("/") if file.startswith(prefix) else file.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part + "/", {})
        node[parts[-1]] = None
    if not tree:
        return ToolResult(f"{params.path} holds no files (ignored files are not listed)")
    out: list[str] = []
    _render_tree(tree, out, indent=0, depth=params.depth)
    return ToolResult(bounded("\n".join(out)))


def _count_files(node: dict) -> int:
    return sum(1 if child is None else _count_files(child) for child in node.values())


def _render_tree(node: dict, out: list[str], *, indent: int, depth: int) -> None:
    """Directories first (with a trailing '/'), then files; past `depth`, a file count."""
    for name in sorted(node, key=lambda n: (node[n] is None, n)):
        child = node[name]
        if child is None:
            out.append("  " * indent + name)
        elif depth <= 1:
            count = _count_files(child)
            out.append("  " * indent + f"{name} ({count} file{'s' if count != 1 else ''})")
        else:
            out.append("  " * indent + name)
            _render_tree(child, out, indent=indent + 1, depth=depth - 1)


# --- edit_file -------------------------------------------------------------------------------


class EditFileParams(Params):
    path: str = Field(description="File path relative to the workspace root.")
    old_string: str = Field(description="Exact text to replace (whitespace and indentation included).")
    new_string: str = Field(description="Replacement text.")
    replace_all: bool = Field(False, description="Replace every occurrence instead of requiring exactly one.")


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def edit_file(params: EditFileParams, workspace: Workspace) -> ToolResult:
    if params.old_string == "":
        raise ToolError("old_string is empty; to create or overwrite a file use write_file")
    if params.old_string == params.new_string:
        raise ToolError("old_string and new_string are the same; nothing to change")
    text, _ = read_text(workspace, params.path)
    old, new = params.old_string, params.new_string
    if old not in text and "\r\n" in text and "\r\n" not in old:  # a CRLF file edited with "\n"
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
    starts = _occurrences(text, old)
    stripped = ""
    if not starts:
        old, new, stripped = _without_gutter(text, old, new)
        starts = _occurrences(text, old) if stripped else []
    if not starts:
        raise ToolError(f"old_string was not found in {params.path}{_why_not_found(text, old, params.path)}")
    if len(starts) > 1 and not params.replace_all:
        lines = ", ".join(str(_line_of(text, s)) for s in starts[:20])
        raise ToolError(f"old_string occurs {len(starts)} times in {params.path} (at lines {lines}); "
                        "include more surrounding lines to make it unique, or set replace_all")
    edited = text.replace(old, new)
    workspace.write_bytes(params.path, edited.encode("utf-8"))
    first = _line_of(edited, starts[0])  # nothing before the first occurrence moved
    last = first + new.count("\n")
    lines = _lines(edited)
    lo, hi = max(1, first - EDIT_CONTEXT_LINES), min(len(lines), last + EDIT_CONTEXT_LINES)
    what = f"{len(starts)} occurrences" if len(starts) > 1 else f"lines {first}-{last}" if last > first else f"line {first}"
    return ToolResult(bounded(f"edited {params.path}: replaced {what}{stripped}\n{_numbered(lines[lo - 1 : hi], lo)}"))


def _occurrences(text: str, old: str) -> list[int]:
    """Start offsets of non-overlapping occurrences (what `str.replace` replaces)."""
    starts, at = [], text.find(old)
    while at != -1:
        starts.append(at)
        at = text.find(old, at + len(old))
    return starts


def _has_gutter(text: str) -> bool:
    """Every line of `text` starts with read_file's line-number gutter."""
    lines = _lines(text)
    return bool(lines) and all(_GUTTER.match(line) for line in lines)


def _without_gutter(text: str, old: str, new: str) -> tuple[str, str, str]:
    """(old, new, note) with read_file's line-number gutter removed from `old` (and from `new`
    when every line of it has one too), when that makes `old` occur in `text`; else unchanged and
    no note. The gutter is recognised only when every line of `old` has it, so text that really
    starts with a number and a tab on one line is never touched."""
    if not _has_gutter(old):
        return old, new, ""
    bare = _GUTTER.sub("", old)
    if bare not in text:
        return old, new, ""
    if _has_gutter(new):
        new = _GUTTER.sub("", new)
    return bare, new, " (the line numbers read_file shows were removed from old_string)"


def _why_not_found(text: str, old: str, path: str) -> str:
    """The most specific reason `old` is not in `text`, and what to do."""
    if old.endswith("\n") and not text.endswith("\n") and text.endswith(old[:-1]):
        return (f": {path} has no newline at its end (read_file shows '{NO_FINAL_NEWLINE}'); "
                "drop the final newline from old_string")
    if _has_gutter(old):
        return (": old_string starts each line with a line number and a tab, the gutter read_file adds; "
                "copy the text after the gutter")
    return f"{_near_miss(text, old)}; read the file and copy the text exactly"


def _near_miss(text: str, old: str) -> str:
    """A hint when `old` matches once leading/trailing whitespace of each line is ignored."""
    want = [line.strip() for line in _lines(old)]
    have = [line.strip() for line in _lines(text)]
    if not want or not any(want):
        return ""
    for i in range(len(have) - len(want) + 1):
        if have[i : i + len(want)] == want:
            return f" (it matches at line {i + 1} if whitespace is ignored: check indentation and spaces)"
    return ""


# --- write_file, delete_file -----------------------------------------------------------------


class WriteFileParams(Params):
    path: str = Field(description="File path relative to the workspace root; parent directories are created.")
    content: str = Field(description="The complete new content of the file.")


def write_file(params: WriteFileParams, workspace: Workspace) -> ToolResult:
    existed = workspace.exists(params.path)
    if existed and workspace.is_dir(params.path):
        raise ToolError(f"{params.path} is a directory; give a file path")
    data = params.content.encode("utf-8")
    lines = len(_lines(params.content))
    if existed and workspace.read_bytes(params.path) == data:
        return ToolResult(f"unchanged {params.path}: it already holds this content ({lines} line{'s' if lines != 1 else ''}, {len(data):,} bytes)")
    workspace.write_bytes(params.path, data)
    verb = "overwrote" if existed else "created"
    return ToolResult(f"{verb} {params.path} ({lines} line{'s' if lines != 1 else ''}, {len(data):,} bytes)")


class DeleteFileParams(Params):
    path: str = Field(description="File path relative to the workspace root (files only, not directories).")


def delete_file(params: DeleteFileParams, workspace: Workspace) -> ToolResult:
    require_file(workspace, params.path)
    workspace.delete(params.path)
    return ToolResult(f"deleted {params.path}")


READ_FILE = Tool(
    "read_file",
    "Read a text file with line numbers; give start_line/end_line to read part of a long file.",
    ReadFileParams,
    read_file,
)
LIST_DIR = Tool(
    "list_dir",
    "List the files under a directory as a tree, down to `depth` levels (deeper folders show a file count).",
    ListDirParams,
    list_dir,
)
EDIT_FILE = Tool(
    "edit_file",
    "Replace an exact piece of text in a file. old_string must occur exactly once unless replace_all is set.",
    EditFileParams,
    edit_file,
)
WRITE_FILE = Tool(
    "write_file",
    "Create a file or overwrite it with the given content.",
    WriteFileParams,
    write_file,
)
DELETE_FILE = Tool("delete_file", "Delete a file.", DeleteFileParams, delete_file)
