"""The finish tool: ends the episode with a message for the user."""

from __future__ import annotations

from pydantic import Field

from harness.tools.base import Tool, ToolResult
from harness.tools.common import Params, bounded
from harness.workspace import Workspace


class FinishParams(Params):
    message: str = Field(description="What was done (or why it could not be done), for the user.")


def finish(params: FinishParams, workspace: Workspace) -> ToolResult:
    return ToolResult(bounded(params.message), finished=True)


FINISH = Tool(
    "finish",
    "Call when the task is done (or can't be done): ends the episode. The workspace changes are the result.",
    FinishParams,
    finish,
)
