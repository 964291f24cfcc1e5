"""Line-based three-way merge and LSP text edits.

`merge3` rebases the agent's change onto a buffer the user edited while the run was going: both
sides are diffed against the common base (the text the run started from) and applied together when
their changed regions don't overlap (diff3 semantics, as `git merge-file`); an overlap is a conflict
and nothing is merged, so nothing the user typed is lost. `text_edits` turns "current text -> new
text" into minimal LSP `TextEdit`s (one per changed run of lines).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from lsprotocol import types


@dataclass(frozen=True)
class _Change:
    start: int  # base line range [start, end)
    end: int
    lines: tuple[str, ...]


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """Lines as LSP counts them (ends `\n`, `\r\n`, `\r`), each with its line end."""
    return _LINE.findall(text)


def _changes(base: list[str], other: list[str]) -> list[_Change]:
    matcher = difflib.SequenceMatcher(None, base, other, autojunk=False)
    return [
        _Change(i1, i2, tuple(other[j1:j2]))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def _clash(a: _Change, b: _Change) -> bool:
    if a == b:
        return False
    if max(a.start, b.start) < min(a.end, b.end):
        return True
    # An insertion touching the other change: the order of the two is ambiguous.
    for point, other in ((a, b), (b, a)):
        if point.start == point.end and other.start <= point.start <= other.end:
            return True
    return False


def merge3(base: str, ours: str, theirs: str) -> str | None:
    """Apply both `base -> ours` and `base -> theirs`, or None when they touch the same lines.

    Args:
        base: the common ancestor (the text the run started from).
        ours: the user's current text.
        theirs: the agent's proposed text.
    Returns:
        The merged text, or None on a conflict (overlapping changes, or insertions at a point the
        other side also changes). Identical changes on both sides count once.
    """
    if ours == base:
        return theirs
    if theirs == base or ours == theirs:
        return ours
    base_lines = split_lines(base)
    mine = _changes(base_lines, split_lines(ours))
    agent = _changes(base_lines, split_lines(theirs))
    if any(_clash(a, b) for a in mine for b in agent):
        return None
    merged = sorted(set(mine) | set(agent), key=lambda c: (c.start, c.end))
    out: list[str] = []
    at = 0
    for change in merged:
        out.extend(base_lines[at:change.start])
        out.extend(change.lines)
        at = change.end
    out.extend(base_lines[at:])
    return "".join(out)


def _utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def _position(lines: list[str], index: int) -> types.Position:
    """The position where line `index` starts; past the last line, the end of the document."""
    if index < len(lines):
        return types.Position(line=index, character=0)
    if not lines:
        return types.Position(line=0, character=0)
    last = lines[-1]
    if last.endswith(("\n", "\r")):
        return types.Position(line=len(lines), character=0)
    return types.Position(line=len(lines) - 1, character=_utf16_len(last))


def text_edits(current: str, new: str) -> list[types.TextEdit]:
    """Minimal line-granular edits turning `current` into `new` (UTF-16 positions, non-overlapping,
    in document order). Empty when the texts are equal."""
    old_lines = split_lines(current)
    new_lines = split_lines(new)
    edits = []
    for change in _changes(old_lines, new_lines):
        edits.append(
            types.TextEdit(
                range=types.Range(start=_position(old_lines, change.start), end=_position(old_lines, change.end)),
                new_text="".join(change.lines),
            )
        )
    return edits
