"""`BatchingPolicy`: several agent threads share one batched policy (a group's rollouts in one batch).

Each episode of a group runs its own `harness.agent.Agent` in its own thread, on a `Lane` of one
`BatchingPolicy`. A lane's `generate` does not sample alone: it queues its request and waits until
every still-open lane of the group has asked (or `wait_s` has passed, when set); then one thread
runs a single `generate_batch` (e.g. `TransformersPolicy.generate_batch`) for all queued requests
and hands each lane its own `Completion`. Each lane samples with its own seeded generator, so a
rollout's random stream does not depend on the others.

With `wait_s=None` (the default) a batch always holds every open lane, so batches form in
lock-step rounds that depend only on the episodes' own outputs: a group replays exactly with the
same seeds (needed for resume equivalence in RL). A lane must be closed when its episode ends
(`with batcher.lane(seed) as policy:`), or the others would wait for it forever.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Sequence

from harness.errors import ConfigError
from harness.types import Completion, Message, TurnKind


@dataclass
class _Pending:
    request: Any
    result: Any = None
    taken: bool = False


class BatchingPolicy:
    """The shared front of a batched policy.

    Args:
        policy: a policy with `generate_batch(requests) -> list[Completion | Exception]` and
            `count_tokens` (e.g. `TransformersPolicy`).
        wait_s: longest wait (seconds) for the other open lanes before a partial batch runs; None
            waits for all of them (deterministic batches).
    Attributes:
        batches: number of `generate_batch` calls so far; requests: number of turns served.
    """

    def __init__(self, policy: Any, *, wait_s: float | None = None) -> None:
        if not hasattr(policy, "generate_batch"):
            raise ConfigError(f"{getattr(policy, 'spec', policy)!r} cannot generate in batches")
        if wait_s is not None and wait_s < 0:
            raise ConfigError(f"wait_s must be >= 0 or None, got {wait_s}")
        self.policy = policy
        self.wait_s = wait_s
        self.batches = 0
        self.requests = 0
        self._cond = threading.Condition()
        self._model_lock = threading.Lock()  # the policy (model, tokenizer) serves one thread at a time
        self._pending: list[_Pending] = []
        self._open = 0
        self._running = False

    def lane(self, seed: int) -> "Lane":
        """A per-episode policy sampling with its own generator seeded with `seed`; counts as open
        (awaited by batches) until closed."""
        import torch

        with self._cond:
            self._open += 1
        return Lane(self, torch.Generator(device="cpu").manual_seed(seed))

    def _close(self) -> None:
        with self._cond:
            self._open -= 1
            self._cond.notify_all()

    def _count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        with self._model_lock:
            return self.policy.count_tokens(messages, tools)

    def _generate(self, request: Any) -> Completion:
        item = _Pending(request)
        with self._cond:
            self._pending.append(item)
            self._cond.notify_all()
            deadline = None if self.wait_s is None else time.monotonic() + self.wait_s
            while True:
                if item.result is not None:
                    break
                expired = deadline is not None and time.monotonic() >= deadline
                if not item.taken and not self._running and (len(self._pending) >= self._open or expired):
                    batch, self._pending = self._pending, []
                    for queued in batch:
                        queued.taken = True
                    self._running = True
                    self._cond.release()
                    try:
                        self._run(batch)
                    finally:
                        self._cond.acquire()
                        self._running = False
                        self._cond.notify_all()
                    continue
                timeout = None if deadline is None or expired else deadline - time.monotonic()
                self._cond.wait(timeout)
        if isinstance(item.result, BaseException):
            raise item.result
        return item.result

    def _run(self, batch: list[_Pending]) -> None:
        """One `generate_batch` for the queued requests; every request gets a result or an error."""
        try:
            with self._model_lock:
                results = list(self.policy.generate_batch([queued.request for queued in batch]))
        except BaseException as exc:  # noqa: BLE001 - handed to each waiting lane, raised in its thread
            results = [exc] * len(batch)
        self.batches += 1
        self.requests += len(batch)
        for queued, result in zip(batch, results):
            queued.result = result


class Lane:
    """One episode's view of a `BatchingPolicy`: a `harness.types.Policy` whose turns are sampled in
    the group's batches. Close it (or use it as a context manager) when the episode ends."""

    def __init__(self, batcher: BatchingPolicy, generator: Any) -> None:
        self._batcher = batcher
        self.generator = generator
        self.spec: str = batcher.policy.spec
        self.context_window: int = batcher.policy.context_window
        self._closed = False

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        return self._batcher._count_tokens(messages, tools)

    def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        *,
        max_new_tokens: int,
        kind: TurnKind = "action",
    ) -> Completion:
        """Sample the next turn in the group's next batch (see `harness.types.Policy.generate`).
        Raises: PolicyError as the batched policy does; RuntimeError on a closed lane."""
        from harness.policies.transformers_policy import GenerationRequest

        if self._closed:
            raise RuntimeError("generate on a closed lane")
        request = GenerationRequest(messages=list(messages), tools=list(tools) if tools else None,
                                    max_new_tokens=max_new_tokens, kind=kind, generator=self.generator)
        return self._batcher._generate(request)

    def close(self) -> None:
        """Leave the group: later batches no longer wait for this lane (idempotent)."""
        if not self._closed:
            self._closed = True
            self._batcher._close()

    def __enter__(self) -> "Lane":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
