"""`recap serve` takes the transport flags language clients add (vscode-languageclient appends
`--stdio` and `--clientProcessId=PID`; `--pipe=NAME` and `--socket=PORT` when configured so), and
keeps editors' logs free of tracebacks for ordinary user errors."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, BinaryIO

import pytest

RECAP = [sys.executable, "-m", "recap"]


def _send(out: BinaryIO, message: dict[str, Any]) -> None:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    out.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    out.flush()


def _receive(inp: BinaryIO) -> dict[str, Any]:
    length = None
    while (line := inp.readline()) not in (b"\r\n", b"\n"):
        if not line:
            raise AssertionError("the server closed the connection")
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    assert length is not None
    return json.loads(inp.read(length))


def _request(inp: BinaryIO, out: BinaryIO, id_: int, method: str, params: Any) -> dict[str, Any]:
    _send(out, {"id": id_, "method": method, "params": params})
    while (reply := _receive(inp)).get("id") != id_:
        pass
    return reply


def _session(inp: BinaryIO, out: BinaryIO, root: Path) -> dict[str, Any]:
    """initialize, one command refused for a bad argument, shutdown, exit: the refusal's reply."""
    init = _request(inp, out, 1, "initialize", {"processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": {}})
    assert init["result"]["serverInfo"]["name"] == "recap"
    _send(out, {"method": "initialized", "params": {}})
    refused = _request(inp, out, 2, "workspace/executeCommand", {"command": "recap.status", "arguments": [{"session": "nope"}]})
    _request(inp, out, 3, "shutdown", None)
    _send(out, {"method": "exit"})
    return refused


def _check_stderr(stderr: str) -> None:
    assert "unknown session 'nope'" in stderr, stderr  # said once, in one line
    assert "Traceback" not in stderr, stderr


@pytest.mark.timeout(120)
def test_stdio_with_the_flags_vscode_languageclient_appends(tmp_path: Path) -> None:
    proc = subprocess.Popen([*RECAP, "serve", "--stdio", f"--clientProcessId={os.getpid()}"], cwd=tmp_path,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        refused = _session(proc.stdout, proc.stdin, tmp_path)
        assert refused["error"]["code"] == -32602
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.stderr is not None
    _check_stderr(proc.stderr.read().decode())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["pipe", "socket"])
def test_the_server_connects_to_the_clients_pipe_or_socket(kind: str, tmp_path: Path) -> None:
    if kind == "pipe":
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        address = str(tmp_path / "lsp.sock")
        listener.bind(address)
        flag = f"--pipe={address}"
    else:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        flag = f"--socket={listener.getsockname()[1]}"
    listener.listen(1)
    listener.settimeout(60)
    proc = subprocess.Popen([*RECAP, "serve", flag], cwd=tmp_path, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        conn, _ = listener.accept()
        with conn, conn.makefile("rb") as inp, conn.makefile("wb") as out:
            refused = _session(inp, out, tmp_path)
        assert refused["error"]["code"] == -32602
        assert proc.wait(timeout=30) == 0
    finally:
        listener.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.stdout is not None and proc.stdout.read() == b""  # nothing on stdout: the socket carries it all
    assert proc.stderr is not None
    _check_stderr(proc.stderr.read().decode())


@pytest.mark.parametrize("args, expected", [
    (["--stdio", "--tcp", "127.0.0.1:1"], "choose one transport"),
    (["--socket=0"], "--socket"),
    (["--pipe=/nonexistent/recap.sock"], "cannot connect to the client"),
])
def test_bad_transport_flags_are_refused_clearly(args: list[str], expected: str, tmp_path: Path) -> None:
    proc = subprocess.run([*RECAP, "serve", *args], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 2
    assert expected in proc.stderr, proc.stderr
