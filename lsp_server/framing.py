"""The LSP base protocol, checked: the frames the server reads instead of the client's raw bytes.

A client sends frames, `Content-Length: N\\r\\n` (plus optional headers such as `Content-Type`),
an empty line, then N bytes of a JSON object. pygls' reader trusts every header: a huge N made it
allocate N bytes at once (MemoryError, the server died), and a frame without a valid
`Content-Length` left its reader misaligned for good (alive, never answering again).

`FrameDecoder` (no I/O: bytes in, message bodies out) enforces:
- a header block ends with an empty line within `MAX_HEADER_BYTES`; every line is `Name: value`
  ending in `\\r\\n`; exactly one `Content-Length`, a decimal number from 1 to `max_message_bytes`;
- the body is one JSON object (LSP has no batches; invalid UTF-8, invalid or too deeply nested
  JSON are refused).
A frame that breaks a header rule is dropped with a logged reason and the decoder resynchronizes:
it skips bytes up to the next `Content-Length: <digits>\\r\\n` (a JSON body can never hold that:
raw line breaks are not allowed inside JSON strings) and parses on from there. A frame with a
valid header and a bad body loses only its N bytes. So memory stays under
`max_message_bytes + MAX_HEADER_BYTES` plus one read, and every valid frame after a bad one is read.

`CheckedReader` feeds a decoder from a binary stream (stdin) and offers what pygls' stdio loop
reads (`readline`, `read`), always in canonical frames, so pygls' own loop needs no change.
"""

from __future__ import annotations

import json
import logging
import re
from typing import BinaryIO

logger = logging.getLogger(__name__)

DEFAULT_MAX_MESSAGE_BYTES = 64 * 2**20
"""Largest accepted body (bytes) unless the server is configured otherwise."""
MAX_HEADER_BYTES = 8192
"""Largest accepted header block (bytes, its final empty line included)."""
READ_CHUNK_BYTES = 65536
"""Most bytes taken from the stream per read."""

_RESYNC = re.compile(rb"content-length:[ \t]*\d+\r\n", re.IGNORECASE)
_RESYNC_TAIL = 256  # bytes kept while hunting, so a header split across two reads is still found
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_LENGTH = re.compile(rb"\d{1,20}")


class FrameDecoder:
    """Turns a byte stream into checked message bodies; see the module docstring for the rules.

    `feed(data)` appends bytes; `next_message()` returns the next good body (`bytes` holding a
    JSON object) or None until more bytes come; `end()` reports what the stream left unfinished.
    Every dropped frame or skipped run of bytes is logged (WARNING) with its reason.
    """

    def __init__(self, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
        if isinstance(max_message_bytes, bool) or not isinstance(max_message_bytes, int) or max_message_bytes < 1:
            raise ValueError(f"max_message_bytes must be a positive integer, got {max_message_bytes!r}")
        self.max_message_bytes = max_message_bytes
        self._buf = bytearray()
        self._body_len: int | None = None  # set while the header was read and its body is awaited
        self._hunting = False  # skipping bytes up to the next Content-Length header
        self._skipped = 0

    @property
    def buffered(self) -> int:
        """Bytes held. Once `next_message` returned None it is under
        `max(max_message_bytes, MAX_HEADER_BYTES)`: a header, a body, or a tail being searched."""
        return len(self._buf)

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_message(self) -> bytes | None:
        while True:
            if self._hunting and not self._hunt():
                return None
            if self._body_len is None:
                end = self._buf.find(b"\r\n\r\n")
                if end < 0 or end + 4 > MAX_HEADER_BYTES:
                    if len(self._buf) < MAX_HEADER_BYTES:
                        return None
                    self._lose_sync(f"no empty line ends the header within {MAX_HEADER_BYTES} bytes")
                    continue
                length, problem = self._content_length(bytes(self._buf[:end]))
                if problem:
                    self._lose_sync(problem)
                    continue
                del self._buf[:end + 4]
                self._body_len = length
            if len(self._buf) < self._body_len:
                return None
            body = bytes(self._buf[:self._body_len])
            del self._buf[:self._body_len]
            self._body_len = None
            problem = _body_problem(body)
            if problem is None:
                return body
            logger.warning("dropped a %d-byte message: %s", len(body), problem)

    def end(self) -> None:
        """The stream ended: log what was left unfinished (a header, a body, bytes being skipped)."""
        if self._hunting:
            logger.warning("the stream ended after %d skipped bytes without another Content-Length header",
                           self._skipped + len(self._buf))
        elif self._body_len is not None:
            logger.warning("the stream ended inside a message body (%d of %d bytes)", len(self._buf), self._body_len)
        elif self._buf:
            logger.warning("the stream ended inside a header (%d bytes)", len(self._buf))
        self._buf.clear()

    def _content_length(self, block: bytes) -> tuple[int, str | None]:
        """The Content-Length of a header block (without its final empty line), or why it is bad."""
        length: int | None = None
        for line in block.split(b"\r\n"):
            name, colon, value = line.partition(b":")
            if not colon or not _TOKEN.fullmatch(name):
                return 0, f"malformed header line {_clip(line)}"
            if name.lower() != b"content-length":
                continue  # Content-Type and unknown headers are allowed and ignored
            if length is not None:
                return 0, "two Content-Length headers"
            value = value.strip(b" \t")
            if not _LENGTH.fullmatch(value):
                return 0, f"Content-Length {_clip(value)} is not a decimal number of bytes"
            length = int(value)
            if length == 0:
                return 0, "Content-Length 0: a message cannot be empty"
            if length > self.max_message_bytes:
                return 0, f"Content-Length {length} is over the limit of {self.max_message_bytes} bytes"
        if length is None:
            return 0, f"a header without Content-Length: {_clip(block)}"
        return length, None

    def _lose_sync(self, problem: str) -> None:
        logger.warning("bad frame: %s; skipping to the next Content-Length header", problem)
        del self._buf[:1]  # at least one byte, so the same header is not found again
        self._skipped = 1
        self._hunting = True

    def _hunt(self) -> bool:
        """Skip up to the next Content-Length header; False when more bytes are needed."""
        found = _RESYNC.search(self._buf)
        if found is None:
            drop = max(0, len(self._buf) - _RESYNC_TAIL)
            del self._buf[:drop]
            self._skipped += drop
            return False
        del self._buf[:found.start()]
        logger.warning("resynchronized at a Content-Length header after skipping %d bytes",
                       self._skipped + found.start())
        self._hunting = False
        self._skipped = 0
        return True


def _body_problem(body: bytes) -> str | None:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return f"the body is not JSON ({_first_line(exc)})"
    if not isinstance(value, dict):
        return f"the body is a JSON {type(value).__name__}, not an object"
    return None


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def _clip(data: bytes, limit: int = 60) -> str:
    """`data` quoted for a log line: escaped, at most `limit` bytes shown."""
    shown = repr(bytes(data[:limit]))[1:]  # without the b prefix
    return shown + (f"... ({len(data)} bytes)" if len(data) > limit else "")


class CheckedReader:
    """pygls' synchronous `Reader` (`readline`, `read`) over `raw`, yielding checked frames only.

    `raw` is a buffered binary stream (it needs `read1`, e.g. `sys.stdin.buffer`). Each message
    comes out as `Content-Length: N\\r\\n`, `\\r\\n`, then N body bytes; at the end of `raw`,
    `readline` returns b"" (pygls then stops).
    """

    def __init__(self, raw: BinaryIO, decoder: FrameDecoder) -> None:
        self._raw = raw
        self._decoder = decoder
        self._out = b""
        self._pos = 0

    def readline(self) -> bytes:
        if self._pos >= len(self._out) and not self._next_frame():
            return b""
        end = self._out.find(b"\n", self._pos)
        end = len(self._out) if end < 0 else end + 1
        line, self._pos = self._out[self._pos:end], end
        return line

    def read(self, n: int) -> bytes:
        data, self._pos = self._out[self._pos:self._pos + n], min(len(self._out), self._pos + n)
        return data

    def _next_frame(self) -> bool:
        while (body := self._decoder.next_message()) is None:
            chunk = self._raw.read1(READ_CHUNK_BYTES)  # type: ignore[attr-defined]
            if not chunk:
                self._decoder.end()
                return False
            self._decoder.feed(chunk)
        self._out, self._pos = b"Content-Length: %d\r\n\r\n" % len(body) + body, 0
        return True
