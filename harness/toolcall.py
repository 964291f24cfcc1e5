"""The text format of tool calls for local models (Hermes / Qwen style), parsed and rendered.

    <tool_call>
    {"name": "read_file", "arguments": {"path": "setup.py"}}
    </tool_call>

Parsing is tolerant of whitespace and of a missing closing tag at the very end (a completion cut
by `max_new_tokens` or by the stop string). Problems are returned, not raised: the agent loop turns
them into error observations the policy can read.
"""

from __future__ import annotations

import json
import re
from typing import Any, Sequence

from harness.types import ToolCall, tool_call_id

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|\Z)", re.DOTALL)


def parse_tool_calls(text: str, *, turn: int) -> tuple[str, list[ToolCall], list[str]]:
    """Split a completion into its free text, its tool calls and the parse problems.

    Args:
        text: the decoded completion.
        turn: the policy turn number, for deterministic call ids.
    Returns:
        (content without the call blocks, calls, errors). A block whose JSON is broken or lacks a
        string `name` yields an error (quoting the block's start) and no call; `arguments` is kept
        as JSON text so that the registry reports argument problems itself.
    """
    calls: list[ToolCall] = []
    errors: list[str] = []
    for match in _BLOCK.finditer(text):
        body = match.group(1).strip()
        index = len(calls) + len(errors)
        try:
            data = json.loads(body)
        except json.JSONDecodeError as exc:
            errors.append(f"tool call is not valid JSON ({exc}): {body[:200]!r}")
            continue
        except (ValueError, RecursionError):  # digits past int's limit; arrays/objects nested too deeply
            errors.append(f"tool call is not valid JSON (a number too long or nesting too deep): {body[:200]!r}")
            continue
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            errors.append(f'tool call must be an object with a string "name": {body[:200]!r}')
            continue
        args = data.get("arguments", data.get("parameters", {}))
        arguments = escape_surrogates(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
        calls.append(ToolCall(id=tool_call_id(turn, index), name=escape_surrogates(data["name"]), arguments=arguments))
    content = _BLOCK.sub("", text).strip()
    return content, calls, errors


def escape_surrogates(text: str) -> str:
    """`text` with each lone surrogate written as its `\\udXXX` escape, so that it can be encoded
    as UTF-8 (session files, prompts). A model writes one as a JSON escape (`"\\ud800"`), which
    `json.loads` turns into the code point; inside JSON text the escape reads back the same."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def render_tool_call(name: str, arguments: dict[str, Any] | str) -> str:
    """One call in the markup the parser reads (compact JSON)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            pass
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False, separators=(",", ":"))
    return f"{OPEN}\n{body}\n{CLOSE}"


def render_tool_calls(calls: Sequence[ToolCall]) -> str:
    return "\n".join(render_tool_call(c.name, c.arguments) for c in calls)
