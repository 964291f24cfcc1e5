"""Turning chat messages and tool specs into prompt text for a local model's chat template.

Templates that render `tools=` and assistant `tool_calls` themselves (Qwen2.5, Hermes, Llama 3.1)
get the messages as they are. Templates that ignore them (SmolLM2's plain ChatML) get the
Hermes-style equivalent spelled out in text, so that the model still sees its tools and its own
calls (format from NousResearch Hermes-Function-Calling, also used by Qwen2.5):

- the tool specs as a `<tools>...</tools>` block with calling instructions, appended to the system
  message (a system message is added when there is none);
- each assistant `tool_calls` entry as `<tool_call>\\n{json}\\n</tool_call>` markup in the content
  (unless the content already carries the markup, as `Completion.text` of a local model does);
- each tool message as a user message wrapping the output in `<tool_response>...</tool_response>`.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Sequence

from harness.toolcall import OPEN, render_tool_call
from harness.types import Message

log = logging.getLogger(__name__)

_PROBE_NAME = "zz_recap_probe_tool"

TOOLS_PREAMBLE = (
    "# Tools\n\n"
    "You may call one of the following functions to act. "
    "The function signatures are given within <tools></tools> XML tags:\n<tools>\n"
)
TOOLS_INSTRUCTIONS = (
    "\n</tools>\n\n"
    "To call a function, answer with a JSON object holding the function name and its arguments "
    "within <tool_call></tool_call> XML tags, exactly like this:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


def tools_system_block(tools: Sequence[dict[str, Any]]) -> str:
    """The Hermes-style `<tools>` block for a system message (one compact JSON spec per line)."""
    specs = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return TOOLS_PREAMBLE + specs + TOOLS_INSTRUCTIONS


def with_tools_block(messages: Sequence[Message], tools: Sequence[dict[str, Any]]) -> list[Message]:
    """`messages` with `tools_system_block(tools)` appended to the system message (added first when
    there is none)."""
    msgs = list(messages)
    block = tools_system_block(tools)
    if msgs and msgs[0].get("role") == "system":
        msgs[0] = {**msgs[0], "content": f"{msgs[0].get('content') or ''}\n\n{block}".lstrip()}
    else:
        msgs.insert(0, {"role": "system", "content": block})
    return msgs


def as_text_tool_messages(messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> list[Message]:
    """The Hermes text equivalent of `messages` + `tools` (module docstring), for a server or
    template that takes neither `tools` nor `tool_calls`."""
    msgs = [ChatFormat.adapt(m) for m in messages]
    return with_tools_block(msgs, tools) if tools else msgs


class ChatFormat:
    """Renders messages with a tokenizer's chat template, filling in what the template ignores.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
    Attributes:
        native_tools: the template renders `tools=` itself.
        native_tool_calls: the template renders assistant `tool_calls` (and tool messages) itself.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        probe_spec = {"type": "function", "function": {"name": _PROBE_NAME, "description": "probe",
                                                       "parameters": {"type": "object", "properties": {}}}}
        user = [{"role": "user", "content": "hi"}]
        call = {"id": "call_0_0", "type": "function", "function": {"name": _PROBE_NAME, "arguments": {}}}
        self.native_tools = _PROBE_NAME in self._try_render(user, [probe_spec])
        self.native_tool_calls = _PROBE_NAME in self._try_render(
            user + [{"role": "assistant", "content": "", "tool_calls": [call]}], None
        )
        log.debug("chat template renders tools=%s tool_calls=%s", self.native_tools, self.native_tool_calls)

    def _try_render(self, messages: list[Message], tools: list[dict[str, Any]] | None) -> str:
        try:
            return self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False,
                                                      add_generation_prompt=False)
        except Exception:  # a template that rejects tools/tool_calls simply does not render them
            return ""

    def render(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> str:
        """The prompt text: template applied with the generation prompt (assistant turn opened)."""
        tools = list(tools) if tools else None
        msgs = [self.adapt(m) for m in messages] if not self.native_tool_calls else list(messages)
        if tools and not self.native_tools:
            msgs, tools = with_tools_block(msgs, tools), None
        return self.tokenizer.apply_chat_template(
            msgs, tools=tools if self.native_tools else None, tokenize=False, add_generation_prompt=True
        )

    def encode(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> list[int]:
        """Prompt token ids of `render(...)` (no extra special tokens: the template has them)."""
        return list(self.tokenizer(self.render(messages, tools), add_special_tokens=False)["input_ids"])

    @staticmethod
    def adapt(message: Message) -> Message:
        role = message.get("role")
        if role == "assistant" and message.get("tool_calls"):
            content = message.get("content") or ""
            if OPEN not in content:
                calls = "\n".join(
                    render_tool_call(c["function"]["name"], c["function"]["arguments"])
                    for c in message["tool_calls"]
                )
                content = f"{content}\n{calls}" if content else calls
            return {"role": "assistant", "content": content}
        if role == "tool":
            return {"role": "user", "content": f"<tool_response>\n{message.get('content', '')}\n</tool_response>"}
        return {"role": role, "content": message.get("content") or ""}
