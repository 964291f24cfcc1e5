"""`ScriptedPolicy`: plays back a fixed list of assistant turns (tests, replay, benchmarks).

Its tokenizer is a deterministic toy: the prompt is rendered as ChatML (tool specs as JSON lines
in the system block, assistant tool calls as `<tool_call>` markup unless the content already
carries it, as a local model's completion text does) and split by a regex into
ChatML markers, words and single punctuation characters. `count_tokens` is exact for it, so
context tests can be precise, and token ids are stable (CRC32 of the token), so RL code can be
tested on scripted trajectories.
"""

from __future__ import annotations

import json
import os
import re
import time
import zlib
from dataclasses import dataclass
from typing import Any, Sequence

from harness.errors import PolicyError
from harness.toolcall import OPEN, parse_tool_calls, render_tool_call
from harness.types import Completion, Message, ToolCall, TurnKind

_TOKEN = re.compile(r"<\|im_start\|>|<\|im_end\|>|\w+|[^\w\s]")
VOCAB_SIZE = 50_000
DEFAULT_WINDOW = 4096

Turn = str | dict[str, Any]


def tokenize(text: str) -> list[str]:
    """The toy tokenizer: ChatML markers, runs of word characters, single other characters."""
    return _TOKEN.findall(text)


def token_ids(text: str) -> list[int]:
    return [zlib.crc32(tok.encode("utf-8")) % VOCAB_SIZE for tok in tokenize(text)]


def _render_calls(message: Message) -> str:
    calls = message.get("tool_calls") or ()
    return "\n".join(render_tool_call(c["function"]["name"], c["function"]["arguments"]) for c in calls)


def render_chatml(messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> str:
    """ChatML text of a prompt, generation prompt included (what the toy tokenizer counts)."""
    parts: list[str] = []
    for i, message in enumerate(messages):
        content = message.get("content") or ""
        if message["role"] == "assistant" and OPEN not in content:
            content = "\n".join(x for x in (content, _render_calls(message)) if x)
        if i == 0 and message["role"] == "system" and tools:
            content += "\n# Tools\n" + "\n".join(json.dumps(t, sort_keys=True) for t in tools)
        parts.append(f"<|im_start|>{message['role']}\n{content}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


def _turn_text(turn: Turn, index: int) -> str:
    if isinstance(turn, str):
        return turn
    if not isinstance(turn, dict) or not isinstance(turn.get("content", ""), str):
        raise PolicyError(f"scripted turn {index} must be a string or {{'content', 'tool_calls'}}, got {turn!r}")
    calls = [render_tool_call(c["name"], c.get("arguments", {})) for c in turn.get("tool_calls", [])]
    return "\n".join(x for x in (turn.get("content", ""), *calls) if x)


@dataclass(frozen=True)
class ScriptedCall:
    """One `generate` call as the policy received it (for assertions in tests)."""

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    kind: TurnKind
    max_new_tokens: int
    prompt_tokens: int


class ScriptedPolicy:
    """Plays back `turns` in order, whatever the turn kind (action or summary).

    Args:
        turns: each a string in the `<tool_call>` text format of `harness.toolcall`, or a dict
            `{"content": str, "tool_calls": [{"name": str, "arguments": dict | str}]}` (string
            arguments are kept as written, so malformed JSON can be scripted).
        context_window: the window it claims (tokens of the toy tokenizer).
        writes_summaries: True: summary turns are played from `turns` like action turns. False:
            `turns` holds action turns only; a summary turn answers an empty text without using a
            turn (the agent then rejects it and writes its own masked summary), so a long output
            never eats the next scripted action.
        spec: the model spec recorded in sessions.
    A turn longer than `max_new_tokens` is cut there (finish_reason "length"), as a model would be.
    Raises (from `generate`): PolicyError when the script is exhausted or the prompt overflows the window.
    """

    def __init__(self, turns: Sequence[Turn], *, context_window: int = DEFAULT_WINDOW, writes_summaries: bool = True,
                 spec: str = "scripted") -> None:
        self.turns = list(turns)
        self.context_window = context_window
        self.writes_summaries = writes_summaries
        self.spec = spec
        self.calls: list[ScriptedCall] = []
        self._played = 0

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, context_window: int | None = None) -> "ScriptedPolicy":
        """Read a script: a JSON list of turns, or an object

            {"turns": [...], "context_window": 32768, "summaries": false}

        where `context_window` (default 4096) and `summaries` (default true; see
        `writes_summaries`) say how the turns were recorded, so replays and benchmarks play the
        turns they hold. A `context_window` given here overrides the file's.
        Raises PolicyError when the file is neither form, or a field has the wrong type.
        """
        from harness.jsonl import read_regular_file

        try:
            data = json.loads(read_regular_file(path).decode("utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            raise PolicyError(f"cannot read scripted turns from {path}: {exc}") from None
        options: dict[str, Any] = {}
        if isinstance(data, dict):
            unknown = sorted(set(data) - {"turns", "context_window", "summaries"})
            window, summaries = data.get("context_window", DEFAULT_WINDOW), data.get("summaries", True)
            if unknown or not isinstance(data.get("turns"), list):
                raise PolicyError(f'{path}: a script object holds "turns" (a list), "context_window" and "summaries"'
                                  + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
            if isinstance(window, bool) or not isinstance(window, int) or window < 1:
                raise PolicyError(f"{path}: context_window must be a positive integer, got {window!r}")
            if not isinstance(summaries, bool):
                raise PolicyError(f"{path}: summaries must be true or false, got {summaries!r}")
            data, options = data["turns"], {"context_window": window, "writes_summaries": summaries}
        if not isinstance(data, list):
            raise PolicyError(f"{path}: expected a JSON list of turns or a script object, got {type(data).__name__}")
        if context_window is not None:
            options["context_window"] = context_window
        return cls(data, spec=f"scripted:{path}", **options)

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        return len(tokenize(render_chatml(messages, tools)))

    def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        *,
        max_new_tokens: int,
        kind: TurnKind = "action",
    ) -> Completion:
        started = time.perf_counter()
        prompt = render_chatml(messages, tools)
        prompt_ids = token_ids(prompt)
        if len(prompt_ids) >= self.context_window:
            raise PolicyError(f"prompt of {len(prompt_ids)} tokens does not fit the window of {self.context_window}")
        self.calls.append(ScriptedCall(tuple(messages), tuple(tools or ()), kind, max_new_tokens, len(prompt_ids)))
        index = len(self.calls) - 1
        if kind == "summary" and not self.writes_summaries:
            text = ""
        elif self._played >= len(self.turns):
            raise PolicyError(f"script exhausted after {len(self.turns)} turns")
        else:
            text = _turn_text(self.turns[self._played], self._played)
            self._played += 1
        finish_reason = "stop"
        spans = list(_TOKEN.finditer(text))
        if len(spans) > max_new_tokens:
            text = text[: spans[max_new_tokens - 1].end()]
            finish_reason = "length"
        calls: list[ToolCall] = []
        errors: list[str] = []
        if kind == "action":
            _, calls, errors = parse_tool_calls(text, turn=index)
        completion_ids = token_ids(text)
        return Completion(
            text=text,
            tool_calls=tuple(calls),
            parse_errors=tuple(errors),
            prompt_ids=tuple(prompt_ids),
            completion_ids=tuple(completion_ids),
            finish_reason=finish_reason,
            prompt_tokens=len(prompt_ids),
            completion_tokens=len(completion_ids),
            encoded_tokens=len(prompt_ids),
            duration_s=time.perf_counter() - started,
        )
