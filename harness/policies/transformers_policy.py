"""`TransformersPolicy`: any causal LM through transformers, sampled by our own loop.

The loop (rather than `model.generate`) records exactly what RL needs: the prompt ids, the sampled
completion ids and the natural-log probability of each sampled token under the distribution it
was drawn from (temperature, top-p and, for constrained turns, the grammar mask applied, then
renormalized). It also reuses the previous turn's key/value cache (`harness.policies.kv_cache`)
and can force action turns into one valid tool call (`harness.policies.grammar`).

Greedy decoding (`temperature=0`) records the log-probabilities of the untempered (T=1) masked
distribution, since the sampling distribution is then a point mass.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import dataclass
from typing import Any, Sequence

from harness.errors import ConfigError, PolicyError
from harness.policies.chat_format import ChatFormat
from harness.policies.kv_cache import PrefixCache, weights_key
from harness.toolcall import parse_text_calls
from harness.types import Completion, Message, TurnKind

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransformersPolicyConfig:
    """Sampling options of a `TransformersPolicy`.

    Attributes:
        temperature: softmax temperature; 0 means greedy.
        top_p: nucleus sampling mass in (0, 1]; 1 disables it.
        seed: seed of the policy's own `torch.Generator` (the global RNG is not used).
        constrain: force each action turn into one valid call of an offered tool (xgrammar).
        reuse_kv_cache: keep the previous turn's key/value cache and encode only new tokens.
        max_context_tokens: cap on the context window (None: the model's `max_position_embeddings`).
        device: torch device for the model (None: cuda when available, else cpu).
    """

    temperature: float = 0.7
    top_p: float = 1.0
    seed: int = 0
    constrain: bool = False
    reuse_kv_cache: bool = True
    max_context_tokens: int | None = None
    device: str | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_context_tokens is not None and self.max_context_tokens < 16:
            raise ConfigError(f"max_context_tokens must be at least 16, got {self.max_context_tokens}")


@dataclass(frozen=True)
class GenerationRequest:
    """One turn to sample in `TransformersPolicy.generate_batch` (the arguments of `generate`).

    Attributes:
        messages, tools, max_new_tokens, kind: as in `harness.types.Policy.generate`.
        generator: the CPU `torch.Generator` this sequence samples with (None: the policy's own),
            so that each rollout of a group keeps its own seeded random stream.
    """

    messages: Sequence[Message]
    tools: Sequence[dict[str, Any]] | None
    max_new_tokens: int
    kind: TurnKind = "action"
    generator: Any = None


def sample_token(
    logits: Any, *, temperature: float, top_p: float, allowed: Any | None, generator: Any
) -> tuple[int, float]:
    """Draw one token.

    Args:
        logits: float tensor (V,) of next-token logits.
        temperature, top_p: as in `TransformersPolicyConfig`.
        allowed: bool tensor (V,) of grammar-allowed tokens, or None.
        generator: a CPU `torch.Generator`.
    Returns:
        (token id, natural-log probability of it under the masked, tempered, top-p renormalized
        distribution; for greedy, under the masked T=1 distribution).
    """
    import torch

    logits = logits.float().cpu()
    if allowed is not None:
        logits = logits.masked_fill(~allowed.cpu(), float("-inf"))
    if temperature == 0:
        token = int(torch.argmax(logits))
        return token, float(torch.log_softmax(logits, dim=-1)[token])
    logits = logits / temperature
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        drop = cumulative - torch.softmax(sorted_logits, dim=-1) >= top_p  # keeps at least the top token
        logits = logits.index_put((order[drop],), torch.tensor(float("-inf")))
    logp = torch.log_softmax(logits, dim=-1)
    token = int(torch.multinomial(logp.exp(), 1, generator=generator))
    return token, float(logp[token])


class TransformersPolicy:
    """A local causal LM as a `harness.types.Policy`.

    Args:
        model: a transformers causal LM (or a peft model around one).
        tokenizer: its tokenizer, with a chat template.
        spec: the model spec it was loaded from (recorded in sessions).
        config: sampling options.
    Attributes:
        model: the model; assigning a new one drops the KV cache.
        tokenizer: the tokenizer.
        context_window: max prompt + completion tokens.
        chat: the `ChatFormat` used to render prompts.
        stop_ids: token ids that end a turn (EOS and `<|im_end|>` when the vocabulary has it).

    Not thread-safe: one `generate` at a time (the KV cache and the generator are per policy);
    threads share it through `harness.policies.batching.BatchingPolicy` (`generate_batch`).
    """

    def __init__(self, *, model: Any, tokenizer: Any, spec: str, config: TransformersPolicyConfig) -> None:
        import torch

        self.spec = spec
        self.config = config
        self.tokenizer = tokenizer
        self.chat = ChatFormat(tokenizer)
        self.device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self._model = model.to(self.device)
        window = int(getattr(model.config, "max_position_embeddings", 0) or 2048)
        self.context_window = min(window, config.max_context_tokens or window)
        self.stop_ids = sorted(
            {tokenizer.eos_token_id}
            | {i for i in [tokenizer.convert_tokens_to_ids("<|im_end|>")] if isinstance(i, int) and i != tokenizer.unk_token_id}
        )
        self.generator = torch.Generator(device="cpu").manual_seed(config.seed)
        self._grammar: Any = None
        self._cache = PrefixCache()
        self._base_model: Any = None
        self._turns = 0  # numbers call ids: unique over the policy's life, even after a summary

    # --- model and adapters -------------------------------------------------------------------
    @property
    def model(self) -> Any:
        return self._model

    @model.setter
    def model(self, value: Any) -> None:
        self._model = value
        self._cache.reset()

    def reseed(self, seed: int) -> None:
        """Restart the sampling generator (e.g. one seed per rollout of a group)."""
        self.generator.manual_seed(seed)

    def reset_cache(self) -> None:
        """Drop the KV cache (the next turn re-encodes its whole prompt)."""
        self._cache.reset()

    def load_adapter(self, path: str, *, trainable: bool = False) -> None:
        """Put a peft LoRA adapter from folder `path` on the base model (replacing any loaded one).

        Raises: ConfigError when `path` is not a peft adapter folder.
        """
        from pathlib import Path

        from peft import PeftModel

        if not (Path(path) / "adapter_config.json").is_file():
            raise ConfigError(f"not a LoRA adapter folder (no adapter_config.json): {path}")
        self.unload_adapter()
        self._base_model = self._model
        # peft injects LoRA layers in place: keep the base model itself untouched for unload
        self.model = PeftModel.from_pretrained(copy.deepcopy(self._base_model), path, is_trainable=trainable)

    def unload_adapter(self) -> None:
        """Back to the base model (no-op when no adapter was loaded with `load_adapter`)."""
        if self._base_model is not None:
            self.model, self._base_model = self._base_model, None

    def constrained_masks(self, tools: Sequence[dict[str, Any]], completion_ids: Sequence[int]) -> Any:
        """Bool tensor (C, V): the grammar masks a constrained turn was sampled under, for re-scoring
        it in training (`harness.policies.grammar.replay_masks` with this policy's grammar)."""
        from harness.policies.grammar import replay_masks

        return replay_masks(self.tokenizer, tools, completion_ids, grammar=self._grammar_for())

    # --- Policy protocol -----------------------------------------------------------------------
    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        """Exact prompt length: chat template, tool block and generation prompt included."""
        return len(self.chat.encode(messages, tools))

    def generate(
        self,
        messages: Sequence[Message],
        tools: Sequence[dict[str, Any]] | None,
        *,
        max_new_tokens: int,
        kind: TurnKind = "action",
    ) -> Completion:
        """Sample the next turn (see `harness.types.Policy.generate`).

        Summary turns are rendered without tools and never constrained. Constrained action turns
        give exactly one call of an offered tool unless cut by `max_new_tokens`.
        Raises: PolicyError when the prompt leaves no room in the context window.
        """
        import torch

        start_time = time.monotonic()
        prompt_ids, budget, masker = self._prepare(messages, tools, max_new_tokens=max_new_tokens, kind=kind)
        was_training = self._model.training
        self._model.eval()
        try:
            with torch.no_grad():
                completion, logprobs, encoded, finish = self._sample(prompt_ids, budget, masker)
        except (RuntimeError, ValueError) as exc:
            self._cache.reset()
            raise PolicyError(f"{self.spec}: generation failed: {exc}") from exc
        finally:
            self._model.train(was_training)
        return self._completion(prompt_ids, completion, logprobs, finish, masker=masker, kind=kind,
                                max_new_tokens=max_new_tokens, encoded=encoded, start_time=start_time)

    def generate_batch(self, requests: Sequence[GenerationRequest]) -> list[Completion | Exception]:
        """Sample several independent turns at once: one forward pass per step for all live sequences.

        Prompts are left-padded into one batch; each sequence has its own grammar matcher (for
        constrained action turns), its own stop and budget, and samples with its request's
        `generator` (the policy's own when None). Each result means exactly what `generate`'s
        does: exact prompt ids, sampled ids, and each token's logprob under the distribution it
        was drawn from (`sample_token` per row). Outputs equal one-by-one `generate` up to
        floating-point differences of padded batched matmuls. Finished sequences leave the batch
        (their rows are dropped from the key/value cache).

        No key/value cache is reused across turns in batch mode: every prompt is encoded in full
        (`encoded_tokens == prompt_tokens`), and the policy's single-conversation cache is left alone.

        Args:
            requests: the turns to sample, shape (B,).
        Returns:
            B results in request order: a `Completion`, or the error `generate` would raise for a
            request that could not run (`PolicyError`: prompt leaves no room in the window;
            `ValueError`: max_new_tokens < 1); a failure of the batched pass itself gives every
            request a `PolicyError`.
        """
        import torch

        start_time = time.monotonic()
        results: list[Completion | Exception | None] = [None] * len(requests)
        rows: list[tuple[int, list[int], int, Any]] = []  # (request index, prompt ids, budget, masker)
        for i, r in enumerate(requests):
            try:
                prompt_ids, budget, masker = self._prepare(r.messages, r.tools, max_new_tokens=r.max_new_tokens, kind=r.kind)
            except (PolicyError, ValueError) as exc:
                results[i] = exc
                continue
            rows.append((i, prompt_ids, budget, masker))
        if rows:
            generators = [self.generator if requests[i].generator is None else requests[i].generator for i, *_ in rows]
            was_training = self._model.training
            self._model.eval()
            try:
                with torch.no_grad():
                    sampled = self._sample_batch([p for _, p, _, _ in rows], [b for *_, b, _ in rows],
                                                 [m for *_, m in rows], generators)
            except (RuntimeError, ValueError) as exc:
                error = PolicyError(f"{self.spec}: batched generation failed: {exc}")
                return [error if r is None else r for r in results]
            finally:
                self._model.train(was_training)
            for (i, prompt_ids, _, masker), (completion, logprobs, finish) in zip(rows, sampled):
                r = requests[i]
                results[i] = self._completion(prompt_ids, completion, logprobs, finish, masker=masker, kind=r.kind,
                                              max_new_tokens=r.max_new_tokens, encoded=len(prompt_ids), start_time=start_time)
        return [r for r in results if r is not None]

    # --- internals -------------------------------------------------------------------------------
    def _prepare(
        self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None, *, max_new_tokens: int, kind: TurnKind
    ) -> tuple[list[int], int, Any]:
        """(prompt ids, token budget, grammar masker or None) of one turn.

        Raises: ValueError for max_new_tokens < 1; PolicyError when the prompt fills the window.
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        offered = list(tools) if tools and kind == "action" else None
        prompt_ids = self.chat.encode(messages, offered)
        room = self.context_window - len(prompt_ids)
        if room < 1:
            raise PolicyError(f"prompt of {len(prompt_ids)} tokens leaves no room in the {self.context_window}-token window")
        masker = self._grammar_for().masker(offered) if offered and self.config.constrain else None
        return prompt_ids, min(max_new_tokens, room), masker

    def _completion(
        self, prompt_ids: list[int], completion: list[int], logprobs: list[float], finish: str, *, masker: Any,
        kind: TurnKind, max_new_tokens: int, encoded: int, start_time: float,
    ) -> Completion:
        """Decode and parse a sampled turn into a `Completion`."""
        body = completion[:-1] if completion and completion[-1] in self.stop_ids else completion
        text = self.tokenizer.decode(body, skip_special_tokens=True)
        calls, errors, call_format = (), (), None
        if kind == "action":
            turn, self._turns = self._turns, self._turns + 1
            parsed = parse_text_calls(text, turn=turn)
            calls, errors, call_format = tuple(parsed.calls), tuple(parsed.errors), parsed.format
            if masker is not None and finish == "length" and not calls:
                errors = (f"the tool call was cut at max_new_tokens={max_new_tokens} before it was complete",)
        return Completion(
            text=text, tool_calls=calls, parse_errors=errors,
            prompt_ids=tuple(prompt_ids), completion_ids=tuple(completion), logprobs=tuple(logprobs),
            constrained=masker is not None, finish_reason=finish,
            prompt_tokens=len(prompt_ids), completion_tokens=len(completion), encoded_tokens=encoded,
            duration_s=time.monotonic() - start_time, tool_call_format=call_format,
        )

    def _draw(self, logits: Any, masker: Any, generator: Any) -> tuple[int, float]:
        """Sample one token of one sequence (grammar mask applied, matcher advanced)."""
        allowed = masker.allowed() if masker is not None else None
        token, logprob = sample_token(logits, temperature=self.config.temperature, top_p=self.config.top_p,
                                      allowed=allowed, generator=generator)
        if masker is not None:
            masker.accept(token)
        return token, logprob

    def _grammar_for(self) -> Any:
        if self._grammar is None:
            from harness.policies.grammar import ToolCallGrammar

            vocab = int(getattr(self._model.config, "vocab_size", 0) or len(self.tokenizer))
            self._grammar = ToolCallGrammar(self.tokenizer, vocab_size=vocab, stop_ids=self.stop_ids)
        return self._grammar

    def _sample(self, prompt_ids: list[int], budget: int, masker: Any) -> tuple[list[int], list[float], int, str]:
        """The decode loop: (completion ids, logprobs, prompt tokens encoded, finish reason)."""
        import torch
        from transformers import DynamicCache

        key = weights_key(self._model)
        past, start = self._cache.take(prompt_ids, key) if self.config.reuse_kv_cache else (None, 0)
        if past is None:
            past = DynamicCache(config=self._model.config)
        feed = prompt_ids[start:]
        encoded = len(feed)
        completion: list[int] = []
        logprobs: list[float] = []
        finish = "length"
        while len(completion) < budget:
            inputs = torch.tensor([feed], device=self.device)
            out = self._model(input_ids=inputs, cache=past, use_cache=True, logits_to_keep=1)
            past = out.cache
            token, logprob = self._draw(out.logits[0, -1], masker, self.generator)
            completion.append(token)
            logprobs.append(logprob)
            if token in self.stop_ids:
                finish = "stop"
                break
            feed = [token]
        if self.config.reuse_kv_cache:
            # the last sampled token was never fed, so the cache covers all but it
            self._cache.store(past, prompt_ids + completion[:-1], key)
        return completion, logprobs, encoded, finish

    def _sample_batch(
        self, prompts: list[list[int]], budgets: list[int], maskers: list[Any], generators: list[Any]
    ) -> list[tuple[list[int], list[float], str]]:
        """The batched decode loop: per sequence (completion ids, logprobs, finish reason).

        Left padding with an attention mask and explicit position ids (each sequence's positions
        start at 0 at its first real token), so every row computes what it would alone.
        """
        import torch
        from transformers import DynamicCache

        pad = self.stop_ids[0]
        width = max(len(p) for p in prompts)
        feed = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        past = DynamicCache(config=self._model.config)
        completions: list[list[int]] = [[] for _ in prompts]
        logprobs: list[list[float]] = [[] for _ in prompts]
        finish = ["length"] * len(prompts)
        live = list(range(len(prompts)))  # row -> sequence index
        while live:
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -feed.shape[1]:]
            out = self._model(input_ids=feed, attention_mask=mask, position_ids=positions, cache=past,
                              use_cache=True, logits_to_keep=1)
            past = out.cache
            keep: list[int] = []
            for row, seq in enumerate(live):
                token, logprob = self._draw(out.logits[row, -1], maskers[seq], generators[seq])
                completions[seq].append(token)
                logprobs[seq].append(logprob)
                if token in self.stop_ids:
                    finish[seq] = "stop"
                elif len(completions[seq]) < budgets[seq]:
                    keep.append(row)
            if len(keep) < len(live):
                if not keep:
                    break
                index = torch.tensor(keep, device=self.device)
                past.batch_select_indices(index)
                mask = mask[index]
            live = [live[row] for row in keep]
            feed = torch.tensor([[completions[seq][-1]] for seq in live], device=self.device)
            mask = torch.cat([mask, mask.new_ones(len(live), 1)], dim=1)
        return [(c, lp, f) for c, lp, f in zip(completions, logprobs, finish)]
