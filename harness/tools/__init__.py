"""The agent's tools, each acting on a `harness.workspace.Workspace` only.

Public names:
    DEFAULT_TOOLS       the standard tool set, in the order offered to the policy
    default_registry    a `ToolRegistry` of the standard set (run_command's default timeout set)
    Tool, ToolRegistry, ToolResult   from `harness.tools.base`
    MAX_OUTPUT_CHARS    the bound on every tool output (`harness.truncate.truncate_middle`)

`prune` is not here: it edits the context, not the workspace (`harness.context.prune_tool`).
"""

from __future__ import annotations

from harness.tools.base import Tool, ToolRegistry, ToolResult
from harness.tools.command import DEFAULT_TIMEOUT_S, RUN_COMMAND, run_command_tool
from harness.tools.common import MAX_OUTPUT_CHARS
from harness.tools.control import FINISH
from harness.tools.fs import DELETE_FILE, EDIT_FILE, LIST_DIR, READ_FILE, WRITE_FILE
from harness.tools.outline import OUTLINE
from harness.tools.search import GLOB, GREP

DEFAULT_TOOLS: tuple[Tool, ...] = (
    READ_FILE, LIST_DIR, GLOB, GREP, OUTLINE, EDIT_FILE, WRITE_FILE, DELETE_FILE, RUN_COMMAND, FINISH,
)


def default_registry(*, command_timeout_s: float = DEFAULT_TIMEOUT_S) -> ToolRegistry:
    """The standard tools; `run_command` calls without `timeout_s` get `command_timeout_s` seconds.

    Raises: ValueError when `command_timeout_s` is not in (0, `command.MAX_TIMEOUT_S`].
    """
    run_command = RUN_COMMAND if command_timeout_s == DEFAULT_TIMEOUT_S else run_command_tool(
        default_timeout_s=command_timeout_s)
    return ToolRegistry(run_command if tool is RUN_COMMAND else tool for tool in DEFAULT_TOOLS)


__all__ = ["DEFAULT_TOOLS", "MAX_OUTPUT_CHARS", "Tool", "ToolRegistry", "ToolResult", "default_registry"]
