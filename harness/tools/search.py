"""Search tools: glob (file names) and grep (file contents).

`grep` runs ripgrep inside the workspace when it is there (`workspace.run(["rg", ...])`) and falls
back to Python's `re` over `list_files`/`read_bytes` when it is not (exit 127) or when ripgrep
rejects the pattern (e.g. look-around, which only Python supports). Both ways give the same
output: `path:line:text`, sorted by path then line. Both skip binary files (a NUL byte) and
files ignored by `.gitignore`. A FIFO, socket or device is never opened: named as `path` it is
refused (`Workspace.exists` raises `NotRegularFile`), met in a directory ripgrep skips it (only
regular files are searched in a walk) and the Python search skips what `read_bytes` refuses.
Known differences: ripgrep does not follow symlinks, and in a file that is not valid UTF-8 its `.`
does not match an invalid byte (Python sees U+FFFD there).
"""

from __future__ import annotations

import fnmatch
import re
from functools import lru_cache

from pydantic import Field

from harness.errors import PathOutsideWorkspace, ToolError
from harness.tools.base import Tool, ToolResult
from harness.tools.common import Params, bounded
from harness.workspace import Workspace

MAX_MATCHES = 300
"""Most match lines (grep) or paths (glob) shown; the rest are counted."""

MAX_LINE_CHARS = 300
"""Longer matching lines are cut to this many characters."""

GREP_TIMEOUT_S = 60.0

_RG_FLAGS = ["--null", "--line-number", "--no-heading", "--with-filename", "--color=never",
             "--no-config", "--no-messages", "--hidden", "--no-ignore-dot", "--no-ignore-global",
             "--no-mmap", "--glob=!.git"]
_RG_BINARY = re.compile(r"^(.*?): (?:WARNING: stopped searching binary file|binary file matches)")
_GLOB_CHARS = re.compile(r"[*?\[{]")


def _expand_braces(pattern: str) -> list[str]:
    """`*.{ts,tsx}` -> [`*.ts`, `*.tsx`] (innermost braces first, any number of them)."""
    match = re.search(r"\{([^{}]*,[^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end() :]
    return [p for alt in match.group(1).split(",") for p in _expand_braces(head + alt + tail)]


def _segment_regex(segment: str) -> str:
    out, i = [], 0
    while i < len(segment):
        char = segment[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (end := segment.find("]", i + 2)) != -1:
            body = segment[i + 1 : end]
            body = "^" + body[1:] if body.startswith("!") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


@lru_cache(maxsize=256)
def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compile a pathlib-style glob over workspace paths: `*`, `?` and `[...]` stay within one
    path segment, `**` matches any number of segments, `{a,b}` gives alternatives."""
    alternatives = []
    for expanded in _expand_braces(pattern):
        segments = expanded.split("/")
        parts = []
        for index, segment in enumerate(segments):
            last = index == len(segments) - 1
            if segment == "**":
                parts.append(".*" if last else "(?:[^/]+/)*")
            else:
                parts.append(_segment_regex(segment) + ("" if last else "/"))
        alternatives.append("".join(parts))
    return re.compile("(?:" + "|".join(alternatives) + ")")


def _shown(lines: list[str], what: str) -> str:
    extra = len(lines) - MAX_MATCHES
    text = "\n".join(lines[:MAX_MATCHES])
    if extra > 0:
        text += f"\n[... {extra:,} more {what} not shown; narrow the search]"
    return bounded(text)


# --- glob ------------------------------------------------------------------------------------


class GlobParams(Params):
    pattern: str = Field(description="Glob over paths relative to the root, e.g. 'src/**/*.py' or '**/test_*.{py,ts}'. "
                                     "'*' stays within one directory; '**' crosses directories.")


def glob(params: GlobParams, workspace: Workspace) -> ToolResult:
    pattern = params.pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:]
    if not pattern:
        raise ToolError("empty pattern; try '**/*' for every file")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise PathOutsideWorkspace(f"pattern {params.pattern!r} refused: patterns are relative to the workspace root")
    literal = pattern[: _GLOB_CHARS.search(pattern).start()] if _GLOB_CHARS.search(pattern) else pattern
    base = literal.rsplit("/", 1)[0] if "/" in literal else "."
    if not workspace.exists(base):
        return ToolResult(f"no files match {pattern!r} ({base} does not exist)")
    regex = glob_regex(pattern)
    hits = [p for p in workspace.list_files(base) if regex.fullmatch(p)]
    if not hits:
        hint = "; use '**/' to search subdirectories" if "/" not in pattern else ""
        return ToolResult(f"no files match {pattern!r}{hint}")
    return ToolResult(_shown(hits, "paths"))


# --- grep ------------------------------------------------------------------------------------


class GrepParams(Params):
    pattern: str = Field(description="Regular expression searched in each line (ripgrep / Python syntax).")
    path: str = Field(".", description="File or directory to search, relative to the workspace root.")
    include: str | None = Field(None, description="Only files whose name matches this glob, e.g. '*.py' or '*.{ts,tsx}'.")


Match = tuple[str, int, str]


def grep(params: GrepParams, workspace: Workspace) -> ToolResult:
    path = params.path.strip().removeprefix("./").rstrip("/") or "."
    if "\0" in params.pattern or "\0" in (params.include or ""):
        raise ToolError("pattern and include can't hold a NUL byte (binary files are never searched)")
    if params.include is not None and "/" in params.include:
        raise ToolError("include matches file names only (e.g. '*.py'); put the directory in path")
    if not workspace.exists(path):
        raise ToolError(f"{path}: no such file or directory")
    matches = grep_ripgrep(workspace, params.pattern, path, params.include)
    if matches is None:
        matches = grep_python(workspace, params.pattern, path, params.include)
    if not matches:
        return ToolResult(f"no matches for {params.pattern!r} in {path}")
    return ToolResult(_shown([format_match(m) for m in matches], "matches"))


def format_match(match: Match) -> str:
    path, line, text = match
    text = text.removesuffix("\r")
    if len(text) > MAX_LINE_CHARS:
        text = text[:MAX_LINE_CHARS] + " [line cut]"
    return f"{path}:{line}:{text}"


def grep_ripgrep(workspace: Workspace, pattern: str, path: str, include: str | None) -> list[Match] | None:
    """Matches found by ripgrep in the workspace, sorted; None when ripgrep is missing or refuses the pattern."""
    globs = [f"--glob={include}"] if include else []
    result = workspace.run(["rg", *_RG_FLAGS, *globs, "-e", pattern, "--", path], timeout_s=GREP_TIMEOUT_S)
    if result.timed_out:
        raise ToolError(f"grep timed out after {GREP_TIMEOUT_S:g}s; narrow the path or the pattern")
    if result.exit_code == 127 or (result.exit_code == 2 and not result.stdout):
        return None
    matches: list[Match] = []
    binary: set[str] = set()
    for line in result.stdout.split("\n"):
        if "\0" in line:
            file, rest = line.split("\0", 1)
            number, _, text = rest.partition(":")
            if number.isdigit():
                matches.append((file.removeprefix("./"), int(number), text))
        elif (warning := _RG_BINARY.match(line)) is not None:
            binary.add(warning.group(1).removeprefix("./"))
    return sorted(m for m in matches if m[0] not in binary)


def _name_filter(include: str | None):
    if include is None:
        return lambda name: True
    negate = include.startswith("!")
    options = _expand_braces(include[1:] if negate else include)
    return lambda name: any(fnmatch.fnmatchcase(name, o) for o in options) != negate


def grep_python(workspace: Workspace, pattern: str, path: str, include: str | None) -> list[Match]:
    """The same search in Python (`re`), through `list_files` and `read_bytes` only."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolError(f"invalid regular expression {pattern!r}: {exc}") from None
    wanted = _name_filter(include)
    matches: list[Match] = []
    for file in workspace.list_files(path):
        if not wanted(file.rsplit("/", 1)[-1]):
            continue
        try:
            data = workspace.read_bytes(file)
        except (OSError, ToolError):  # a symlink to a directory, out of the workspace or into .git; a FIFO
            continue
        if b"\0" in data:
            continue
        lines = data.decode("utf-8", "replace").split("\n")
        if lines[-1] == "":
            lines.pop()
        matches.extend((file, n, line) for n, line in enumerate(lines, start=1) if regex.search(line))
    return sorted(matches)


GLOB = Tool(
    "glob",
    "Find files whose path matches a glob pattern (e.g. '**/*.py'); ignored files are left out.",
    GlobParams,
    glob,
)
GREP = Tool(
    "grep",
    "Search file contents with a regular expression; prints path:line:text for each matching line.",
    GrepParams,
    grep,
)
