"""The run_command tool: a shell command in the workspace, with a timeout that kills its process group."""

from __future__ import annotations

from pydantic import Field

from harness.tools.base import Tool, ToolResult
from harness.tools.common import MAX_OUTPUT_CHARS, Params
from harness.truncate import MIN_CHARS, truncate_middle
from harness.workspace import CommandResult, Workspace

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 600.0
"""The longest timeout a call may ask for (seconds)."""


def format_command_result(result: CommandResult, *, timeout_s: float) -> str:
    """Exit code (or the timeout), wall time, then stdout and stderr, bounded to `MAX_OUTPUT_CHARS`
    together; when both are long each keeps at least half of the budget."""
    if result.timed_out:
        status = f"TIMED OUT after {timeout_s:g}s (process group killed)"
    else:
        status = f"exit code {result.exit_code}"
    header = f"{status} ({result.duration_s:.2f} s wall time)"
    streams = [(name, text) for name, text in (("stdout", result.stdout), ("stderr", result.stderr)) if text]
    if not streams:
        return header + "\n(no output)"
    budget = MAX_OUTPUT_CHARS - len(header) - 40
    parts = [header]
    for index, (name, text) in enumerate(streams):
        other = len(streams[1 - index][1]) if len(streams) == 2 else 0
        share = max(budget - other, budget // len(streams), MIN_CHARS)
        parts.append(f"--- {name} ---\n{truncate_middle(text, max_chars=share).rstrip()}")
    return "\n".join(parts)


def run_command_tool(*, default_timeout_s: float = DEFAULT_TIMEOUT_S) -> Tool:
    """The run_command tool with `default_timeout_s` as the timeout of calls that give none.

    Raises: ValueError when `default_timeout_s` is not in (0, MAX_TIMEOUT_S].
    """
    if not 0 < default_timeout_s <= MAX_TIMEOUT_S:
        raise ValueError(f"default_timeout_s must be in (0, {MAX_TIMEOUT_S:g}], got {default_timeout_s}")

    class RunCommandParams(Params):
        command: str = Field(min_length=1, description="Shell command (bash), run with the workspace root as cwd.")
        timeout_s: float = Field(default_timeout_s, gt=0, le=MAX_TIMEOUT_S,
                                 description=f"Seconds before the command and its children are killed (at most {MAX_TIMEOUT_S:g}).")

    def run_command(params: RunCommandParams, workspace: Workspace) -> ToolResult:
        result = workspace.run(params.command, timeout_s=params.timeout_s)
        return ToolResult(format_command_result(result, timeout_s=params.timeout_s))

    return Tool(
        "run_command",
        "Run a shell command in the workspace; shows the exit code, stdout, stderr and wall time.",
        RunCommandParams,
        run_command,
    )


RUN_COMMAND = run_command_tool()
