"""Shared helpers of the agent and context tests (no tests here): a few small tools with
predictable outputs, and a scripted-turn builder."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from harness.tools.base import Tool, ToolRegistry, ToolResult


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
