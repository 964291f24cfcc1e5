"""`OpenAIPolicy`: any OpenAI-compatible chat endpoint (vLLM, Ollama, llama.cpp server, OpenAI)
through the `openai` package.

Tools go to the server as `tools=`; structured `tool_calls` in the reply become `ToolCall`s, and
so do `<tool_call>{json}</tool_call>` blocks in the content (some servers leave the model's text
format unparsed). Logprobs are requested and recorded when the server returns them; token ids are
not available over this API, so `prompt_ids`/`completion_ids` stay None.

Token counts: without a tokenizer the count is an approximate over-estimate (UTF-8 bytes / 3, plus
4 tokens per message and 200 for a server's tools preamble), chosen so that the context manager
errs on the side of summarizing early. Give `tokenizer_path` (a transformers folder or GGUF file of the served model) for exact counts.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Sequence

from harness.errors import ConfigError, PolicyError
from harness.toolcall import parse_tool_calls
from harness.types import Completion, Message, ToolCall, TurnKind, tool_call_id

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_MESSAGE_OVERHEAD_TOKENS = 4
_TOOLS_OVERHEAD_TOKENS = 200
"""What a server's chat template adds around tool specs (Hermes/Qwen preambles are ~100-200 tokens)."""


@dataclass(frozen=True)
class OpenAIPolicyConfig:
    """Options of an `OpenAIPolicy`.

    Attributes:
        model: the model name the server knows.
        base_url: endpoint base URL (e.g. http://127.0.0.1:8000/v1); None: OPENAI_BASE_URL, else OpenAI's.
        api_key: None: OPENAI_API_KEY; local servers without auth get the placeholder "EMPTY".
        temperature, top_p, seed: sampling options sent with each request.
        context_window: the served model's window in tokens (None: 8192, a conservative guess).
        timeout_s: per-request timeout.
        max_retries: retries of the openai client on connection errors and 429/5xx.
        logprobs: ask the server for per-token logprobs.
        tokenizer_path: a tokenizer for exact `count_tokens` (otherwise approximate).
    """

    model: str
    base_url: str | None = None
    api_key: str | None = None
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int | None = 0
    context_window: int | None = None
    timeout_s: float = 120.0
    max_retries: int = 2
    logprobs: bool = True
    tokenizer_path: str | None = None

    def __post_init__(self) -> None:
        if not self.model:
            raise ConfigError("openai: spec needs a model name, e.g. openai:qwen2.5-coder@http://127.0.0.1:8000/v1")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ConfigError(f"bad sampling options: temperature={self.temperature}, top_p={self.top_p}")
        if self.timeout_s <= 0 or self.max_retries < 0:
            raise ConfigError(f"timeout_s must be > 0 and max_retries >= 0, got {self.timeout_s}, {self.max_retries}")


def to_openai_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Our messages in the wire format: tool-call arguments as JSON text, tool messages without `name`."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = [
                {"id": c["id"], "type": "function", "function": {
                    "name": c["function"]["name"],
                    "arguments": a if isinstance(a := c["function"]["arguments"], str) else json.dumps(a),
                }}
                for c in m["tool_calls"]
            ]
            out.append({"role": "assistant", "content": m.get("content") or "", "tool_calls": calls})
        elif m.get("role") == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": m.get("content", "")})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    return out


class OpenAIPolicy:
    """A chat model behind an OpenAI-compatible HTTP API, as a `harness.types.Policy`."""

    def __init__(self, *, config: OpenAIPolicyConfig, spec: str | None = None) -> None:
        import openai

        base_url = config.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        api_key = config.api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if base_url.rstrip("/") == DEFAULT_BASE_URL:
                raise ConfigError("OpenAI's API needs a key: pass --api-key or set OPENAI_API_KEY")
            api_key = "EMPTY"
        self.spec = spec or f"openai:{config.model}@{base_url}"
        self.config = config
        self.base_url = base_url
        self.context_window = config.context_window or 8192
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=config.timeout_s,
                                    max_retries=config.max_retries)
        self._chat = None
        self._turns = 0  # numbers call ids: unique over the policy's life, even after a summary
        if config.tokenizer_path:
            from harness.policies.chat_format import ChatFormat
            from harness.policies.loading import load_tokenizer

            self._chat = ChatFormat(load_tokenizer(config.tokenizer_path))

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        """Prompt tokens: exact with `tokenizer_path`, else an over-estimate (bytes / 3 + overhead)."""
        if self._chat is not None:
            return len(self._chat.encode(messages, tools))
        payload = json.dumps(to_openai_messages(messages), ensure_ascii=False)
        overhead = _MESSAGE_OVERHEAD_TOKENS * (len(messages) + 1)
        if tools:
            payload += json.dumps(list(tools), ensure_ascii=False)
            overhead += _TOOLS_OVERHEAD_TOKENS
        return math.ceil(len(payload.encode()) / 3) + overhead

    def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        *,
        max_new_tokens: int,
        kind: TurnKind = "action",
    ) -> Completion:
        """One chat completion (see `harness.types.Policy.generate`).

        Raises: PolicyError on connection errors, timeouts, HTTP errors and empty replies.
        """
        import openai

        start = time.monotonic()
        request: dict[str, Any] = {
            "model": self.config.model, "messages": to_openai_messages(messages), "max_tokens": max_new_tokens,
            "temperature": self.config.temperature, "top_p": self.config.top_p,
        }
        if self.config.seed is not None:
            request["seed"] = self.config.seed
        if self.config.logprobs:
            request["logprobs"] = True
        if tools and kind == "action":
            request["tools"] = list(tools)
        try:
            response = self.client.chat.completions.create(**request)
        except openai.APIStatusError as exc:
            raise PolicyError(f"{self.base_url}: HTTP {exc.status_code} from the server: {_short(exc.message)}") from exc
        except openai.APIConnectionError as exc:  # includes timeouts
            raise PolicyError(f"cannot reach {self.base_url}: {exc.message} ({type(exc.__cause__).__name__ if exc.__cause__ else 'no detail'})") from exc
        except openai.OpenAIError as exc:
            raise PolicyError(f"{self.base_url}: {exc}") from exc
        if not response.choices:
            raise PolicyError(f"{self.base_url}: the server returned no choices")
        choice = response.choices[0]
        text = choice.message.content or ""
        turn, self._turns = self._turns, self._turns + 1
        calls: list[ToolCall] = []
        errors: list[str] = []
        if kind == "action":
            for i, call in enumerate(choice.message.tool_calls or []):
                fn = getattr(call, "function", None)
                if fn is None:
                    continue
                calls.append(ToolCall(id=call.id or tool_call_id(turn, i), name=fn.name, arguments=fn.arguments or "{}"))
            if not calls:
                _, calls, errors = parse_tool_calls(text, turn=turn)
        logprobs = None
        if choice.logprobs is not None and choice.logprobs.content:
            logprobs = tuple(float(t.logprob) for t in choice.logprobs.content)
        usage = response.usage
        return Completion(
            text=text, tool_calls=tuple(calls), parse_errors=tuple(errors), logprobs=logprobs,
            finish_reason=choice.finish_reason or "stop",
            prompt_tokens=usage.prompt_tokens if usage else self.count_tokens(messages, request.get("tools")),
            completion_tokens=usage.completion_tokens if usage else len(logprobs or ()),
            encoded_tokens=usage.prompt_tokens if usage else 0,
            duration_s=time.monotonic() - start,
        )


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
