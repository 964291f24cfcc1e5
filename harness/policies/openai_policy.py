"""`OpenAIPolicy`: any OpenAI-compatible chat endpoint (vLLM, SGLang, llama.cpp's server,
llama-cpp-python, Ollama, LM Studio, a hosted API) through the `openai` package.

Tools go to the server as `tools=` with `tool_choice="auto"` (llama-cpp-python's
chatml-function-calling format ignores `tools` without it). Structured `tool_calls` in the reply
become `ToolCall`s; calls the server left in the text (it has no parser for the model's format) are
read by `harness.toolcall` in any of the formats open-weight models use. A server that refuses
`tools` with HTTP 400 is asked again with the tools described in the system prompt (Hermes text
format), for the rest of the policy's life, and a warning says so.

Context window, first that answers: what the server reports (`server_info.probe_server`), else
`context_window` from the flag / config / LSP settings, else `DEFAULT_CONTEXT_WINDOW` with one
warning. When both the server and the user give one, the smaller wins (a warning when the user's is
larger). Token counts: `token_count.TokenCounter` (a local tokenizer, the server's tokenizer, or an
estimate that errs high), calibrated after each turn by the server's `usage.prompt_tokens`.

Logprobs are requested and recorded when the server returns them. `completion_ids` are set only
when the server names each logprob's token by id (vLLM with `return_tokens_as_token_ids`, sent
through `extra_body`; see `rl.distributed`); `prompt_ids` stay None.

Streaming: inside `with policy.streaming(callback):` replies are streamed and each piece of text
goes to `callback(text)` as it arrives (the CLI prints it, the language server sends `recap/event`).

Threat model: the server is trusted to run the model but not to be well-formed: an HTML page, a
body that is not a completion, a hung connection or an HTTP error becomes a `PolicyError` whose
message says what happened, never a traceback. Reply text and tool calls are model output and stay
data (see `harness.toolcall`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence
from urllib.parse import urlparse

from harness.errors import ConfigError, PolicyError
from harness.policies.server_info import PROMPT_IN_ERROR, WINDOW_IN_ERROR, ServerInfo, probe_server
from harness.policies.token_count import TokenCounter
from harness.toolcall import parse_text_calls
from harness.types import Completion, Message, ToolCall, TurnKind, tool_call_id

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_TOKEN_ID = re.compile(r"token_id:(\d+)")
"""How vLLM names a logprob's token with `return_tokens_as_token_ids`."""
DEFAULT_CONTEXT_WINDOW = 8192
"""Used when neither the server nor the user says; small enough for most served models."""


def check_base_url(url: str) -> str:
    """`url` if it is an absolute http(s) URL; raises ConfigError saying how to write it."""
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        hint = f"; did you mean http://{url}?" if "://" not in url else ""
        raise ConfigError(f"endpoint URL {url!r} needs a scheme and a host, e.g. http://127.0.0.1:8000/v1{hint}")
    return url


@dataclass(frozen=True)
class OpenAIPolicyConfig:
    """Options of an `OpenAIPolicy`.

    Attributes:
        model: the model name the server knows.
        base_url: endpoint base URL (e.g. http://127.0.0.1:8000/v1); None: OPENAI_BASE_URL, else OpenAI's.
        api_key: None: OPENAI_API_KEY; local servers without auth get the placeholder "EMPTY".
        temperature, top_p, seed: sampling options sent with each request.
        context_window: the served model's window in tokens, when the server does not say (module
            docstring); None: discovered, else `DEFAULT_CONTEXT_WINDOW`.
        timeout_s: seconds to wait for a reply (per attempt; a streamed reply: between pieces).
        max_retries: further attempts after a timeout, a lost connection, HTTP 429 or 5xx.
        logprobs: ask the server for per-token logprobs.
        tokenizer_path: the served model's tokenizer (transformers folder or hub name, or a GGUF
            file) for exact counts.
        probe: ask the server for its window and tokenizer at start (off: no extra requests).
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
    probe: bool = True
    extra_body: dict[str, Any] | None = None
    """Server-specific request fields (e.g. vLLM's `return_tokens_as_token_ids`)."""

    def __post_init__(self) -> None:
        if not self.model:
            raise ConfigError("openai: spec needs a model name, e.g. openai:qwen2.5-coder@http://127.0.0.1:8000/v1")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ConfigError(f"bad sampling options: temperature={self.temperature}, top_p={self.top_p}")
        if self.timeout_s <= 0 or self.max_retries < 0:
            raise ConfigError(f"timeout_s must be > 0 and max_retries >= 0, got {self.timeout_s}, {self.max_retries}")
        if self.context_window is not None and self.context_window < 256:
            raise ConfigError(f"context_window must be at least 256 tokens, got {self.context_window}")
        if self.base_url is not None:
            check_base_url(self.base_url)


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
    """A chat model behind an OpenAI-compatible HTTP API, as a `harness.types.Policy`.

    Attributes:
        context_window: the window in use (tokens); `window_source` says where it came from.
        server: what the probes found (`server_info.ServerInfo`).
        counter: the token counter (`counter.kind`: "tokenizer", "server" or "estimate").
        text_tools: True once the server refused `tools` and they go in the system prompt.
        formats_seen: tool-call formats met so far ("structured", "hermes", "bare_json", ...).
    Raises (constructor): ConfigError for a bad URL, a missing key for OpenAI's API, or a tokenizer
        that cannot be loaded.
    """

    def __init__(self, *, config: OpenAIPolicyConfig, spec: str | None = None) -> None:
        import openai

        base_url = check_base_url(config.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)
        api_key = config.api_key or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            if base_url.rstrip("/") == DEFAULT_BASE_URL:
                raise ConfigError("OpenAI's API needs a key: pass --api-key or set OPENAI_API_KEY")
            api_key = "EMPTY"
        self.spec = spec or f"openai:{config.model}@{base_url}"
        self.config = config
        self.base_url = base_url
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=config.timeout_s,
                                    max_retries=config.max_retries)
        probed = config.probe and base_url.rstrip("/") != DEFAULT_BASE_URL
        self.server = (probe_server(base_url, config.model, api_key=api_key, timeout_s=min(config.timeout_s, 10.0))
                       if probed else ServerInfo(None, "", "unknown", None))
        for note in self.server.notes:
            log.warning("%s: %s", base_url, note)
        self.context_window, self.window_source = self._window(config.context_window)
        self.counter = self._counter(config.tokenizer_path)
        self.text_tools = False
        self.formats_seen: set[str] = set()
        self._turns = 0  # numbers call ids: unique over the policy's life, even after a summary
        self._lock = threading.Lock()
        self._local = threading.local()

    def _window(self, given: int | None) -> tuple[int, str]:
        found, source = self.server.window, self.server.window_source
        if found and given and given > found:
            log.warning("--context-window %d is above the server's window of %d tokens (%s); using %d",
                        given, found, source, found)
        if found and given:
            return min(found, given), source if found <= given else "--context-window"
        if found:
            return found, source
        if given:
            return given, "--context-window"
        log.warning("%s does not report its context window; assuming %d tokens. Pass --context-window "
                    "(or [model] context_window, or the contextWindow setting) with the served window",
                    self.base_url, DEFAULT_CONTEXT_WINDOW)
        return DEFAULT_CONTEXT_WINDOW, "default"

    def _counter(self, tokenizer_path: str | None) -> TokenCounter:
        if tokenizer_path:
            from harness.policies.chat_format import ChatFormat
            from harness.policies.loading import load_tokenizer

            chat = ChatFormat(load_tokenizer(tokenizer_path))
            return TokenCounter(kind="tokenizer", exact=lambda m, t: len(chat.encode(m, t)))
        if self.server.count_text is not None:
            return TokenCounter(kind="server", count_text=self.server.count_text)
        return TokenCounter(kind="estimate")

    @property
    def count_epoch(self) -> int:
        """Changes whenever counts of the same prompt may change (calibration)."""
        return self.counter.epoch

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        """Prompt tokens: exact with a tokenizer, else the server's tokenizer or an estimate, both
        calibrated to err high (see `token_count`)."""
        return self.counter.count(messages, tools)

    @contextlib.contextmanager
    def streaming(self, callback: Callable[[str], None]) -> Iterator[None]:
        """Within the block, replies on this thread are streamed and each text piece goes to `callback`."""
        previous = getattr(self._local, "callback", None)
        self._local.callback = callback
        try:
            yield
        finally:
            self._local.callback = previous

    # -- one request ------------------------------------------------------------------------------

    def _request(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None,
                 max_new_tokens: int) -> dict[str, Any]:
        from harness.policies.chat_format import as_text_tool_messages

        wire = as_text_tool_messages(messages, tools) if self.text_tools else to_openai_messages(messages)
        request: dict[str, Any] = {
            "model": self.config.model, "messages": wire, "max_tokens": max_new_tokens,
            "temperature": self.config.temperature, "top_p": self.config.top_p,
        }
        if self.config.seed is not None:
            request["seed"] = self.config.seed
        if self.config.logprobs:
            request["logprobs"] = True
        if self.config.extra_body:
            request["extra_body"] = dict(self.config.extra_body)
        if tools and not self.text_tools:
            request["tools"] = list(tools)
            request["tool_choice"] = "auto"
        return request

    def _error(self, exc: Exception, request: dict[str, Any]) -> PolicyError:
        import openai

        if isinstance(exc, openai.APITimeoutError):
            tries = self.config.max_retries + 1
            return PolicyError(
                f"{self.base_url} accepted the connection but sent no reply within {self.config.timeout_s:g} s "
                f"({tries} attempt{'s' if tries > 1 else ''}); the server is hung or too slow: raise --timeout "
                "or check the server")
        if isinstance(exc, openai.APIConnectionError):
            cause = exc.__cause__
            return PolicyError(f"cannot reach {self.base_url}: {exc.message} "
                               f"({type(cause).__name__ + ': ' + str(cause)[:200] if cause else 'no detail'})")
        if isinstance(exc, openai.APIStatusError):
            text = _short(str(exc.message))
            window = WINDOW_IN_ERROR.search(text)
            if exc.status_code == 400 and window:
                real = PROMPT_IN_ERROR.search(text)
                if real:
                    self.counter.calibrate(self.counter.raw(request["_messages"], request.get("tools")), int(real.group(1)))
                return PolicyError(
                    f"{self.base_url}: the prompt did not fit the server's window of {window.group(1)} tokens "
                    f"(recap counted {request['_counted']} of {self.context_window}, counts now recalibrated): {text}")
            return PolicyError(f"{self.base_url}: HTTP {exc.status_code} from the server: {text}")
        return PolicyError(f"{self.base_url}: {type(exc).__name__}: {_short(str(exc))}")

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        """One completion as a plain dict {text, tool_calls, logprobs, finish_reason, usage}."""
        callback = getattr(self._local, "callback", None)
        wire = {k: v for k, v in request.items() if not k.startswith("_")}
        if callback is None:
            response = self.client.chat.completions.create(**wire)
            return _read_response(response, self.base_url)
        stream = self.client.chat.completions.create(**wire, stream=True, stream_options={"include_usage": True})
        return _read_stream(stream, callback, self.base_url)

    def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        *,
        max_new_tokens: int,
        kind: TurnKind = "action",
    ) -> Completion:
        """One chat completion (see `harness.types.Policy.generate`).

        Raises: PolicyError on connection errors, timeouts, HTTP errors (an over-long prompt says
        so and recalibrates the counts), a reply that is not a completion, and empty replies.
        """
        import openai

        start = time.monotonic()
        offered = list(tools) if tools and kind == "action" else None
        request = self._request(messages, offered, max_new_tokens)
        request["_messages"], request["_counted"] = messages, self.count_tokens(messages, offered)
        try:
            try:
                reply = self._send(request)
            except openai.BadRequestError as exc:
                if "tools" not in request or WINDOW_IN_ERROR.search(str(exc.message)):
                    raise
                log.warning("%s refused the tools (HTTP 400: %s); from now on the tools are described in the "
                            "system prompt and calls are read from the text", self.base_url, _short(str(exc.message), 160))
                self.text_tools = True
                request = {**self._request(messages, offered, max_new_tokens), "_messages": messages,
                           "_counted": request["_counted"]}
                reply = self._send(request)
        except openai.OpenAIError as exc:
            raise self._error(exc, request) from exc
        with self._lock:
            turn, self._turns = self._turns, self._turns + 1
        calls: list[ToolCall] = []
        errors: list[str] = []
        call_format = None
        if kind == "action":
            for i, (call_id, name, arguments) in enumerate(reply["tool_calls"]):
                calls.append(ToolCall(id=call_id or tool_call_id(turn, i), name=name, arguments=arguments or "{}"))
            call_format = "structured" if calls else None
            if not calls:
                parsed = parse_text_calls(reply["text"], turn=turn)
                calls, errors, call_format = parsed.calls, parsed.errors, parsed.format
            if call_format:
                self.formats_seen.add(call_format)
        usage = reply["usage"]
        if usage is not None and usage[0] > 0:
            self.counter.calibrate(self.counter.raw(messages, request.get("tools")), usage[0])
        logprobs = reply["logprobs"]
        ids = [_TOKEN_ID.fullmatch(t) for t in reply["logprob_tokens"] or ()]
        return Completion(
            completion_ids=tuple(int(m.group(1)) for m in ids) if ids and all(ids) else None,
            text=reply["text"], tool_calls=tuple(calls), parse_errors=tuple(errors), logprobs=logprobs,
            finish_reason=reply["finish_reason"] or "stop",
            prompt_tokens=usage[0] if usage else request["_counted"],
            completion_tokens=usage[1] if usage else len(logprobs or ()),
            encoded_tokens=usage[0] if usage else 0,
            duration_s=time.monotonic() - start, tool_call_format=call_format,
        )


def _not_a_completion(base_url: str, body: Any) -> PolicyError:
    shown = body if isinstance(body, str) else repr(body)
    kind = "an HTML page" if isinstance(body, str) and re.search(r"<\s*(!doctype|html)", body[:500], re.I) else "a body"
    return PolicyError(f"{base_url} answered with {kind} that is not a chat completion: {_short(shown.strip(), 200)!r}; "
                       "is the URL the API's base (usually ending in /v1)?")


def _read_response(response: Any, base_url: str) -> dict[str, Any]:
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        raise _not_a_completion(base_url, response)
    if not choices:
        raise PolicyError(f"{base_url}: the server returned no choices")
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise _not_a_completion(base_url, response)
    calls = [(c.id, c.function.name, c.function.arguments) for c in (message.tool_calls or [])
             if getattr(c, "function", None) is not None and c.function.name]
    logprobs = tokens = None
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if content:
        logprobs = tuple(float(t.logprob) for t in content)
        tokens = tuple(str(t.token) for t in content)
    usage = getattr(response, "usage", None)
    return {"text": message.content or "", "tool_calls": calls, "logprobs": logprobs, "logprob_tokens": tokens,
            "finish_reason": choice.finish_reason,
            "usage": (usage.prompt_tokens or 0, usage.completion_tokens or 0) if usage else None}


def _read_stream(stream: Any, callback: Callable[[str], None], base_url: str) -> dict[str, Any]:
    """Assemble streamed chunks (text, tool-call deltas by index, logprobs, usage)."""
    text: list[str] = []
    calls: dict[int, list[str]] = {}
    logprobs: list[float] = []
    tokens: list[str] = []
    finish = usage = None
    seen = False
    for chunk in stream:
        if not hasattr(chunk, "choices"):
            raise _not_a_completion(base_url, chunk)
        seen = True
        if getattr(chunk, "usage", None) is not None:
            usage = (chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
        for choice in chunk.choices or []:
            delta = choice.delta
            if delta is not None and delta.content:
                text.append(delta.content)
                try:
                    callback(delta.content)
                except Exception:  # a display problem must not end the turn
                    log.exception("streaming callback failed")
            for tc in (delta.tool_calls or []) if delta is not None else []:
                slot = calls.setdefault(tc.index or 0, ["", "", ""])
                slot[0] = tc.id or slot[0]
                if tc.function is not None:
                    slot[1] += tc.function.name or ""
                    slot[2] += tc.function.arguments or ""
            if choice.logprobs is not None and choice.logprobs.content:
                logprobs += [float(t.logprob) for t in choice.logprobs.content]
                tokens += [str(t.token) for t in choice.logprobs.content]
            finish = choice.finish_reason or finish
    if not seen:
        raise PolicyError(f"{base_url}: the stream ended without a completion")
    return {"text": "".join(text), "tool_calls": [tuple(calls[i]) for i in sorted(calls) if calls[i][1]],
            "logprobs": tuple(logprobs) or None, "logprob_tokens": tuple(tokens) or None,
            "finish_reason": finish, "usage": usage}


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
