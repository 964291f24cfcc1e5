"""The change a finished run proposes: one `ProposedFile` per path, built from the workspace's diff.

`Workspace.diff()` gives a git-format unified diff of the shadow workspace against its start state
(the user's files plus unsaved buffers). The proposal needs both full texts of every changed file:
`proposed` is read from the shadow workspace, `original` is recovered by applying the diff's hunks
backwards to it (so it is exactly what the run started from, even if the user's disk has changed
since). Binary and non-UTF-8 files cannot become text edits; they are listed in `skipped`, and so
are symlinks: a link leading outside the workspace is left out of the proposal's diff as well
(`shadow_backend.links`), so accepting the rest can never create it in the user's repository.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from harness.workspace import Workspace
from shadow_backend.links import drop_outside_links

FileStatus = Literal["added", "modified", "deleted"]

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass(frozen=True)
class Hunk:
    """One `@@` hunk: 1-based starts (0 for an empty side) and its lines with their `' '`, `'-'`,
    `'+'` marks, each line's text including its newline (absent after `\\ No newline at end of file`)."""

    old_start: int
    new_start: int
    lines: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class FilePatch:
    """The diff of one file. `old_path` is None for an added file, `new_path` None for a deleted one."""

    old_path: str | None
    new_path: str | None
    hunks: tuple[Hunk, ...] = ()
    binary: bool = False
    link: bool = False
    """The new side is a symlink (git mode 120000)."""


@dataclass(frozen=True)
class ProposedFile:
    """One file of a proposal (`docs/lsp-protocol.md`: `ProposedFile`).

    Attributes:
        path: workspace-relative POSIX path.
        status: "added", "modified" or "deleted".
        original: the text the run started from (None for an added file).
        proposed: the text the agent left (None for a deleted file).
    """

    path: str
    status: FileStatus
    original: str | None
    proposed: str | None


@dataclass(frozen=True)
class Proposal:
    """Everything a run proposes: the diff (without links leading outside the workspace), the text
    files, and what was left out, each as "path (reason)" (binary, undecodable, symlinks)."""

    diff: str
    files: tuple[ProposedFile, ...] = ()
    skipped: tuple[str, ...] = field(default_factory=tuple)

    def file(self, path: str) -> ProposedFile | None:
        return next((f for f in self.files if f.path == path), None)


def _unquote(path: str) -> str:
    """A path as git prints it (C-quoted when it has special characters), without quotes."""
    if len(path) >= 2 and path[0] == '"' and path[-1] == '"':
        raw = path[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
        return raw.encode("latin-1").decode("utf-8", "replace")
    return path


def _side(path: str) -> str | None:
    path = _unquote(path.split("\t")[0])
    if path == "/dev/null":
        return None
    return path[2:] if path[:2] in ("a/", "b/") else path


def parse_git_diff(diff: str) -> list[FilePatch]:
    """Split a git-format unified diff into per-file patches.

    Understands `new file`, `deleted file`, `rename from/to`, binary markers and
    `\\ No newline at end of file`. Raises ValueError for a hunk header it cannot read.
    """
    patches: list[FilePatch] = []
    lines = diff.split("\n")
    i = 0
    while i < len(lines):
        if not lines[i].startswith("diff --git "):
            i += 1
            continue
        header = lines[i][len("diff --git "):]
        old: str | None = None
        new: str | None = None
        added = deleted = binary = link = False
        if header.startswith("a/") and " b/" in header:
            old, new = header[2:].split(" b/", 1)
        i += 1
        while i < len(lines) and not lines[i].startswith(("@@", "diff --git ")):
            line = lines[i]
            if line.startswith("new file mode"):
                added = True
            if line.startswith(("new file mode 120000", "new mode 120000")) or (line.startswith("index ") and line.endswith(" 120000")):
                link = True
            elif line.startswith("deleted file mode"):
                deleted = True
            elif line.startswith("rename from "):
                old = _unquote(line[len("rename from "):])
            elif line.startswith("rename to "):
                new = _unquote(line[len("rename to "):])
            elif line.startswith("--- "):
                old = _side(line[4:])
            elif line.startswith("+++ "):
                new = _side(line[4:])
            elif line.startswith(("Binary files ", "GIT binary patch")):
                binary = True
            i += 1
        hunks: list[Hunk] = []
        while i < len(lines) and lines[i].startswith("@@"):
            match = _HUNK.match(lines[i])
            if match is None:
                raise ValueError(f"unreadable hunk header {lines[i]!r}")
            old_count = int(match.group(2) or 1)
            new_count = int(match.group(4) or 1)
            body: list[tuple[str, str]] = []
            i += 1
            seen_old = seen_new = 0
            while i < len(lines) and (seen_old < old_count or seen_new < new_count or lines[i].startswith("\\")):
                line = lines[i]
                if line.startswith("\\"):
                    if body:
                        mark, text = body[-1]
                        body[-1] = (mark, text[:-1] if text.endswith("\n") else text)
                    i += 1
                    continue
                mark, text = (line[0], line[1:]) if line else (" ", "")
                body.append((mark, text + "\n"))
                seen_old += mark in " -"
                seen_new += mark in " +"
                i += 1
            hunks.append(Hunk(int(match.group(1)), int(match.group(3)), tuple(body)))
        patches.append(
            FilePatch(
                old_path=None if added else old,
                new_path=None if deleted else new,
                hunks=tuple(hunks),
                binary=binary,
                link=link and not deleted,
            )
        )
    return patches


def unapply(patch: FilePatch, proposed: str) -> str:
    """The old side of `patch`, rebuilt from its new side `proposed` (the hunks applied backwards).

    Raises ValueError when `proposed` does not match the hunks' `+` and context lines.
    """
    new_lines = re.findall(r"[^\n]*\n|[^\n]+\Z", proposed)
    out: list[str] = []
    at = 0  # index into new_lines
    for hunk in patch.hunks:
        start = max(hunk.new_start - 1, 0) if any(m in " +" for m, _ in hunk.lines) else hunk.new_start
        if start < at:
            raise ValueError(f"{patch.new_path}: overlapping hunks")
        out.extend(new_lines[at:start])
        at = start
        for mark, text in hunk.lines:
            if mark in " +":
                if at >= len(new_lines) or new_lines[at] != text:
                    raise ValueError(f"{patch.new_path}: the diff does not match the file near line {at + 1}")
                at += 1
            if mark in " -":
                out.append(text)
    out.extend(new_lines[at:])
    return "".join(out)


def _read_text(workspace: Workspace, path: str) -> str | None:
    try:
        return workspace.read_bytes(path).decode("utf-8")
    except UnicodeDecodeError:
        return None


def build_proposal(workspace: Workspace, diff: str) -> Proposal:
    """The proposal of a finished run, read from its (still open) workspace.

    A rename becomes a deleted file plus an added one. Symlinks are never read through: one leading
    outside the workspace is dropped from the diff, any other is listed as skipped (a text edit
    can't make a link). Raises ValueError for a diff that does not match the workspace.
    """
    diff, outside = drop_outside_links(diff)
    files: list[ProposedFile] = []
    skipped: list[str] = [str(link) for link in outside]
    for patch in parse_git_diff(diff):
        name = patch.new_path or patch.old_path or "?"
        if patch.link:
            skipped.append(f"{name} (a symlink; text edits can't create links)")
            continue
        proposed = _read_text(workspace, patch.new_path) if patch.new_path is not None else None
        if patch.binary or (patch.new_path is not None and proposed is None):
            skipped.append(f"{name} (binary or not UTF-8)")
            continue
        if patch.old_path is None:
            files.append(ProposedFile(name, "added", None, proposed))
            continue
        original = unapply(patch, proposed or "")
        if patch.new_path is None:
            files.append(ProposedFile(patch.old_path, "deleted", original, None))
        elif patch.new_path != patch.old_path:
            files.append(ProposedFile(patch.old_path, "deleted", original, None))
            files.append(ProposedFile(patch.new_path, "added", None, proposed))
        else:
            files.append(ProposedFile(name, "modified", original, proposed))
    return Proposal(diff=diff, files=tuple(files), skipped=tuple(skipped))
