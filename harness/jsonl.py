"""Bounded reading of an untrusted JSON Lines file (session files: `harness.session.read_session`).

Threat model: the file may be anything a path can name, written by anyone. `read_jsonl`
- refuses what is not a regular file (a FIFO, a device such as /dev/zero, a socket, a directory)
  from `os.stat`, without opening it, and opens with `O_NONBLOCK` so that a path swapped for a
  FIFO between `stat` and `open` cannot block either (`fstat` then refuses it);
- reads one line at a time, never more than `max_line_bytes` of one line nor `max_file_bytes` of
  the file (checked from `fstat` before reading, and while reading, for a file that grows);
- parses each line with `json`, bounding nesting at `max_depth` (a line nested past Python's
  recursion limit is caught, not a RecursionError); invalid UTF-8 is replaced, not fatal.
Every refusal is a `SessionFormatError` naming FILE:LINE (or FILE for the file as a whole).
"""

from __future__ import annotations

import itertools
import json
import os
import stat
from dataclasses import dataclass
from typing import IO, Any, Iterator

from harness.errors import ConfigError, SessionFormatError


@dataclass(frozen=True)
class JsonlLimits:
    """Bounds on reading one file; a file past one is refused.

    Attributes:
        max_line_bytes: longest line, newline excluded (bytes). A line is read at most this far.
        max_file_bytes: largest file (bytes), checked before reading and again while reading.
        max_depth: deepest nesting of JSON arrays/objects in one line (a top-level object is 1).
    Raises: ConfigError for a value that is not an integer >= 1.
    """

    max_line_bytes: int = 16 * 2**20
    max_file_bytes: int = 512 * 2**20
    max_depth: int = 64

    def __post_init__(self) -> None:
        for name in ("max_line_bytes", "max_file_bytes", "max_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"JsonlLimits.{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True)
class JsonLine:
    """One line of the file.

    Attributes:
        number: 1-based line number.
        value: the parsed JSON (None when `torn`).
        complete: the line ended with a newline (False only for a last line cut short).
        torn: a last line without its newline that is not valid JSON (a crash mid-write).
    """

    number: int
    value: Any
    complete: bool
    torn: bool = False


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a plain file")


def _refuse_special(mode: int, path: str) -> None:
    if not stat.S_ISREG(mode):
        raise SessionFormatError(f"not a regular file ({_kind(mode)}); a session file must be one", path=path, line=None)


def read_regular_file(path: str | os.PathLike[str], *, max_bytes: int = 64 * 2**20) -> bytes:
    """The bytes of a small input file the user named (a script, a config), read without ever
    blocking: refused unless it is a regular file (checked before opening, and again on the open
    descriptor, which is opened `O_NONBLOCK`) of at most `max_bytes`.

    Raises: OSError (missing, unreadable), ValueError (not a regular file, too large).
    """
    name = os.fspath(path)
    mode = os.stat(name).st_mode
    if not stat.S_ISREG(mode):
        raise ValueError(f"not a regular file ({_kind(mode)})")
    with os.fdopen(os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)), "rb") as handle:
        mode = os.fstat(handle.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"not a regular file ({_kind(mode)})")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes")
    return data


def _open_regular(path: str, limits: JsonlLimits) -> IO[bytes]:
    """`path` opened for binary reading, refused unless it is a regular file within the size cap."""
    try:
        _refuse_special(os.stat(path).st_mode, path)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SessionFormatError(f"cannot open: {exc.strerror or exc}", path=path, line=None) from None
    try:
        info = os.fstat(fd)
        _refuse_special(info.st_mode, path)
        if info.st_size > limits.max_file_bytes:
            raise SessionFormatError(f"file of {info.st_size} bytes is larger than the limit of "
                                     f"{limits.max_file_bytes} bytes (max_file_bytes)", path=path, line=None)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _depth_exceeds(value: Any, max_depth: int) -> bool:
    """Whether `value` (parsed JSON) nests arrays/objects more than `max_depth` deep."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _parse(raw: bytes, number: int, complete: bool, path: str, limits: JsonlLimits) -> JsonLine:
    too_deep = SessionFormatError(f"nested too deeply (more than {limits.max_depth} levels of arrays/objects)",
                                  path=path, line=number)
    try:
        value = json.loads(raw.decode("utf-8", errors="replace"))
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:
        if not complete:
            return JsonLine(number, None, complete=False, torn=True)
        raise SessionFormatError(f"not valid JSON ({exc})", path=path, line=number) from None
    # the number of brackets bounds the depth: only lines with many are walked
    if raw.count(b"[") + raw.count(b"{") > limits.max_depth and _depth_exceeds(value, limits.max_depth):
        raise too_deep
    return JsonLine(number, value, complete)


def read_jsonl(path: str | os.PathLike[str], *, limits: JsonlLimits | None = None) -> Iterator[JsonLine]:
    """The lines of `path`, parsed, one at a time (the file is closed when the iteration ends).

    Raises:
        SessionFormatError: see the module docstring (not a regular file, cannot be opened or read,
            a line or the file past its limit, not valid JSON unless torn, nested too deeply).
    """
    limits = limits or JsonlLimits()
    name = os.fspath(path)
    total = 0
    with _open_regular(name, limits) as fh:
        for number in itertools.count(1):
            try:
                raw = fh.readline(limits.max_line_bytes + 1)
            except OSError as exc:
                raise SessionFormatError(f"cannot read: {exc.strerror or exc}", path=name, line=number) from None
            if not raw:
                return
            complete = raw.endswith(b"\n")
            if not complete and len(raw) > limits.max_line_bytes:
                raise SessionFormatError(f"line longer than {limits.max_line_bytes} bytes (max_line_bytes)",
                                         path=name, line=number)
            total += len(raw)
            if total > limits.max_file_bytes:
                raise SessionFormatError(f"file grew past the limit of {limits.max_file_bytes} bytes (max_file_bytes)",
                                         path=name, line=number)
            yield _parse(raw[:-1] if complete else raw, number, complete, name, limits)
