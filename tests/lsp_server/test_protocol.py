"""The server's surface without running the agent: capabilities, argument validation, code actions."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
from pathlib import Path

from lsprotocol import types
from lsp_helpers import RECAP

from lsp_server import COMMANDS

INVALID_PARAMS = -32602


async def test_advertises_its_commands_and_answers_status(start_editor, repo: Path) -> None:
    editor = await start_editor(repo)
    caps = editor.init.capabilities
    assert sorted(caps.execute_command_provider.commands) == sorted(COMMANDS)
    assert caps.text_document_sync.change == types.TextDocumentSyncKind.Incremental
    assert list(caps.code_action_provider.code_action_kinds) == ["quickfix", "refactor.rewrite"]
    assert editor.init.server_info.name == "recap"
    assert await editor.command("recap.status") == {"sessions": []}
    assert await editor.command("recap.status", {}) == {"sessions": []}


async def test_bad_arguments_and_unknown_sessions_get_invalid_params_and_the_server_keeps_serving(
    start_editor, repo: Path
) -> None:
    editor = await start_editor(repo)
    cases = [
        (("recap.run",), "takes one argument"),
        (("recap.run", {"task": "x"}, {"task": "y"}), "takes one argument"),
        (("recap.run", "fix it"), "expected an object"),
        (("recap.run", {}), "task: Field required"),
        (("recap.run", {"task": "   "}), "task must not be blank"),
        (("recap.run", {"task": "x", "range": {"start": {"line": -1, "character": 0}}}), "range.start.line"),
        (("recap.run", {"task": "x", "bogus": 1}), "bogus: Extra inputs are not permitted"),
        (("recap.accept", {"session": "nope"}), "unknown session 'nope'"),
        (("recap.accept", {"session": "nope", "files": "calc.py"}), "files: Input should be a valid list"),
        (("recap.reject", {"session": 3}), "session: Input should be a valid string"),
        (("recap.cancel", {"session": "nope"}), "unknown session 'nope'"),
        (("recap.status", {"session": "nope"}), "unknown session 'nope'"),
        (("recap.proposal", {}), "session: Field required"),
        (("recap.nope", {}), "not defined"),
    ]
    for args, words in cases:
        error = await editor.error(*args)
        assert error.code == INVALID_PARAMS, (args, error)
        assert words in error.message, (args, error.message)
    assert await editor.command("recap.status", {}) == {"sessions": []}


async def test_code_actions_offer_recap_run_for_diagnostics_and_selections(start_editor, repo: Path) -> None:
    editor = await start_editor(repo)
    editor.open("calc.py")
    diagnostic = types.Diagnostic(
        range=types.Range(start=types.Position(line=1, character=4), end=types.Position(line=1, character=16)),
        message="add subtracts",
        source="test",
    )
    params = types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=editor.uri("calc.py")),
        range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=2, character=0)),
        context=types.CodeActionContext(diagnostics=[diagnostic]),
    )
    actions = await editor.client.protocol.send_request_async(types.TEXT_DOCUMENT_CODE_ACTION, params)
    actions = [a if isinstance(a, dict) else a.__dict__ for a in actions]
    assert [(a["title"], a["kind"]) for a in actions] == [
        ("Ask recap to fix: add subtracts", "quickfix"),
        ("Ask recap about the selection", "refactor.rewrite"),
    ]
    fix, selection = (a["command"] for a in actions)
    assert fix["command"] == selection["command"] == "recap.run"
    (fix_args,) = fix["arguments"]
    assert fix_args == {
        "task": "Fix this problem reported at line 2: add subtracts",
        "uri": editor.uri("calc.py"),
        "range": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 16}},
    }
    assert actions[0]["diagnostics"][0]["message"] == "add subtracts"
    (sel_args,) = selection["arguments"]
    assert sel_args["range"] == {"start": {"line": 0, "character": 0}, "end": {"line": 2, "character": 0}}

    empty = types.CodeActionParams(
        text_document=params.text_document,
        range=types.Range(start=types.Position(line=3, character=0), end=types.Position(line=3, character=0)),
        context=types.CodeActionContext(diagnostics=[]),
    )
    assert await editor.client.protocol.send_request_async(types.TEXT_DOCUMENT_CODE_ACTION, empty) in (None, [])


async def _rpc(reader, writer, message: dict) -> dict | None:
    body = json.dumps(message).encode()
    writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await writer.drain()
    if "id" not in message:
        return None
    while True:
        headers = await reader.readuntil(b"\r\n\r\n")
        length = int(headers.split(b"Content-Length:")[1].split(b"\r\n")[0])
        reply = json.loads(await reader.readexactly(length))
        if reply.get("id") == message["id"]:
            return reply


async def test_serve_over_tcp_for_debugging(repo: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = await asyncio.create_subprocess_exec(RECAP, "serve", "--tcp", f"127.0.0.1:{port}")
    try:
        for _ in range(200):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.05)
        init = await _rpc(reader, writer, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                           "params": {"capabilities": {}, "rootUri": repo.as_uri()}})
        assert sorted(init["result"]["capabilities"]["executeCommandProvider"]["commands"]) == sorted(COMMANDS)
        await _rpc(reader, writer, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
        status = await _rpc(reader, writer, {"jsonrpc": "2.0", "id": 2, "method": "workspace/executeCommand",
                                             "params": {"command": "recap.status", "arguments": [{}]}})
        assert status["result"] == {"sessions": []}
        await _rpc(reader, writer, {"jsonrpc": "2.0", "id": 3, "method": "shutdown"})
        await _rpc(reader, writer, {"jsonrpc": "2.0", "method": "exit"})
        writer.close()
    finally:
        if server.returncode is None:
            server.terminate()
        await server.wait()


def test_serve_refuses_a_malformed_tcp_address() -> None:
    done = subprocess.run([RECAP, "serve", "--tcp", "localhost"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "expected HOST:PORT" in done.stderr


async def test_bad_initialization_options_are_reported_and_the_defaults_kept(start_editor, repo: Path) -> None:
    editor = await start_editor(repo, backend="nope", maxSteps=0)
    await editor.wait_for(lambda: editor.client.messages, timeout_s=30)
    (message,) = editor.client.messages
    assert message.type == types.MessageType.Error
    assert "bad initializationOptions, keeping the previous settings" in message.message
    assert "backend: Input should be 'local' or 'docker'" in message.message
    assert "maxSteps: Input should be greater than or equal to 1" in message.message
    assert await editor.command("recap.status") == {"sessions": []}


async def test_malformed_execute_command_params_get_invalid_params_and_the_server_keeps_serving(repo: Path) -> None:
    """Raw JSON-RPC, since a typed client cannot send these: params pygls cannot convert used to get no
    response at all (only a window/showMessage)."""
    server = await asyncio.create_subprocess_exec(RECAP, "serve", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    reader, writer = server.stdout, server.stdin

    async def request(id_: int, method: str, params: object) -> dict:
        message = {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}
        return await asyncio.wait_for(_rpc(reader, writer, message), 30)

    try:
        await request(1, "initialize", {"capabilities": {}, "rootUri": repo.as_uri()})
        await _rpc(reader, writer, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
        cases = [
            ({"command": "recap.status", "arguments": [1, 2]}, "takes one argument, an object; got 2"),
            ({"command": "recap.status", "arguments": [1]}, "expected an object, got int"),
            ([1, 2], "workspace/executeCommand: params must be an object, got list"),
            ({"arguments": [{}]}, "required field missing @ $.params.command"),
            ({"command": "recap.status", "arguments": 5}, "@ $.params.arguments"),
        ]
        for id_, (params, words) in enumerate(cases, start=2):
            reply = await request(id_, "workspace/executeCommand", params)
            assert reply["error"]["code"] == INVALID_PARAMS, (params, reply)
            assert words in reply["error"]["message"], (params, reply)
        status = await request(20, "workspace/executeCommand", {"command": "recap.status", "arguments": [{}]})
        assert status["result"] == {"sessions": []}
        await request(21, "shutdown", None)
        await _rpc(reader, writer, {"jsonrpc": "2.0", "method": "exit"})
        assert await asyncio.wait_for(server.wait(), 30) == 0
    finally:
        if server.returncode is None:
            server.terminate()
            await server.wait()
