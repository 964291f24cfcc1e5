"""`lsp_server.framing.FrameDecoder` on arbitrary bytes: what it promises whatever the client sends.

The same rules are tested on the real `recap serve` process in `test_hostile_frames.py`.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lsp_server.framing import MAX_HEADER_BYTES, FrameDecoder

CAP = 512
SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=20)
MESSAGES = st.dictionaries(st.text(max_size=8), SCALARS | st.lists(SCALARS, max_size=3), max_size=5)


def frame(message: dict, *, content_type: bool = False) -> bytes:
    body = json.dumps(message).encode()
    extra = b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n" if content_type else b""
    return b"Content-Length: %d\r\n" % len(body) + extra + b"\r\n" + body


def decode(stream: bytes, cuts: list[int], cap: int = CAP) -> list[bytes]:
    """Feed `stream` in pieces cut at `cuts`; every body decoded, checking the memory bound."""
    decoder = FrameDecoder(cap)
    out = []
    edges = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    for start, end in zip(edges, edges[1:]):
        decoder.feed(stream[start:end])
        while (body := decoder.next_message()) is not None:
            out.append(body)
        assert decoder.buffered < max(cap, MAX_HEADER_BYTES)
    decoder.end()
    return out


@given(st.lists(MESSAGES, max_size=6), st.lists(st.booleans(), min_size=6, max_size=6), st.lists(st.integers(0, 10**6)))
def test_valid_frames_come_out_whole_and_in_order_however_the_stream_is_cut(messages, typed, cuts) -> None:
    stream = b"".join(frame(m, content_type=t) for m, t in zip(messages, typed))
    assert [json.loads(b) for b in decode(stream, cuts, cap=10**6)] == messages[:len(typed)]


@settings(max_examples=300)
@given(st.binary(max_size=2000), st.lists(st.integers(0, 10**6), max_size=8))
def test_any_bytes_give_only_json_objects_within_the_cap_and_bounded_memory(junk, cuts) -> None:
    for body in decode(junk, cuts):
        assert len(body) <= CAP and isinstance(json.loads(body), dict)


@given(st.binary(max_size=MAX_HEADER_BYTES + 100).map(lambda b: b.replace(b"\r", b"")),
       st.lists(MESSAGES, min_size=1, max_size=3),
       st.lists(st.integers(0, 10**6), max_size=8))
def test_every_valid_frame_after_junk_without_a_carriage_return_is_read(junk, messages, cuts) -> None:
    stream = junk + b"".join(frame(m) for m in messages)
    assert [json.loads(b) for b in decode(stream, cuts, cap=10**6)] == messages


@pytest.mark.parametrize("junk", [
    b"Content-Length: 99999999999\r\n\r\n{}",
    b"Content-Length: 513\r\n\r\n" + b" " * 513,  # one byte over the cap
    b"Content-Length: -1\r\n\r\n{}",
    b"Content-Length: 1e3\r\n\r\n{}",
    b"Content-Length:\r\n\r\n{}",
    b"Content-Length: 0\r\n\r\n",
    b"Content-Type: x\r\n\r\n{}",
    b"Content-Length 2\r\n\r\n{}",
    b"\r\n\r\n",
    b"Content-Length: 4\r\n\r\nnull",
    b"Content-Length: 2\r\n\r\n[]",
    b"Content-Length: 3\r\n\r\n{\x00}",
])
def test_a_bad_frame_is_dropped_with_a_reason_and_the_next_one_read(junk: bytes, caplog) -> None:
    after = {"jsonrpc": "2.0", "id": 1, "method": "initialize"}
    with caplog.at_level("WARNING", logger="lsp_server.framing"):
        assert [json.loads(b) for b in decode(junk + frame(after), [])] == [after]
    assert caplog.records and all(r.levelname == "WARNING" for r in caplog.records)


def test_a_body_of_exactly_the_cap_is_read() -> None:
    body = json.dumps({"pad": "x" * (CAP - 11)}).encode()
    assert len(body) == CAP
    assert decode(b"Content-Length: %d\r\n\r\n" % CAP + body, []) == [body]


def test_the_cap_must_be_positive() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_message_bytes must be a positive integer"):
            FrameDecoder(bad)
