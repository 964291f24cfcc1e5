"""What `recap serve` promises a client that sends anything at all, tested on the real process.

Raw bytes go to its stdin, replies are read frame by frame from its stdout, and its stderr is read
once it has exited. After every bad frame the server logs why, skips to the next valid
`Content-Length` header, and answers the next valid request: it never dies, never goes deaf, never
prints a traceback. Before `initialize` a request gets ServerNotInitialized (-32002); `exit` exits
with 1 unless `shutdown` came first (then 0). `--tcp` reads through the same checks. The byte-level
rules are `lsp_server.framing`'s (their properties on arbitrary bytes: `test_framing.py`).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import socket
import subprocess
from typing import Any

import pytest
from lsp_helpers import RECAP

from lsp_server.framing import DEFAULT_MAX_MESSAGE_BYTES, MAX_HEADER_BYTES

WAIT_S = 30.0
SERVER_NOT_INITIALIZED = -32002
INVALID_REQUEST = -32600
LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (\S+) (\w+): (.*)$")


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def request(id_: int, method: str, params: Any = None) -> bytes:
    return frame({"jsonrpc": "2.0", "id": id_, "method": method, "params": params})


def notification(method: str, params: Any = None) -> bytes:
    return frame({"jsonrpc": "2.0", "method": method, "params": params})


INITIALIZE = request(1, "initialize", {"capabilities": {}})
STATUS = {"command": "recap.status", "arguments": [{}]}


class RawServer:
    """A real `recap serve`: raw bytes in, frames out, its stderr once it has exited. It is
    spoken to over its stdin/stdout unless another `reader` and `writer` (a TCP connection) are given."""

    def __init__(self, process: asyncio.subprocess.Process, reader: asyncio.StreamReader | None = None,
                 writer: asyncio.StreamWriter | None = None) -> None:
        self.process = process
        self.reader = reader or process.stdout
        self.writer = writer or process.stdin
        self.stderr = ""

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def message(self) -> dict[str, Any]:
        """The next frame the server writes, parsed strictly."""
        async def read() -> dict[str, Any]:
            headers = await self.reader.readuntil(b"\r\n\r\n")
            lengths = re.findall(rb"^Content-Length: (\d+)\r$", headers, re.MULTILINE)
            assert len(lengths) == 1, headers
            return json.loads(await self.reader.readexactly(int(lengths[0])))

        return await asyncio.wait_for(read(), WAIT_S)

    async def reply(self, id_: int) -> dict[str, Any]:
        """The next message, which must be the response to request `id_`."""
        message = await self.message()
        assert message.get("id") == id_ and "method" not in message, message
        return message

    async def initialize(self, prefix: bytes = b"") -> None:
        """Send `prefix` then initialize (id 1); the reply must be recap's InitializeResult."""
        await self.send(prefix + INITIALIZE)
        result = (await self.reply(1))["result"]
        assert result["serverInfo"]["name"] == "recap"
        assert "recap.status" in result["capabilities"]["executeCommandProvider"]["commands"]
        await self.send(notification("initialized", {}))

    async def status(self, id_: int) -> None:
        assert (await self.request(id_, "workspace/executeCommand", STATUS))["result"] == {"sessions": []}

    async def request(self, id_: int, method: str, params: Any = None) -> dict[str, Any]:
        await self.send(request(id_, method, params))
        return await self.reply(id_)

    async def wait(self) -> int:
        """Wait for the process to exit (stdin stays open); keep its stderr."""
        rc = await asyncio.wait_for(self.process.wait(), WAIT_S)
        self.stderr = (await self.process.stderr.read()).decode()
        return rc

    async def shut_down(self) -> int:
        """shutdown, then exit: the process's exit code."""
        assert (await self.request(999, "shutdown"))["result"] is None
        await self.send(notification("exit"))
        return await self.wait()

    def log(self) -> list[str]:
        """stderr as `logger LEVEL: message` lines; fails on any other line (a traceback)."""
        lines = []
        for line in self.stderr.splitlines():
            match = LOG_LINE.match(line)
            assert match, f"not a log line: {line!r} in\n{self.stderr}"
            lines.append(f"{match[1]} {match[2]}: {match[3]}")
        return lines


@pytest.fixture
async def serve():
    """`await serve(*args, **env)`: a new `recap serve *args` process; killed at the end if still running."""
    started: list[asyncio.subprocess.Process] = []

    async def start(*args: str, **env: str) -> RawServer:
        process = await asyncio.create_subprocess_exec(
            RECAP, "serve", *args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, **env})
        started.append(process)
        return RawServer(process)

    yield start
    for process in started:
        if process.returncode is None:
            process.kill()
            await process.wait()


# ---- bad frames ------------------------------------------------------------------------------

SKIP = "; skipping to the next Content-Length header"


def framing(*messages: str) -> list[str]:
    return [f"lsp_server.framing WARNING: {m}" for m in messages]


def resynced(skipped: int) -> str:
    return f"resynchronized at a Content-Length header after skipping {skipped} bytes"


def json_error(body: bytes) -> str:
    """What the json module says about `body` (the server logs the same words)."""
    try:
        json.loads(body)
    except (ValueError, RecursionError) as exc:
        return str(exc)
    raise AssertionError(f"{body!r} is valid JSON")


LONG = b'Content-Length: 5\r\n\r\n{"jsonrpc": "2.0", "id": 9, "method": "shutdown"}'  # body longer than 5
MISSING = b'Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n\r\n{"jsonrpc": "2.0", "method": "exit"}'
RANDOM = random.Random(10).randbytes(4096)
HEADER_FLOOD = b"X" * (MAX_HEADER_BYTES + 10)
NESTED = b"[" * 100_000
NOT_UTF8 = b'"\xff\xfe"'
HUGE = b"Content-Length: 99999999999\r\n\r\n{}"
NEGATIVE = b"Content-Length: -5\r\n\r\n{}"
HEX = b"Content-Length: 0x10\r\n\r\n{}"
TWICE = b"Content-Length: 2\r\nContent-Length: 2\r\n\r\n{}"

# name -> (bytes sent before a valid initialize, the exact log lines; a str is a regular expression)
BAD_FRAMES: dict[str, tuple[bytes, list[str] | str]] = {
    "huge Content-Length": (HUGE, framing(
        f"bad frame: Content-Length 99999999999 is over the limit of {DEFAULT_MAX_MESSAGE_BYTES} bytes{SKIP}",
        resynced(len(HUGE)))),
    "missing Content-Length": (MISSING, framing(
        f"bad frame: a header without Content-Length: 'Content-Type: application/vscode-jsonrpc; charset=utf-8'{SKIP}",
        resynced(len(MISSING)))),
    "negative Content-Length": (NEGATIVE, framing(
        f"bad frame: Content-Length '-5' is not a decimal number of bytes{SKIP}", resynced(len(NEGATIVE)))),
    "non-numeric Content-Length": (HEX, framing(
        f"bad frame: Content-Length '0x10' is not a decimal number of bytes{SKIP}", resynced(len(HEX)))),
    "two Content-Length headers": (TWICE, framing(  # resumes at the second one; {} is no message
        f"bad frame: two Content-Length headers{SKIP}", resynced(len(b"Content-Length: 2\r\n"))) + [
        'lsp_server.server WARNING: dropped a message: (no method): not JSON-RPC 2.0 (jsonrpc "2.0", an integer or string id)']),
    "Content-Length shorter than the body": (LONG, framing(
        # 5 bytes of body are no JSON; the rest runs into the next header line, which is then bad
        f"dropped a 5-byte message: the body is not JSON ({json_error(LONG[21:26])})",
        "bad frame: malformed header line 'nrpc\": \"2.0\", \"id\": 9, \"method\": \"shutdown\"}Content-Length: '... "
        f"(62 bytes){SKIP}",  # 60 bytes shown
        resynced(len(LONG) - 26))),
    "4 KB of random bytes": (RANDOM, (
        rf"lsp_server\.framing WARNING: bad frame: .+{re.escape(SKIP)}\n"
        rf"lsp_server\.framing WARNING: {resynced(len(RANDOM))}")),
    "a header that never ends": (HEADER_FLOOD, framing(
        f"bad frame: no empty line ends the header within {MAX_HEADER_BYTES} bytes{SKIP}",
        resynced(len(HEADER_FLOOD)))),
    "a body that is not JSON": (b"Content-Length: 3\r\n\r\n{x}", framing(
        f"dropped a 3-byte message: the body is not JSON ({json_error(b'{x}')})")),
    "a body that is not UTF-8": (b"Content-Length: 4\r\n\r\n" + NOT_UTF8, framing(
        f"dropped a 4-byte message: the body is not JSON ({json_error(NOT_UTF8)})")),
    "a JSON array (a batch)": (b"Content-Length: 2\r\n\r\n[]", framing(
        "dropped a 2-byte message: the body is a JSON list, not an object")),
    "JSON nested 100,000 deep": (b"Content-Length: 100000\r\n\r\n" + NESTED, framing(
        f"dropped a 100000-byte message: the body is not JSON ({json_error(NESTED)})")),
}


@pytest.mark.parametrize("name", BAD_FRAMES)
async def test_a_bad_frame_is_logged_and_skipped_and_the_next_request_answered(serve, name: str) -> None:
    bad, expected = BAD_FRAMES[name]
    server = await serve()
    await server.initialize(prefix=bad)
    await server.status(2)
    assert await server.shut_down() == 0
    if isinstance(expected, str):
        assert re.fullmatch(expected, "\n".join(server.log())), server.stderr
    else:
        assert server.log() == expected


async def test_one_server_survives_every_bad_frame_in_a_row(serve) -> None:
    server = await serve()
    await server.initialize()
    for id_, (bad, _) in enumerate(BAD_FRAMES.values(), start=2):
        await server.send(bad)
        await server.status(id_)
    assert await server.shut_down() == 0
    assert "Traceback" not in server.stderr


async def test_the_message_size_cap_is_configurable(serve) -> None:
    big = request(1, "initialize", {"capabilities": {}, "initializationOptions": {"pad": "x" * 100}})
    server = await serve(RECAP_LSP_MAX_MESSAGE_BYTES="100")
    await server.initialize(prefix=big)  # the small initialize after it is answered
    assert await server.shut_down() == 0
    size = len(big) - len(b"Content-Length: 000\r\n\r\n")
    assert server.log() == framing(f"bad frame: Content-Length {size} is over the limit of 100 bytes{SKIP}",
                                   resynced(len(big)))


async def test_an_invalid_size_cap_is_reported_and_the_default_used(serve) -> None:
    server = await serve(RECAP_LSP_MAX_MESSAGE_BYTES="lots")
    await server.initialize()
    assert await server.shut_down() == 0
    assert server.log() == [f"lsp_server.server ERROR: RECAP_LSP_MAX_MESSAGE_BYTES must be a positive number of "
                            f"bytes, got 'lots'; using {DEFAULT_MAX_MESSAGE_BYTES}"]


async def test_the_end_of_the_stream_inside_a_frame_ends_the_server_with_a_reason(serve) -> None:
    server = await serve()
    await server.initialize()
    await server.send(b"Content-Length: 50\r\n\r\n{")
    server.writer.close()
    assert await server.wait() == 0
    assert server.log() == framing("the stream ended inside a message body (1 of 50 bytes)")


# ---- JSON that is not an LSP message -----------------------------------------------------------

async def test_json_objects_that_are_not_json_rpc_requests_get_invalid_request_or_are_dropped(serve) -> None:
    server = await serve()
    await server.initialize()
    for id_, message in [(2, {"id": 2, "method": "shutdown"}), (3, {"jsonrpc": "1.0", "id": 3, "method": "shutdown"})]:
        await server.send(frame(message))
        error = (await server.reply(id_))["error"]
        assert error == {"code": INVALID_REQUEST,
                         "message": 'shutdown: not JSON-RPC 2.0 (jsonrpc "2.0", an integer or string id)'}
    await server.send(frame({"jsonrpc": "2.0", "id": [4], "method": "shutdown"}))  # no id to answer with
    await server.send(frame({"x": 1}))
    await server.status(5)  # the next reply is this one: the two above got none
    assert await server.shut_down() == 0
    assert server.log() == [
        'lsp_server.server WARNING: dropped a message: shutdown: not JSON-RPC 2.0 (jsonrpc "2.0", an integer or string id)',
        'lsp_server.server WARNING: dropped a message: (no method): not JSON-RPC 2.0 (jsonrpc "2.0", an integer or string id)',
    ]


# ---- the lifecycle ---------------------------------------------------------------------------

async def test_requests_before_initialize_get_server_not_initialized(serve, tmp_path) -> None:
    server = await serve()
    await server.send(notification("textDocument/didOpen", {"textDocument": {
        "uri": tmp_path.as_uri() + "/a.py", "languageId": "python", "version": 1, "text": "x = 1\n"}}))
    for id_, method, params in [(2, "workspace/executeCommand", {"command": "recap.run", "arguments": [{"task": "x"}]}),
                                (3, "workspace/executeCommand", STATUS), (4, "shutdown", None)]:
        error = (await server.request(id_, method, params))["error"]
        assert error == {"code": SERVER_NOT_INITIALIZED,
                         "message": f"{method}: the server is not initialized; send initialize first"}
    await server.initialize()  # the first reply after the errors: the didOpen got none
    again = await server.request(5, "initialize", {"capabilities": {}})
    assert again["error"] == {"code": INVALID_REQUEST, "message": "initialize: the server is already initialized"}
    await server.status(6)
    assert (await server.request(7, "shutdown"))["result"] is None
    after = await server.request(8, "workspace/executeCommand", STATUS)
    assert after["error"] == {"code": INVALID_REQUEST,
                              "message": "workspace/executeCommand: the server is shut down; only exit is accepted"}
    await server.send(notification("exit"))
    assert await server.wait() == 0
    assert server.log() == []


@pytest.mark.parametrize("initialized", [True, False], ids=["after initialize", "before initialize"])
async def test_exit_without_shutdown_exits_with_1(serve, initialized: bool) -> None:
    server = await serve()
    if initialized:
        await server.initialize()
        await server.status(2)
    await server.send(notification("exit"))
    assert await server.wait() == 1
    assert server.log() == []


async def test_shutdown_then_exit_exits_with_0(serve) -> None:
    server = await serve()
    await server.initialize()
    assert await server.shut_down() == 0
    assert server.log() == []


async def test_the_tcp_transport_reads_through_the_same_checks(serve) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = await serve("--tcp", f"127.0.0.1:{port}")
    for _ in range(400):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            break
        except OSError:
            await asyncio.sleep(0.05)
    client = RawServer(server.process, reader, writer)
    await client.initialize(prefix=HUGE)
    await client.status(2)
    await client.send(notification("exit"))  # no shutdown
    assert await client.wait() == 1
    assert client.log() == framing(
        f"bad frame: Content-Length 99999999999 is over the limit of {DEFAULT_MAX_MESSAGE_BYTES} bytes{SKIP}",
        resynced(len(HUGE)))
