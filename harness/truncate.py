"""Bounding observations: cut the middle of a long text, keep its head and tail.

Every tool output goes through `truncate_middle` before the policy sees it, so one huge file or
command log can't blow the context window. The head and the tail are kept because that is where
the useful parts usually are (a file's imports and its end; a build log's command and its error).
"""

from __future__ import annotations

MIN_CHARS = 80
"""Smallest accepted `max_chars`: room for the marker plus a little text on each side."""


def _marker(cut: str) -> str:
    lines = cut.count("\n")
    return f"\n[... {len(cut):,} chars ({lines:,} lines) cut ...]\n"


def truncate_middle(text: str, *, max_chars: int) -> str:
    """Return `text` unchanged when it fits, else its head and tail around a marker line.

    The marker says how much was cut, e.g. `[... 12,345 chars (210 lines) cut ...]`. Cuts fall on
    line boundaries when one is near, so kept lines stay whole.

    Args:
        text: any text.
        max_chars: the most characters the result may have (marker included); at least `MIN_CHARS`.
    Returns:
        A string of at most `max_chars` characters.
    Raises:
        ValueError: `max_chars` is below `MIN_CHARS`.
    """
    if max_chars < MIN_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_CHARS}, got {max_chars}")
    if len(text) <= max_chars:
        return text
    # Reserve room for the largest marker this text could need, then split the rest.
    room = max_chars - len(_marker(text))
    head_end = room // 2
    tail_start = len(text) - (room - head_end)
    # Snap to line boundaries when that keeps at least half of each side.
    newline = text.rfind("\n", 0, head_end)
    if newline >= head_end // 2:
        head_end = newline + 1
    newline = text.find("\n", tail_start, len(text))
    if newline != -1 and newline + 1 - tail_start <= (len(text) - tail_start) // 2:
        tail_start = newline + 1
    head, cut, tail = text[:head_end], text[head_end:tail_start], text[tail_start:]
    return head.removesuffix("\n") + _marker(cut) + tail
