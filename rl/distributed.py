"""Where rollouts run: in the learner's process, on Ray actors, or through an OpenAI-compatible server.

All three play groups with `rl.rollout.rollout_group` (the editor's agent on shadow workspaces)
and the same per-rollout sampling seeds, so the learner sees the same data whichever runs them.

    InProcessRunner   the learner's own policy samples (default)
    RayRunner         `--ray ADDRESS|auto|local`: `ray_workers` actors, each with its own copy of the
                      policy and its own shadow workspaces; after each step the learner broadcasts the
                      LoRA weights (a few MB) through the object store; groups run in parallel
    EndpointRunner    `--rollout-endpoint URL`: sampling through an OpenAI-compatible server (vLLM);
                      after each step the adapter is saved and pushed with vLLM's dynamic LoRA
                      loading (`POST /v1/load_lora_adapter`), and later rollouts ask for it by name.
                      The server names each sampled token by id (`return_tokens_as_token_ids`);
                      prompts are rendered with the learner's tokenizer; a turn without ids is kept
                      out of training (`rollout/turns_untrainable`), never re-tokenized to guess them

A runner has `run(starts, seeds, log_dir=, adapter_id=) -> list[list[Rollout]]` (one list per
group), `sync(policy, step=, out_dir=)` after each optimizer step, and `close()`.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from pathlib import Path
from typing import Any, Sequence

from harness.errors import ConfigError, PolicyError
from harness.session import SessionStart
from harness.types import Completion, Message, TurnKind
from rl.rollout import Rollout, rollout_group

log = logging.getLogger(__name__)


def _group(policy: Any, cfg: Any, start: SessionStart, seeds: Sequence[int], log_dir: Any, adapter_id: str | None) -> list[Rollout]:
    return rollout_group(
        policy, start, group_size=cfg.group_size, seeds=seeds, agent_config=cfg.agent_config(),
        reward_config=cfg.rewards, verify_timeout_s=cfg.verify_timeout_s, log_dir=log_dir, adapter_id=adapter_id,
        backend=cfg.backend, setup=cfg.setup,
    )


class InProcessRunner:
    """Rollouts with the learner's own policy, one group after the other."""

    def __init__(self, cfg: Any, policy: Any) -> None:
        self.cfg, self.policy = cfg, policy

    def run(self, starts: Sequence[SessionStart], seeds: Sequence[Sequence[int]], *, log_dir: Any = None,
            adapter_id: str | None = None) -> list[list[Rollout]]:
        return [_group(self.policy, self.cfg, s, sd, log_dir, adapter_id) for s, sd in zip(starts, seeds)]

    def sync(self, policy: Any, *, step: int, out_dir: Path) -> None:
        policy.reset_cache()  # the weights changed: cached keys/values are stale

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------------
# Ray
# ---------------------------------------------------------------------------------------------
class RolloutWorker:
    """A Ray actor (wrapped with `ray.remote` by `RayRunner`): its own policy with the same LoRA
    structure as the learner's, its own shadow workspaces."""

    def __init__(self, cfg: Any) -> None:
        import torch

        from rl.train import load_trainable_policy

        torch.set_num_threads(1)
        self.cfg = cfg
        self.policy = load_trainable_policy(cfg)

    def set_adapter(self, weights: dict[str, Any]) -> None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.policy.model, weights)
        self.policy.reset_cache()

    def run_group(self, start: SessionStart, seeds: list[int], log_dir: str | None, adapter_id: str | None) -> list[Rollout]:
        return _group(self.policy, self.cfg, start, seeds, log_dir, adapter_id)


def connect_ray(address: str, *, num_cpus: int | None = None) -> None:
    """Start or join Ray: "local" starts a private instance, "auto" joins the running cluster,
    anything else is a cluster address. A no-op when Ray is already initialised (tests)."""
    import ray

    if ray.is_initialized():
        return
    if address == "local":
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)


class RayRunner:
    """Groups spread over `cfg.ray_workers` Ray actors (one CPU each, or one GPU each when the
    cluster has GPUs); the learner stays on the driver."""

    def __init__(self, cfg: Any, policy: Any) -> None:
        import ray

        connect_ray(cfg.ray_address, num_cpus=max(cfg.ray_workers, 1))
        gpus = 1 if ray.cluster_resources().get("GPU", 0) >= cfg.ray_workers + 1 else 0
        actor = ray.remote(num_cpus=1, num_gpus=gpus)(RolloutWorker)
        self.cfg = cfg
        self.workers = [actor.remote(cfg) for _ in range(cfg.ray_workers)]
        self._push(policy)

    def _push(self, policy: Any) -> None:
        import ray
        from peft import get_peft_model_state_dict

        weights = {k: v.detach().cpu() for k, v in get_peft_model_state_dict(policy.model).items()}
        ref = ray.put(weights)
        ray.get([w.set_adapter.remote(ref) for w in self.workers])

    def run(self, starts: Sequence[SessionStart], seeds: Sequence[Sequence[int]], *, log_dir: Any = None,
            adapter_id: str | None = None) -> list[list[Rollout]]:
        import ray

        where = str(log_dir) if log_dir is not None else None
        futures = [
            self.workers[i % len(self.workers)].run_group.remote(start, list(sd), where, adapter_id)
            for i, (start, sd) in enumerate(zip(starts, seeds))
        ]
        return ray.get(futures)

    def sync(self, policy: Any, *, step: int, out_dir: Path) -> None:
        self._push(policy)

    def close(self) -> None:
        import ray

        for worker in self.workers:
            ray.kill(worker)
        self.workers = []


# ---------------------------------------------------------------------------------------------
# OpenAI-compatible endpoint (vLLM)
# ---------------------------------------------------------------------------------------------
def _http_json(url: str, payload: dict[str, Any] | None = None, *, timeout_s: float = 60.0) -> Any:
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                     method="POST" if payload is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read().decode() or "null"
    except OSError as exc:
        raise PolicyError(f"rollout endpoint {url}: {exc}") from exc
    try:
        return json.loads(body)
    except ValueError:
        return body


class TokenizedEndpointPolicy:
    """An `OpenAIPolicy` whose turns carry the token ids the server sampled.

    The server is asked to name each logprob's token by id (vLLM's `return_tokens_as_token_ids`);
    `completion_ids` are those ids, one per logprob, so ids and logprobs are aligned by
    construction. The text is never re-tokenized to guess them: "Hello" sampled as `H` + `ello`
    re-tokenizes as one token, and a count that happens to match would put logprobs on the wrong
    tokens. A turn whose ids the server did not give (another server, or ids missing) keeps
    `logprobs=None`: it is untrainable, counted in `rollout/turns_untrainable`, never mis-aligned.
    `prompt_ids` are the learner's chat-template rendering of the same messages.

    Temperature: the server samples at `temperature` with top_p 1, the learner divides its logits
    by the same `cfg.temperature` (`rl.train.turn_logprobs`). vLLM must report the logprobs of the
    distribution it sampled from (`--logprobs-mode processed_logprobs`) unless temperature is 1.
    """

    def __init__(self, *, base_url: str, model: str, chat: Any, stop_id: int, temperature: float, seed: int) -> None:
        self.base_url, self.model, self.chat, self.stop_id = base_url, model, chat, stop_id
        self.temperature = temperature
        self.reseed(seed)

    def reseed(self, seed: int) -> None:
        from harness.policies.openai_policy import OpenAIPolicy, OpenAIPolicyConfig

        self.inner = OpenAIPolicy(config=OpenAIPolicyConfig(
            model=self.model, base_url=self.base_url, temperature=self.temperature, top_p=1.0, seed=seed,
            logprobs=True, probe=False, extra_body={"return_tokens_as_token_ids": True}))
        self.spec = self.inner.spec
        self.context_window = self.inner.context_window

    def reset_cache(self) -> None:
        pass

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None) -> int:
        return len(self.chat.encode(messages, tools))

    def generate(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None, *,
                 max_new_tokens: int, kind: TurnKind = "action") -> Completion:
        import dataclasses

        out = self.inner.generate(messages, tools, max_new_tokens=max_new_tokens, kind=kind)
        prompt = self.chat.encode(messages, list(tools) if tools and kind == "action" else None)
        ids, logprobs = out.completion_ids, out.logprobs
        if ids is None or logprobs is None or len(ids) != len(logprobs) or not ids:
            if logprobs is not None:
                log.info("turn kept out of training: the server gave no token ids for its %d logprobs", len(logprobs))
            ids, logprobs = None, None
        return dataclasses.replace(out, prompt_ids=tuple(prompt), completion_ids=ids, logprobs=logprobs)


class EndpointRunner:
    """Rollouts sampled by an OpenAI-compatible server; new adapters pushed to it after each step.

    Args:
        cfg: the training config (`rollout_endpoint` is the server's base URL, with or without `/v1`).
        policy: the learner's policy (its tokenizer and chat template re-tokenize the turns).
    """

    def __init__(self, cfg: Any, policy: Any) -> None:
        self.cfg = cfg
        root = cfg.rollout_endpoint.rstrip("/")
        self.root = root[: -len("/v1")] if root.endswith("/v1") else root
        models = _http_json(f"{self.root}/v1/models")
        try:
            self.model = models["data"][0]["id"]
        except (TypeError, KeyError, IndexError):
            raise ConfigError(f"{self.root}/v1/models lists no model: {str(models)[:200]}") from None
        self.base_model = self.model
        self.policy = TokenizedEndpointPolicy(
            base_url=f"{self.root}/v1", model=self.model, chat=policy.chat, stop_id=policy.stop_ids[0],
            temperature=cfg.temperature, seed=cfg.seed,
        )
        self.pushed: list[str] = []

    def run(self, starts: Sequence[SessionStart], seeds: Sequence[Sequence[int]], *, log_dir: Any = None,
            adapter_id: str | None = None) -> list[list[Rollout]]:
        return [_group(self.policy, self.cfg, s, sd, log_dir, self.model) for s, sd in zip(starts, seeds)]

    def sync(self, policy: Any, *, step: int, out_dir: Path) -> None:
        """Save the new adapter under `OUT/adapters/step-N` and load it into the server by name."""
        path = (Path(out_dir) / "adapters" / f"step-{step:06d}").resolve()
        policy.model.save_pretrained(str(path))
        name = f"recap-step-{step}"
        _http_json(f"{self.root}/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})
        if self.model != self.base_model:
            try:
                _http_json(f"{self.root}/v1/unload_lora_adapter", {"lora_name": self.model})
            except PolicyError as exc:  # the old adapter staying loaded is harmless
                log.warning("could not unload %s: %s", self.model, exc)
        self.model = self.policy.model = name
        self.policy.reseed(self.cfg.seed)
        self.pushed.append(name)

    def close(self) -> None:
        pass


def make_rollout_runner(cfg: Any, policy: Any) -> Any:
    """The runner the config asks for (Ray, endpoint, or in-process)."""
    if cfg.ray_address is not None:
        return RayRunner(cfg, policy)
    if cfg.rollout_endpoint is not None:
        return EndpointRunner(cfg, policy)
    return InProcessRunner(cfg, policy)


# ---------------------------------------------------------------------------------------------
# data-parallel learner (several processes, e.g. one per GPU, started by `accelerate launch`)
# ---------------------------------------------------------------------------------------------
def process_group() -> tuple[int, int]:
    """(rank, world size) of the torch.distributed process group; (0, 1) when there is none.

    Under `accelerate launch --num_processes K -m recap.cli train ...` every process runs the
    whole training loop on its share of the groups (`shard`), gradients are summed across
    processes before each optimizer step (`all_reduce_grads`), so all copies of the adapter stay
    identical; rank 0 writes metrics and checkpoints.
    """
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def init_process_group() -> tuple[int, int]:
    """Join the process group `accelerate launch` (or torchrun) prepared, when there is one, and
    pin this process to its GPU. Returns (rank, world size)."""
    import os

    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        from accelerate import PartialState

        PartialState()  # initialises torch.distributed and sets the CUDA device of this rank
    return process_group()


def shard(items: Sequence[Any], *, rank: int, world: int) -> list[Any]:
    """This rank's share of a step's groups: items rank, rank + world, ..."""
    return list(items[rank::world])


def all_reduce_sum(value: float) -> float:
    """Sum of a float over all processes (the value itself without a process group)."""
    import torch
    import torch.distributed as dist

    if process_group()[1] == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device="cuda" if torch.cuda.is_available() else "cpu")
    dist.all_reduce(t)
    return float(t.item())


def all_reduce_grads(params: Sequence[Any]) -> None:
    """Sum the gradients of `params` over all processes, in place (missing gradients count as 0).

    Each process normalised its loss by the token count of the whole step (`all_reduce_sum`), so
    the sum is exactly the single-process gradient of the whole batch.
    """
    import torch
    import torch.distributed as dist

    if process_group()[1] == 1:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        dist.all_reduce(p.grad)


def gather_objects(items: list[Any]) -> list[Any]:
    """Every process's `items`, concatenated in rank order (the list itself without a group)."""
    import torch.distributed as dist

    rank, world = process_group()
    if world == 1:
        return items
    out: list[Any] = [None] * world
    dist.all_gather_object(out, items)
    return [x for part in out for x in part]
