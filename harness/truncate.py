"""Bounding observations: cut the middle of a long text, keep its head and tail.

Two bounds, applied in turn:

- `truncate_middle` (characters): every tool bounds its own output with it, so that no tool result
  can hold megabytes in memory or in the session log.
- `truncate_tokens` (tokens, counted by the policy's own tokenizer): the agent cuts every
  observation to the room the context has left, so that some of every observation reaches the
  model, whatever the output is made of (8,000 characters of `#`, CJK text or emoji may each be
  more tokens than the window).

The head and the tail are kept because that is where the useful parts usually are (a file's
imports and its end; a build log's command and its error). The marker says what was cut; the
token cut's marker also says which lines of the output were cut and how to see them. A char-cut
marker that falls inside a token cut is folded into the token cut's counts, so the numbers stay
those of the original output.
"""

from __future__ import annotations

import re
from typing import Callable

MIN_CHARS = 80
"""Smallest accepted `max_chars`: room for the marker plus a little text on each side."""

MIN_TOKENS = 64
"""Smallest accepted `max_tokens`: room for the token-cut marker plus a little text."""

_CHAR_MARKER = re.compile(r"\n?\[\.\.\. ([\d,]+) chars \(([\d,]+) lines\) cut \.\.\.\]\n?")


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


def _token_marker(text: str, head_end: int, tail_start: int) -> str:
    """`[... lines 41-160 of this output (7,800 chars) cut to fit the context; to see them: ...]`.

    Counts include what an earlier char cut inside the cut region had removed; line numbers are
    given only when no earlier cut makes them ambiguous."""
    cut = text[head_end:tail_start]
    chars, lines = len(cut), cut.count("\n")
    earlier = list(_CHAR_MARKER.finditer(cut))
    for m in earlier:
        chars += int(m.group(1).replace(",", "")) - len(m.group(0))
        lines += int(m.group(2).replace(",", ""))
    first = text.count("\n", 0, head_end) + 1
    if earlier or _CHAR_MARKER.search(text, 0, head_end):
        where = f"{lines:,} lines ({chars:,} chars)"
        how = "a line range, grep, head or tail"
    else:
        last = first + max(cut.count("\n") - (1 if cut.endswith("\n") else 0), 0)
        where = f"lines {first}-{last} of this output ({chars:,} chars)"
        how = f"read_file start_line/end_line, sed -n '{first},{last}p' or grep"
    return f"\n[... {where} cut to fit the context; to see them: {how} ...]\n"


def truncate_tokens(
    text: str,
    *,
    max_tokens: int,
    count: Callable[[str], int],
    keep: str = "both",
) -> str:
    """Return `text` unchanged when it has at most `max_tokens` tokens, else its head (and tail)
    around a marker saying what was cut and how to see it.

    Args:
        text: any text (an observation, a rules file).
        max_tokens: the most tokens the result may have, marker included; at least `MIN_TOKENS`.
        count: tokens of a piece of text (the policy's tokenizer); assumed to grow with the text.
        keep: "both" keeps the head and the tail (half the room each, the tail gets what the head
            leaves); "head" keeps only the head (the marker ends the text).
    Returns:
        A string `s` with `count(s) <= max_tokens`; cuts fall on line boundaries when one is near.
    Raises:
        ValueError: `max_tokens` below `MIN_TOKENS`, or `keep` not "both"/"head".
    """
    if max_tokens < MIN_TOKENS:
        raise ValueError(f"max_tokens must be at least {MIN_TOKENS}, got {max_tokens}")
    if keep not in ("both", "head"):
        raise ValueError(f"keep must be 'both' or 'head', got {keep!r}")
    if count(text) <= max_tokens:
        return text
    n = len(text)

    def longest_head(budget: int) -> int:
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count(text[:mid]) <= budget:
                lo = mid
            else:
                hi = mid - 1
        newline = text.rfind("\n", 0, lo)
        return newline + 1 if newline + 1 >= lo // 2 and newline != -1 else lo

    def longest_tail(budget: int, floor: int) -> int:
        lo, hi = floor, n
        while lo < hi:
            mid = (lo + hi) // 2
            if count(text[mid:]) <= budget:
                hi = mid
            else:
                lo = mid + 1
        newline = text.find("\n", lo)
        return newline + 1 if newline != -1 and newline + 1 - lo <= (n - lo) // 2 else lo

    room = max_tokens - count(_token_marker(text, 0, n)) - 2
    for _ in range(8):  # shrink until the joined text fits (token merges at the seams)
        if room <= 0:
            head_end, tail_start = 0, n
        elif keep == "head":
            head_end, tail_start = longest_head(room), n
        else:
            head_end = longest_head(room // 2)
            tail_start = longest_tail(room - count(text[:head_end]), head_end)
        head = text[:head_end].removesuffix("\n")
        out = head + _token_marker(text, head_end, tail_start) + text[tail_start:]
        if keep == "head":
            out = out.removesuffix("\n")
        excess = count(out) - max_tokens
        if excess <= 0:
            return out
        room -= max(excess, room // 8, 1)
    return _token_marker(text, 0, n).strip()[: max_tokens]  # unreachable for sane counters
