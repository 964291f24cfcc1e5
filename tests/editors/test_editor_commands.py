"""The plugins call only commands the server offers (STYLE 20): every `recap.*` string in the
plugins' sources is either a VS Code command the extension contributes itself or a command in the
real server's `executeCommandProvider.commands`; the extension's own ids never collide with the
server's (vscode-languageclient registers those under their own names)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "editor_plugins"
VSCODE = PLUGINS / "vscode"
NVIM = PLUGINS / "nvim"
_RECAP_ID = re.compile(r"""["'](recap\.[A-Za-z_.]+)["']""")
_LUA_REQUIRE = re.compile(r"""require\(\s*["'][\w.]+["']\s*\)""")  # module names, not commands


def _server_command() -> list[str]:
    recap = Path(sys.executable).parent / "recap"
    return [str(recap), "serve"] if recap.exists() else ["recap", "serve"]


def _send(proc: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    body = json.dumps({"jsonrpc": "2.0", **message}).encode()
    assert proc.stdin is not None
    proc.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    proc.stdin.flush()


def _receive(proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert proc.stdout is not None
    length = None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("the server closed its output")
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    assert length is not None
    return json.loads(proc.stdout.read(length))


@pytest.fixture(scope="module")
def server_commands(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """`executeCommandProvider.commands` of a real `recap serve`, from its initialize result."""
    root = tmp_path_factory.mktemp("ws")
    proc = subprocess.Popen(_server_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=root)
    try:
        _send(proc, {"id": 1, "method": "initialize", "params": {"processId": os.getpid(), "rootUri": root.as_uri(), "capabilities": {}}})
        while "id" not in (reply := _receive(proc)):
            pass
        commands = reply["result"]["capabilities"]["executeCommandProvider"]["commands"]
        _send(proc, {"id": 2, "method": "shutdown"})
        while _receive(proc).get("id") != 2:
            pass
        _send(proc, {"method": "exit"})
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    return set(commands)


def _ids_in(paths: list[Path]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in paths:
        for name in _RECAP_ID.findall(_LUA_REQUIRE.sub("", path.read_text())):
            found.setdefault(name, set()).add(str(path.relative_to(PLUGINS)))
    return found


def _contributed() -> set[str]:
    manifest = json.loads((VSCODE / "package.json").read_text())
    return {c["command"] for c in manifest["contributes"]["commands"]}


def test_the_server_offers_the_commands_of_the_protocol(server_commands: set[str]) -> None:
    assert {"recap.run", "recap.cancel", "recap.accept", "recap.reject", "recap.status", "recap.proposal"} <= server_commands


@pytest.mark.parametrize("plugin", ["vscode", "nvim"])
def test_plugins_call_only_commands_the_server_offers(plugin: str, server_commands: set[str]) -> None:
    if plugin == "vscode":
        sources, own = sorted((VSCODE / "src").glob("*.ts")), _contributed()
    else:
        sources, own = sorted(NVIM.rglob("lua/**/*.lua")), set()
    used = _ids_in(sources)
    server_bound = {name: where for name, where in used.items() if name not in own}
    assert server_bound, f"no server command found in {plugin}'s sources"
    unknown = {name: sorted(where) for name, where in server_bound.items() if name not in server_commands}
    assert not unknown, f"{plugin} uses commands the server does not offer ({sorted(server_commands)}): {unknown}"
    assert {"recap.run", "recap.accept", "recap.reject", "recap.cancel", "recap.proposal"} <= set(server_bound)


def test_vscode_commands_are_contributed_and_distinct_from_the_servers(server_commands: set[str]) -> None:
    manifest = json.loads((VSCODE / "package.json").read_text())
    contributed = _contributed()
    assert not contributed & server_commands, "vscode-languageclient registers the server's commands itself"
    registered = set(re.findall(r'\w+: "(recap\.\w+)"', (VSCODE / "src" / "extension.ts").read_text()))
    assert registered == contributed, "the COMMANDS table of extension.ts and package.json disagree"
    referenced = {m["command"] for menu in manifest["contributes"]["menus"].values() for m in menu}
    referenced |= {k["command"] for k in manifest["contributes"]["keybindings"]}
    assert referenced <= contributed
