"""Pieces every tool shares: the output bound, the params base class, text decoding."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness.errors import ToolError
from harness.truncate import truncate_middle
from harness.workspace import Workspace

MAX_OUTPUT_CHARS = 8000
"""The most characters any tool output shows the policy (head and tail kept, middle cut)."""

BINARY_SNIFF_BYTES = 8000
"""A NUL byte within this many leading bytes marks a file as binary (git's rule)."""


class Params(BaseModel):
    """Base of every tool's arguments: unknown keys are an error the policy reads."""

    model_config = ConfigDict(extra="forbid")


def bounded(text: str) -> str:
    """`text` cut to `MAX_OUTPUT_CHARS` (head + tail, with a marker saying what was cut)."""
    return truncate_middle(text, max_chars=MAX_OUTPUT_CHARS)


def is_binary(data: bytes) -> bool:
    return b"\0" in data[:BINARY_SNIFF_BYTES]


def require_file(workspace: Workspace, path: str) -> None:
    """Raise `ToolError` unless `path` is an existing file (refused paths raise on their own)."""
    if not workspace.exists(path):
        raise ToolError(f"{path}: no such file")
    if workspace.is_dir(path):
        raise ToolError(f"{path} is a directory; use list_dir to see what it holds")


def read_text(workspace: Workspace, path: str, *, lossy: bool = False) -> tuple[str, str | None]:
    """The text of a file and, for a file that is not valid UTF-8, a note saying so.

    Args:
        lossy: decode invalid UTF-8 with replacement characters (and return a note) instead of
            raising.
    Raises:
        ToolError: missing file, directory, binary file, or (unless `lossy`) invalid UTF-8.
    """
    require_file(workspace, path)
    data = workspace.read_bytes(path)
    if is_binary(data):
        raise ToolError(f"{path} is a binary file ({len(data):,} bytes); it can't be shown as text")
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        where = f"{path} is not valid UTF-8 (first bad byte at offset {exc.start:,})"
        if not lossy:
            raise ToolError(f"{where}; rewrite the whole file with write_file instead") from None
        return data.decode("utf-8", "replace"), f"[{where}; undecodable bytes shown as \ufffd]"
