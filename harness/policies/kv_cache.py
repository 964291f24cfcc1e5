"""Reusing the key/value cache of the previous turn (prefix caching for one conversation).

After a turn, the cache holds the keys and values of the prompt and of every completion token
but the last. The next prompt usually starts with exactly those tokens (same history, plus the
tool observations), so only the new suffix has to run through the model. When the history was
rewritten (a self-summary, a prune, another conversation), the new prompt shares a shorter prefix:
the cache is cropped to the longest common prefix and the rest re-encoded; with no common prefix
it is rebuilt. Causal attention makes the cropped cache exactly what a fresh encode of that prefix
gives, so outputs equal a full re-encode up to floating-point reordering.

The cache is dropped whenever the model's weights may have changed: another model object, or a
changed in-place version counter of any parameter (an optimizer step, a loaded adapter).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def weights_key(model: Any) -> tuple[int, int]:
    """Identity of the model's current weights: (object id, sum of parameter version counters)."""
    return id(model), sum(p._version for p in model.parameters())


@dataclass
class PrefixCache:
    """The cache of one conversation.

    Attributes:
        past: the transformers cache object (e.g. `DynamicCache`) or None.
        ids: the token ids whose keys/values `past` holds, in order.
        key: `weights_key` of the model that computed them.
    """

    past: Any = None
    ids: tuple[int, ...] = ()
    key: tuple[int, int] | None = None

    def reset(self) -> None:
        self.past, self.ids, self.key = None, (), None

    def take(self, prompt_ids: Sequence[int], key: tuple[int, int]) -> tuple[Any, int]:
        """(cache to continue from, number of prompt tokens it already covers).

        Always leaves at least the last prompt token to encode (its logits are needed). Returns
        (None, 0) when nothing can be reused; the stored cache is then dropped.
        """
        if self.past is None or key != self.key:
            self.reset()
            return None, 0
        n = min(common_prefix_length(self.ids, prompt_ids), len(prompt_ids) - 1)
        cropping = n < len(self.ids)
        if n <= 0 or (cropping and not getattr(self.past, "is_croppable", True)):
            self.reset()
            return None, 0
        if cropping:
            self.past.crop(n - len(self.ids))  # a negative count removes that many trailing tokens
        past = self.past
        self.reset()  # the caller owns it until `store`
        return past, n

    def store(self, past: Any, ids: Sequence[int], key: tuple[int, int]) -> None:
        self.past, self.ids, self.key = past, tuple(ids), key
