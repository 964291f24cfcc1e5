"""Policies shared across the sessions of one server.

Loading a local model takes seconds (the embedded one ~15-20 s), so a loaded policy is kept for the
next session with the same spec, endpoint and adapter. When a newer adapter is chosen, the copy with
the old adapter is dropped (one model in memory per spec). Sessions may overlap, so a shared local
model serializes its calls (a remote `openai:` endpoint takes them concurrently). Scripted policies
are stateful (they play turns in order) and never shared.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Sequence

from harness.types import Completion, Message, Policy, TurnKind


class SerializedPolicy:
    """A policy whose `generate`/`count_tokens` run one at a time (shared by concurrent sessions).

    Other attributes are read from the wrapped policy."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.spec = inner.spec
        self.context_window = inner.context_window
        self._lock = threading.Lock()

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        with self._lock:
            return self.inner.count_tokens(messages, tools)

    def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        *,
        max_new_tokens: int,
        kind: TurnKind = "action",
    ) -> Completion:
        with self._lock:
            return self.inner.generate(messages, tools, max_new_tokens=max_new_tokens, kind=kind)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class PolicyCache:
    """Loads policies by spec (`harness.policies.load_policy`), keeping one per (spec, endpoint)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: dict[tuple[str, str | None, str, str | None], Policy] = {}

    def get(self, spec: str, *, endpoint: str | None, api_key: str | None, adapter: Path | None,
            **options: Any) -> Policy:
        """The policy for `spec` with `adapter` (a LoRA folder) loaded, from the cache when possible.

        `options` are further `load_policy` keywords (window, tokenizer, timeouts); a change of
        them loads the policy again.
        Raises: ConfigError for a bad spec, PolicyError when the backend cannot be loaded.
        """
        from harness.policies import load_policy

        if spec.startswith("scripted:"):
            return load_policy(spec)
        key = (spec, endpoint, json.dumps(options, sort_keys=True, default=str), str(adapter) if adapter else None)
        with self._lock:
            if key not in self._loaded:
                for old in [k for k in self._loaded if k[:2] == key[:2]]:
                    del self._loaded[old]
                policy = load_policy(spec, endpoint=endpoint, api_key=api_key, adapter=str(adapter) if adapter else None,
                                     **options)
                self._loaded[key] = policy if spec.startswith("openai:") else SerializedPolicy(policy)
            return self._loaded[key]
