"""Chat messages, tool calls and completions: the data that flows between the agent loop and a policy.

Messages are plain dicts in the OpenAI chat format (what chat templates and OpenAI-compatible
servers take), built and read through the helpers here so that their shape stays in one place:

    {"role": "system" | "user", "content": str}
    {"role": "assistant", "content": str, "tool_calls": [{"id", "type": "function",
        "function": {"name": str, "arguments": dict}}]}          # arguments as an object
    {"role": "tool", "tool_call_id": str, "name": str, "content": str}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, Sequence, runtime_checkable

Message = dict[str, Any]
TurnKind = Literal["action", "summary"]


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the policy wrote it.

    Attributes:
        id: call id (from the server, or `call_<turn>_<i>` when the policy gave none).
        name: the tool name as written (may be unknown).
        arguments: the raw JSON text of the arguments as written (may be malformed).
    """

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Completion:
    """One policy turn.

    Attributes:
        text: the decoded completion (assistant content, tool-call markup included for local models).
        tool_calls: calls parsed from it (or given by the server); may be empty.
        parse_errors: human-readable problems met while parsing calls out of `text`
            (e.g. bad JSON inside `<tool_call>`); each becomes an error observation.
        prompt_ids: the exact prompt token ids, shape (P,), when the backend exposes them.
        completion_ids: the exact sampled token ids, shape (C,).
        logprobs: log-probability of each sampled token under the sampling distribution
            (the grammar-masked one for constrained turns), shape (C,), natural log.
        constrained: True when a grammar forced the output into a valid tool call.
        finish_reason: "stop", "length" or the server's reason.
        prompt_tokens, completion_tokens: counts (equal to the id lengths when ids are given).
        encoded_tokens: prompt tokens actually run through the model this turn (smaller than
            `prompt_tokens` when a KV cache was reused).
        duration_s: wall-clock seconds of the call.
        tool_call_format: how the calls were written: "structured" (the server's `tool_calls`) or a
            text format of `harness.toolcall` ("hermes", "xml_function", "bare_json", ...); None
            when the turn has no calls.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    parse_errors: tuple[str, ...] = ()
    prompt_ids: tuple[int, ...] | None = None
    completion_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    constrained: bool = False
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    encoded_tokens: int = 0
    duration_s: float = 0.0
    tool_call_format: str | None = None


@runtime_checkable
class Policy(Protocol):
    """Anything that turns a chat context into the next assistant turn.

    Implementations: `harness.policies.scripted.ScriptedPolicy`,
    `harness.policies.transformers_policy.TransformersPolicy`, `harness.policies.openai_policy.OpenAIPolicy`.
    Pick one by spec string with `harness.policies.load_policy`.
    """

    spec: str
    context_window: int
    """Maximum prompt + completion tokens the model accepts."""

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        """Exact prompt length in tokens, chat template and generation prompt included."""
        ...

    def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        *,
        max_new_tokens: int,
        kind: TurnKind = "action",
    ) -> Completion:
        """Sample the next assistant turn.

        `tools` are OpenAI function specs (`Tool.spec()`); for `kind="summary"` the policy is asked
        for plain text (no tools offered, no grammar constraint).
        Raises: `PolicyError` when the backend fails.
        """
        ...


def tool_call_id(turn: int, index: int) -> str:
    """Deterministic call id for a policy that gives none."""
    return f"call_{turn}_{index}"


def assistant_message(text: str, calls: Sequence[ToolCall] = ()) -> Message:
    """The assistant message for a completion (arguments decoded when they are valid JSON)."""
    import json

    out: Message = {"role": "assistant", "content": text}
    if calls:
        rendered = []
        for call in calls:
            try:
                args: Any = json.loads(call.arguments)
            except (ValueError, RecursionError):
                args = call.arguments
            rendered.append(
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": args}}
            )
        out["tool_calls"] = rendered
    return out


def tool_message(call_id: str, name: str, content: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}
