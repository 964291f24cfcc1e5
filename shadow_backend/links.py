"""Symbolic links in a proposed diff: keep the agent's links out of the user's repository when
they point outside it.

Threat model: the diff comes from the shadow workspace, where the model acts; everything in it is
untrusted. A symlink (git mode 120000) whose target is absolute or climbs out of the repository
(`../../etc/passwd`), once applied to the user's checkout, would let later reads or writes (by
the user's tools, by recap itself) reach files outside the repository. Such a link is left out of
what is offered or applied, and listed with the reason; the rest of the diff stands. The check is
lexical (on the target text), so it needs no access to the user's file system and cannot be
fooled by what exists there; a link to a path inside the repository is kept.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

_SECTION = re.compile(r"^diff --git ", re.MULTILINE)
_LINK_MODE = re.compile(r"^(?:new file mode|new mode|index [0-9a-f]+\.\.[0-9a-f]+) 120000$", re.MULTILINE)
_PATH = re.compile(r"^\+\+\+ b/(.*)$", re.MULTILINE)


@dataclass(frozen=True)
class SkippedLink:
    """A symlink left out of a diff: its path, its target, and why."""

    path: str
    target: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path} (a symlink to {self.target}: {self.reason})"


def _escapes(path: str, target: str) -> str | None:
    """Why a link at `path` to `target` leaves the repository, or None when it stays inside."""
    if not target or "\0" in target:
        return "an empty or invalid target"
    if target.startswith("/"):
        return "an absolute target, outside the workspace"
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if resolved == ".." or resolved.startswith("../"):
        return "a target outside the workspace"
    if resolved == ".git" or resolved.startswith(".git/"):
        return "a target inside .git"
    return None


def drop_outside_links(diff: str) -> tuple[str, tuple[SkippedLink, ...]]:
    """Split a git-format diff into the part to offer and the symlinks left out.

    Args:
        diff: a git-format unified diff (`Workspace.diff()`).
    Returns:
        (the diff without the sections that create or retarget a symlink leading outside the
        repository, those links). Every other section is kept byte for byte, deleting a link too.
    """
    starts = [m.start() for m in _SECTION.finditer(diff)]
    if not starts:
        return diff, ()
    kept = [diff[: starts[0]]]
    skipped: list[SkippedLink] = []
    for start, end in zip(starts, [*starts[1:], len(diff)]):
        section = diff[start:end]
        head = section.split("\n@@", 1)[0]
        path_match = _PATH.search(head)
        if _LINK_MODE.search(head) and path_match:
            added = [line[1:] for line in section.split("\n@@", 1)[-1].split("\n")[1:] if line.startswith("+")]
            target = added[0] if added else ""
            reason = _escapes(path_match.group(1), target)
            if reason is not None:
                skipped.append(SkippedLink(path_match.group(1), target, reason))
                continue
        kept.append(section)
    return "".join(kept), tuple(skipped)
