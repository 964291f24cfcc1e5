"""The `Tool` abstraction and the registry the agent loop calls through.

A tool is a pydantic params model (the source of its JSON Schema and of argument validation), a
description, and a function `(params, workspace) -> ToolResult`. Specs use the OpenAI
function-calling format, so the same list goes to an OpenAI-compatible server and into a chat
template's `tools=`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable

from pydantic import BaseModel, ValidationError

from harness.errors import ToolError
from harness.session import ErrorKind
from harness.toolcall import escape_surrogates
from harness.workspace import Workspace

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ToolResult:
    """What a tool call gives back.

    Attributes:
        output: text shown to the policy (already bounded by the tool).
        is_error: the call failed; `output` says why and how to fix it.
        error_kind: set by the registry for calls that never reached the tool function.
        finished: the episode ends after this call (`finish`).
    """

    output: str
    is_error: bool = False
    error_kind: ErrorKind | None = None
    finished: bool = False


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's `title` keys: they add tokens and nothing for the model."""
    if isinstance(schema, dict):
        return {
            k: _clean_schema(v)
            for k, v in schema.items()
            if not (k == "title" and isinstance(v, str))
        }
    if isinstance(schema, list):
        return [_clean_schema(v) for v in schema]
    return schema


@dataclass(frozen=True)
class Tool:
    """One tool.

    Attributes:
        name: the function name the policy calls.
        description: one or two sentences for the model.
        params: a pydantic model (use `extra="forbid"`); its JSON Schema is the tool's parameters.
        fn: `(params, workspace) -> ToolResult`; raises `ToolError` for a failure the policy should read.
    """

    name: str
    description: str
    params: type[BaseModel]
    fn: Callable[[Any, Workspace], ToolResult]

    def parameters_schema(self) -> dict[str, Any]:
        return _clean_schema(self.params.model_json_schema())

    def spec(self) -> dict[str, Any]:
        """The OpenAI function-calling spec: `{"type": "function", "function": {name, description, parameters}}`."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters_schema(),
            },
        }


def _format_validation_error(tool: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err.get("loc", ())) or "(arguments)"
        parts.append(f"{loc}: {err['msg']}")
    return f"invalid arguments for {tool}: " + "; ".join(parts)


class ToolRegistry:
    """An explicit, ordered set of tools. Duplicate names raise `ValueError`."""

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self._tools:
                raise ValueError(f"duplicate tool name {tool.name!r}")
            self._tools[tool.name] = tool

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def get(self, name: str) -> Tool:
        return self._tools[name]

    def specs(self, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """OpenAI specs of the named tools (all when `names` is None), in registry order."""
        wanted = set(self._tools) if names is None else set(names)
        return [t.spec() for n, t in self._tools.items() if n in wanted]

    def call(self, name: str, arguments: str | dict[str, Any], workspace: Workspace) -> ToolResult:
        """Validate and run one call. Never raises for bad input: every problem becomes an
        error `ToolResult` the policy can read (`error_kind` says which): a `ToolError`, an
        `OSError` (a path the file system refuses), a `ValueError` (text no system call takes) or a
        `RecursionError` from the tool are "tool_error" observations."""
        if name not in self._tools:
            return ToolResult(
                f"unknown tool {name!r}; available tools: {', '.join(self._tools)}",
                is_error=True,
                error_kind="unknown_tool",
            )
        tool = self._tools[name]
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments) if arguments.strip() else {}
            except (ValueError, RecursionError) as exc:
                return ToolResult(
                    f"arguments for {name} are not valid JSON ({exc}); send a JSON object",
                    is_error=True,
                    error_kind="malformed",
                )
        if not isinstance(arguments, dict):
            return ToolResult(
                f"arguments for {name} must be a JSON object, got {type(arguments).__name__}",
                is_error=True,
                error_kind="malformed",
            )
        try:
            params = tool.params.model_validate(arguments)
        except ValidationError as exc:
            return ToolResult(_format_validation_error(name, exc), is_error=True, error_kind="bad_arguments")
        try:
            result = tool.fn(params, workspace)
            return replace(result, output=escape_surrogates(result.output))  # non-UTF-8 file names
        except ToolError as exc:
            return ToolResult(f"{name} failed: {exc}", is_error=True, error_kind="tool_error")
        except OSError as exc:  # missing file, a directory, name too long, permissions, ...
            return ToolResult(f"{name} failed: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "),
                              is_error=True, error_kind="tool_error")
        except (ValueError, RecursionError) as exc:  # input no system call takes (NUL, lone surrogate, depth)
            logger.warning("%s raised %s on its arguments", name, type(exc).__name__, exc_info=True)
            return ToolResult(f"{name} failed: {type(exc).__name__}: {exc}", is_error=True, error_kind="tool_error")
