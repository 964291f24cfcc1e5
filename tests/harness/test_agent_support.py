"""Shared helpers of the agent and context tests (no tests here): a git-backed workspace in a temp
dir and a few small tools with predictable outputs."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Sequence

from pydantic import BaseModel, ConfigDict

from harness.tools.base import Tool, ToolRegistry, ToolResult
from harness.workspace import CommandResult, WorkspaceOrigin, confine


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, text=True).stdout


class GitDirWorkspace:
    """A directory under git: the start state is the first commit; `diff()` is against it."""

    def __init__(self, root: Path, files: dict[str, str] | None = None) -> None:
        self._root = root
        root.mkdir(parents=True, exist_ok=True)
        for path, text in (files or {"README.md": "hello\n"}).items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        _git(root, "init", "-q")
        _git(root, "add", "-A")
        _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
        self.origin = WorkspaceOrigin(repo=str(root), base_commit=_git(root, "rev-parse", "HEAD").strip(), sandbox="none: test")

    @property
    def root(self) -> str:
        return str(self._root)

    def read_bytes(self, path: str) -> bytes:
        return confine(self._root, path).read_bytes()

    def write_bytes(self, path: str, data: bytes) -> None:
        target = confine(self._root, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def delete(self, path: str) -> None:
        confine(self._root, path).unlink()

    def exists(self, path: str) -> bool:
        return confine(self._root, path).exists()

    def is_dir(self, path: str) -> bool:
        return confine(self._root, path).is_dir()

    def list_files(self, path: str = ".") -> list[str]:
        return sorted(_git(self._root, "ls-files", "-co", "--exclude-standard", path).split())

    def run(self, command: str | Sequence[str], *, timeout_s: float) -> CommandResult:
        started = time.perf_counter()
        args = ["bash", "-c", command] if isinstance(command, str) else list(command)
        done = subprocess.run(args, cwd=self._root, capture_output=True, text=True, timeout=timeout_s)
        return CommandResult(done.returncode, done.stdout, done.stderr, False, time.perf_counter() - started)

    def diff(self) -> str:
        _git(self._root, "add", "-A")
        return _git(self._root, "diff", "--cached", "HEAD")

    def close(self) -> None:
        pass


class EmitParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    size: int
    word: str = "w"


class FinishParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str


class WriteParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    content: str


class ReadParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str


def _write(p: WriteParams, ws) -> ToolResult:
    ws.write_bytes(p.path, p.content.encode())
    return ToolResult(f"wrote {len(p.content)} characters to {p.path}")


TOOLS = ToolRegistry(
    [
        Tool("emit", "Print `size` copies of `word`.", EmitParams, lambda p, ws: ToolResult(" ".join([p.word] * p.size))),
        Tool("read_file", "Read a file.", ReadParams, lambda p, ws: ToolResult(ws.read_bytes(p.path).decode())),
        Tool("write_file", "Write a file.", WriteParams, _write),
        Tool("finish", "End the task.", FinishParams, lambda p, ws: ToolResult(p.message, finished=True)),
    ]
)


def call(name: str, **arguments: object) -> str:
    """One scripted turn calling `name`."""
    from harness.toolcall import render_tool_call

    return render_tool_call(name, arguments)
